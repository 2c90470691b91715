// Arrays lowered: tuples, item counts, contains and uniqueItems as machines
// over the items (json_schema_converter.h).
#include <algorithm>
#include <functional>
#include <map>

#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar::schema {

namespace {

// Whether an array schema says nothing of the items or their count.
bool any_array(const Simple& s) {
  return s.prefix.empty() && !s.rest && s.min_items == 0 && s.max_items < 0 && s.contains.empty() && !s.unique;
}

// Distinct items from a list of values (their literals, whitespace
// after), from min to max of them. Generation writes them in the order
// listed (state: the last written); exact, in any order (state: the set
// written); and the count so far. Every state is a rule.
class UniqueStates {
 public:
  UniqueStates(RuleBuilder& b, const Layout& layout, bool exact, const std::vector<Expr>& items, int64_t min, int64_t max,
               const std::string& ptr)
      : b_(b), layout_(layout), exact_(exact), items_(items), min_(min), max_(max), ptr_(ptr) {}

  Expr start() { return state(exact_ ? 0 : -1, 0); }

 private:
  Expr state(int64_t at, int64_t count) {
    if (auto it = memo_.find({at, count}); it != memo_.end()) return ref(it->second);
    const int32_t id = b_.reserve("unique", ptr_);
    memo_.emplace(std::pair{at, count}, id);
    std::vector<Expr> alts;
    if (count >= min_) alts.push_back(empty());
    if (count < max_) {
      const Expr sep = count > 0 ? layout_.comma() : empty();
      const auto k = static_cast<int64_t>(items_.size());
      for (int64_t j = exact_ ? 0 : at + 1; j < k; ++j)
        if (!exact_ || !(at & (int64_t{1} << j)))
          alts.push_back(seq({sep, items_[static_cast<size_t>(j)], state(exact_ ? at | (int64_t{1} << j) : j, count + 1)}));
    }
    b_.define(id, alt(std::move(alts)));
    return ref(id);
  }

  RuleBuilder& b_;
  const Layout& layout_;
  const bool exact_;
  const std::vector<Expr>& items_;
  const int64_t min_, max_;
  const std::string& ptr_;
  std::map<std::pair<int64_t, int64_t>, int32_t> memo_;  // (last index or set, count)
};

}  // namespace

Expr Converter::lower_array(const Simple& s) {
  constexpr int64_t kMaxItems = 100 * int64_t{kMaxRepeat};
  if (s.min_items > kMaxItems) throw SchemaError("minItems", s.ptr, "above " + std::to_string(kMaxItems));
  if (s.max_items > kMaxItems) throw SchemaError("maxItems", s.ptr, "above " + std::to_string(kMaxItems));
  if (s.max_items >= 0 && s.min_items > s.max_items) return nothing();
  if (any_array(s)) return ref(sh_.array);
  std::vector<Node> prefix = s.prefix;
  if (s.max_items >= 0 && static_cast<int64_t>(prefix.size()) > s.max_items) prefix.resize(static_cast<size_t>(s.max_items));
  if (prefix.size() > static_cast<size_t>(kMaxRepeat)) throw SchemaError("items", s.ptr, "a tuple of more than 10000 items");
  const Expr ws = layout_.ws();
  if (s.unique && (s.max_items < 0 || s.max_items > 1 || !s.contains.empty()))
    return seq({text("["), ws, unique_items(s), text("]")});
  if (!s.contains.empty()) return seq({text("["), ws, contains_items(s), text("]")});
  return seq({text("["), ws, array_items(s, prefix), text("]")});
}

// What follows "[": the tuple's items (`prefix`), then the rest, counted.
Expr Converter::array_items(const Simple& s, const std::vector<Node>& prefix) {
  const auto k = static_cast<int64_t>(prefix.size());
  const Expr ws = layout_.ws(), sep = layout_.comma();
  const Expr rest = s.rest ? lower(*s.rest) : ref(sh_.value);
  const auto upto = [&](int64_t used) { return s.max_items < 0 ? -1 : s.max_items - used; };
  const std::string kw = s.max_items >= 0 ? "maxItems" : "minItems";
  if (k == 0) {
    const Expr more = counted(seq({sep, rest, ws}), std::max<int64_t>(s.min_items - 1, 0), upto(1), kw, s.ptr);
    const Expr some = seq({rest, ws, more});
    return s.max_items == 0 ? empty() : s.min_items == 0 ? opt(some) : some;
  }
  // The rest after the tuple, then the tuple's items from the last:
  // each present (required below minItems) or the array ends there.
  Expr body = counted(seq({sep, rest, ws}), std::max<int64_t>(s.min_items - k, 0), upto(k), kw, s.ptr);
  for (int64_t i = k - 1; i >= 0; --i) {
    Expr present = seq({i == 0 ? empty() : sep, lower(prefix[static_cast<size_t>(i)]), ws, std::move(body)});
    body = i < s.min_items ? std::move(present) : alt({std::move(present), empty()});
    if (i % 8 == 7) body = ref(b_.intern("tuple", std::move(body)));
  }
  return body;
}

// uniqueItems where the items have finitely many values (enum, const,
// booleans, null): generation writes distinct values in the order the
// schema lists them (states: the last written); exact, in any order
// (states: the set written, up to 12 values).
Expr Converter::unique_items(const Simple& s) {
  const std::string ptr = s.ptr;
  if (!s.prefix.empty() || !s.contains.empty())
    throw SchemaError("uniqueItems", ptr, "beside prefixItems or contains: not enforced");
  if (!s.rest) throw SchemaError("uniqueItems", ptr, "a grammar cannot compare array items of any value with each other");
  const std::vector<ojson> values = finite_values(*s.rest, ptr);
  const auto k = static_cast<int64_t>(values.size());
  const int64_t max = s.max_items < 0 ? k : std::min(s.max_items, k);
  if (exact_ ? k > 12 : k * k * (max + 1) > 200000)
    throw SchemaError("uniqueItems", ptr, "distinct items from " + std::to_string(k) + " values: too many states");
  std::vector<Expr> items;
  for (const ojson& v : values) items.push_back(seq({literal(v), layout_.ws()}));
  return UniqueStates(b_, layout_, exact_, items, s.min_items, max, ptr).start();
}

// Every value an item may have, each once; throws SchemaError where that
// is no finite list.
std::vector<ojson> Converter::finite_values(const Node& items, const std::string& ptr) {
  std::vector<ojson> values;
  auto add = [&](const ojson& v) {
    if (std::none_of(values.begin(), values.end(), [&](const ojson& w) { return same_value(v, w); })) values.push_back(v);
  };
  for (const Simple& x : expand(items)) {
    if (x.has_values) {
      for (const ojson& v : allowed_values(x)) add(v);
    } else if (!(x.types & ~static_cast<unsigned>(kNull | kBool))) {
      if (x.types & kNull) add(ojson(nullptr));
      if (x.types & kBool) add(ojson(false)), add(ojson(true));
    } else {
      throw SchemaError("uniqueItems", ptr,
                        "a grammar cannot compare array items with each other (only items of finitely many values: "
                        "enum, const, booleans)");
    }
  }
  return values;
}

// Items of which one at least meets `contains`: states (items so far,
// whether one met it).
Expr Converter::contains_items(const Simple& s) {
  if (s.contains.size() > 1) throw SchemaError("contains", s.contains[1].ptr, "two contains schemas are not enforced");
  if (!s.prefix.empty()) throw SchemaError("contains", s.contains[0].ptr, "beside prefixItems: not enforced");
  const Node item = s.rest ? *s.rest : Node{&kTrueSchema, s.ptr};
  const Expr any = seq({lower(item), layout_.ws()}), hit = seq({lower(both(item, s.contains[0])), layout_.ws()});
  if (hit.kind == Expr::Kind::nothing) return nothing();  // no item can meet it: no array
  const int64_t cap = s.max_items >= 0 ? s.max_items : std::max<int64_t>(s.min_items, 1);
  if (cap > kMaxRepeat) throw SchemaError(s.max_items >= 0 ? "maxItems" : "minItems", s.ptr, "beside contains, above " + std::to_string(kMaxRepeat));
  std::map<std::pair<int64_t, bool>, int32_t> memo;
  std::function<Expr(int64_t, bool)> state = [&](int64_t c, bool found) -> Expr {
    const Expr sep = c > 0 ? layout_.comma() : empty();
    if (s.max_items < 0 && c == cap && found) return star(seq({layout_.comma(), any}));
    if (auto it = memo.find({c, found}); it != memo.end()) return ref(it->second);
    const int32_t id = b_.reserve("contains", s.ptr);
    memo.emplace(std::pair{c, found}, id);
    std::vector<Expr> alts;
    if (found && c >= s.min_items) alts.push_back(empty());
    if (s.max_items < 0 || c < s.max_items) {
      const int64_t next = s.max_items < 0 ? std::min(c + 1, cap) : c + 1;
      alts.push_back(seq({sep, hit, state(next, true)}));
      alts.push_back(seq({sep, any, state(next, found)}));
    }
    b_.define(id, alt(std::move(alts)));
    return ref(id);
  };
  return state(0, false);
}

}  // namespace troupe::grammar::schema
