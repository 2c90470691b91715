// oneOf: the union of its branches where they provably cannot overlap,
// else each branch less the others (json_schema_converter.h).
#include <algorithm>

#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar::schema {

namespace {

unsigned effective_types(const Simple& s) {
  if (!s.has_values) return s.types;
  unsigned t = 0;
  for (const ojson& v : s.values) t |= value_type(v);
  return t & s.types;
}

bool ranges_apart(const Bound& lo1, const Bound& hi1, const Bound& lo2, const Bound& hi2) {
  auto below = [](const Bound& hi, const Bound& lo) {
    if (!hi.set || !lo.set) return false;
    const int c = compare(hi.value, lo.value);
    return c < 0 || (c == 0 && (hi.exclusive || lo.exclusive));
  };
  return below(hi1, lo2) || below(hi2, lo1);
}

bool counts_apart(int64_t min1, int64_t max1, int64_t min2, int64_t max2) {
  return (max1 >= 0 && max1 < min2) || (max2 >= 0 && max2 < min1);
}

}  // namespace

// oneOf: the union of its branches where they cannot overlap, else of
// each branch less the others (where they can be negated).
std::vector<Simple> Converter::one_of(const std::vector<Simple>& base, const Node& n) {
  const std::vector<Node> subs = subschemas(n, "oneOf");
  std::vector<std::vector<Simple>> branches;
  for (const Node& sub : subs) branches.push_back(conjoin(base, expand(sub), "oneOf", n.ptr));
  std::vector<Simple> out;
  try {
    require_exclusive(branches, n.ptr);
    for (auto& br : branches)
      for (Simple& x : br) out.push_back(std::move(x));
    return out;
  } catch (const SchemaError& overlap) {
    std::vector<Node> negated;
    for (const Node& sub : subs) {
      try {
        negated.push_back(synthetic(negate(sub), sub.ptr));
      } catch (const SchemaError& e) {
        throw SchemaError("oneOf", n.ptr, std::string(overlap.what()).substr(overlap.pointer().size() + 9) +
                                              "; branch " + sub.ptr.substr(n.ptr.size() + 7) + " cannot be negated (" +
                                              e.keyword() + ")");
      }
    }
    for (size_t i = 0; i < subs.size(); ++i) {
      std::vector<Simple> br = branches[i];
      for (size_t j = 0; j < subs.size(); ++j)
        if (j != i) br = conjoin(br, expand(negated[j]), "oneOf", n.ptr);
      for (Simple& x : br) out.push_back(std::move(x));
    }
    return out;
  }
}

// Exact: no instance matches two branches. Generation: no instance a
// branch's grammar writes matches another branch.
void Converter::require_exclusive(const std::vector<std::vector<Simple>>& branches, const std::string& ptr) {
  for (size_t i = 0; i < branches.size(); ++i)
    for (size_t j = exact_ ? i + 1 : 0; j < branches.size(); ++j) {
      if (i == j) continue;
      for (const Simple& a : branches[i])
        for (const Simple& b : branches[j])
          if (!disjoint(a, b, 0))
            throw SchemaError("oneOf", ptr,
                              "branches " + std::to_string(std::min(i, j)) + " and " + std::to_string(std::max(i, j)) +
                                  " may both match, and a grammar cannot enforce that only one does");
    }
}

// The types the grammar of `s` writes.
unsigned Converter::written_types(const Simple& s) const {
  unsigned t = effective_types(s);
  if (!exact_ && !s.has_values && s.types == kAllTypes && !s.constraints.empty())
    if (const unsigned about = keyword_types(s.constraints)) t &= about;
  return t;
}

// Generation: the names an object a writes may have, where it writes no
// others (no other names allowed, no patterns); none: any.
std::optional<std::vector<std::string>> Converter::written_names(const Simple& a) {
  if (exact_ || !a.pattern_props.empty() || (a.additional && !is_false(*a.additional))) return std::nullopt;
  std::vector<std::string> names;
  for (const auto& [k, n] : a.props)
    if (!is_false(n)) names.push_back(k);
  for (const std::string& k : a.required)
    if (!find_prop(a, k)) names.push_back(k);
  return names;
}

// Exact: whether no instance validates against both. Generation: whether
// no instance a's grammar writes validates against b.
bool Converter::disjoint(const Simple& a, const Simple& b, int depth) {
  const unsigned common = written_types(a) & effective_types(b);
  if (!common) return true;
  if (a.has_values || b.has_values) {
    const Simple& finite = a.has_values ? a : b;
    const Simple& other = a.has_values ? b : a;
    for (const ojson& v : finite.values)
      if ((value_type(v) & finite.types) && !fails(v, other, depth)) return false;
    return true;
  }
  for (unsigned t = 1; t < kAllTypes; t <<= 1) {
    if (!(common & t)) continue;
    bool apart = false;
    if (t == kInteger || t == kFraction) apart = ranges_apart(a.lo, a.hi, b.lo, b.hi);
    else if (t == kString) apart = counts_apart(a.min_len, a.max_len, b.min_len, b.max_len);
    else if (t == kArray) apart = counts_apart(a.min_items, a.max_items, b.min_items, b.max_items);
    else if (t == kObject)
      apart = counts_apart(a.min_props, a.max_props, b.min_props, b.max_props) || objects_apart(a, b, depth) ||
              names_apart(a, b);
    if (!apart) return false;
  }
  return true;
}

bool Converter::forbids(const Simple& s, const std::string& name) { return is_false(prop_schema(s, name)); }

// Generation: b requires a name a never writes.
bool Converter::names_apart(const Simple& a, const Simple& b) {
  const auto names = written_names(a);
  if (!names) return false;
  for (const std::string& k : b.required)
    if (std::find(names->begin(), names->end(), k) == names->end()) return true;
  return b.min_props > static_cast<int64_t>(names->size());
}

bool Converter::objects_apart(const Simple& a, const Simple& b, int depth) {
  try {
    return objects_apart_or_throw(a, b, depth);
  } catch (const SchemaError&) {
    return false;
  }
}

bool Converter::objects_apart_or_throw(const Simple& a, const Simple& b, int depth) {
  for (const std::string& k : a.required)
    if (forbids(b, k)) return true;
  for (const std::string& k : b.required)
    if (forbids(a, k)) return true;
  for (const std::string& k : a.required)
    if (std::find(b.required.begin(), b.required.end(), k) != b.required.end() &&
        nodes_apart(prop_schema(a, k), prop_schema(b, k), depth + 1))
      return true;
  return false;
}

bool Converter::nodes_apart(const Node& x, const Node& y, int depth) {
  if (depth > 8) return false;
  std::vector<Simple> xs, ys;
  try {
    xs = expand(x);
    ys = expand(y);
  } catch (const SchemaError&) {
    return false;  // lowering will name the problem
  }
  for (const Simple& a : xs)
    for (const Simple& b : ys)
      if (!disjoint(a, b, depth)) return false;
  return true;
}

// Whether `v` certainly fails `s` (false: it may pass, or checking it
// failed).
bool Converter::fails(const ojson& v, const Simple& s, int depth) {
  const bool was = possible_;
  possible_ = true;
  bool failed = false;
  try {
    failed = !satisfies_simple(v, s, depth);
  } catch (const SchemaError&) {
    failed = false;
  }
  possible_ = was;
  return failed;
}

}  // namespace troupe::grammar::schema
