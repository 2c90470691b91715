// Schemas lowered to grammar rules: one rule per subschema, a union over
// the types a simple schema allows, values as literals
// (json_schema_converter.h).
#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar::schema {

namespace {

// A rule's name from where its schema stands: the pointer's last token, an
// index with its keyword ("prefixItems-2").
std::string hint(const std::string& ptr) {
  if (ptr.empty()) return "root";
  const size_t slash = ptr.rfind('/');
  std::string last = ptr.substr(slash + 1);
  if (!last.empty() && last.find_first_not_of("0123456789") == std::string::npos && slash > 0) {
    const size_t before = ptr.rfind('/', slash - 1);
    last = ptr.substr(before + 1, slash - before - 1) + "-" + last;
  }
  return last;
}

bool only_keyword(const ojson& s, std::string_view kw) {
  if (!s.contains(kw)) return false;
  for (const auto& [k, v] : s.items())
    if (k != kw && !is_annotation(k)) return false;
  return true;
}

}  // namespace

Expr Converter::lower(const Node& n) {
  if (n.s->is_boolean()) return n.s->get<bool>() ? ref(sh_.value) : nothing();
  if (auto it = memo_.find(n.s); it != memo_.end()) return ref(it->second);
  const int32_t id = b_.reserve(hint(n.ptr), n.ptr);
  memo_[n.s] = id;
  Deeper guard(*this, n.ptr);
  b_.define(id, lower_body(n));
  return ref(id);
}

Expr Converter::lower_body(const Node& n) {
  if (n.s->is_boolean()) return n.s->get<bool>() ? ref(sh_.value) : nothing();
  if (!n.s->is_object()) throw SchemaError("schema", n.ptr, "a schema must be an object or a boolean");
  check_keywords(n);
  if (is_true(n)) return ref(sh_.value);
  if (ref_replaces(n)) return lower(resolve(n));
  // A bare anyOf/oneOf keeps its branches as rules of their own.
  for (const char* kw : {"anyOf", "oneOf"}) {
    if (!only_keyword(*n.s, kw)) continue;
    const std::vector<Node> subs = subschemas(n, kw);
    if (std::string_view(kw) == "oneOf") {
      std::vector<std::vector<Simple>> branches;
      for (const Node& sub : subs) branches.push_back(expand(sub));
      try {
        require_exclusive(branches, n.ptr);
      } catch (const SchemaError&) {
        break;  // each branch less the others: below
      }
    }
    std::vector<Expr> alts;
    for (const Node& sub : subs) alts.push_back(lower(sub));
    return alt(std::move(alts));
  }
  std::vector<Expr> alts;
  for (const Simple& s : expand(n, false)) alts.push_back(lower_simple(s));
  return alt(std::move(alts));
}

Expr Converter::lower_simple(const Simple& s) {
  if (s.has_values) {
    std::vector<Expr> alts;
    for (const ojson& v : allowed_values(s)) alts.push_back(literal(v));
    return alt(std::move(alts));
  }
  // A schema that constrains nothing is any value; generation narrows one
  // without a type to the types its keywords are about ({"minLength": 1}:
  // strings), as xgrammar does.
  if (s.types == kAllTypes && s.constraints.empty()) return ref(sh_.value);
  unsigned types = s.types;
  if (!exact_ && types == kAllTypes)
    if (const unsigned about = keyword_types(s.constraints)) types &= about;
  std::vector<Expr> alts;
  if (types & kNull) alts.push_back(ref(sh_.null));
  if (types & kBool) alts.push_back(ref(sh_.boolean));
  if (types & (kInteger | kFraction)) alts.push_back(lower_number(s));
  if (types & kString) alts.push_back(lower_string(s));
  if (types & kArray) alts.push_back(lower_array(s));
  if (types & kObject) alts.push_back(lower_object(s));
  return alt(std::move(alts));
}

Expr Converter::literal(const ojson& v) {
  const Expr ws = layout_.ws();
  switch (v.type()) {
    case ojson::value_t::null: return text("null");
    case ojson::value_t::boolean: return text(v.get<bool>() ? "true" : "false");
    case ojson::value_t::string: return quoted(v.get<std::string>());
    case ojson::value_t::array: {
      std::vector<Expr> parts{text("["), ws};
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) parts.push_back(layout_.comma());
        parts.push_back(literal(v[i]));
        parts.push_back(ws);
      }
      parts.push_back(text("]"));
      return seq(std::move(parts));
    }
    case ojson::value_t::object: {
      std::vector<Expr> parts{text("{"), ws};
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) parts.push_back(layout_.comma());
        first = false;
        for (Expr p : {quoted(k), layout_.colon(), literal(x), ws}) parts.push_back(std::move(p));
      }
      parts.push_back(text("}"));
      return seq(std::move(parts));
    }
    default: return text(number_text(v));
  }
}

// x{lo,hi} (hi -1: unbounded); counts past gbnf.cpp's cap as repeated
// blocks of 100: x{n} = (x{100}){q} x{r}, x{0,n} = (x{100}){0,q-1} x{0,99}
// | (x{100}){q} x{0,r}.
Expr Converter::counted(const Expr& x, int64_t lo, int64_t hi, const std::string& kw, const std::string& ptr) {
  constexpr int64_t kBlock = 100, kMax = kBlock * kMaxRepeat;
  if (lo > kMax || hi > kMax) throw SchemaError(kw, ptr, "above " + std::to_string(kMax));
  if (hi >= 0 && hi < lo) return nothing();
  if (lo <= kMaxRepeat && hi <= kMaxRepeat) return rep(x, static_cast<int32_t>(lo), static_cast<int32_t>(hi));
  const Expr block = ref(b_.intern("block", rep(x, kBlock, kBlock)));
  auto n32 = [](int64_t n) { return static_cast<int32_t>(n); };
  const Expr head = seq({rep(block, n32(lo / kBlock), n32(lo / kBlock)), rep(x, n32(lo % kBlock), n32(lo % kBlock))});
  if (hi < 0) return seq({head, star(x)});
  const int64_t n = hi - lo;
  if (n <= kMaxRepeat) return seq({head, rep(x, 0, n32(n))});
  const int64_t q = n / kBlock, r = n % kBlock;
  return seq({head, alt({seq({rep(block, 0, n32(q - 1)), rep(x, 0, n32(kBlock - 1))}),
                         seq({rep(block, n32(q), n32(q)), rep(x, 0, n32(r))})})});
}

}  // namespace troupe::grammar::schema
