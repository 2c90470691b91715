// Conjunctions (allOf, and what is merged like it): simple schemas merged
// keyword by keyword, and schemas the converter writes kept in an arena
// (json_schema_converter.h).
#include <algorithm>

#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar::schema {

// A schema for "both": the one if the other says nothing, else an allOf.
Node Converter::both(const Node& x, const Node& y) {
  if (is_false(x) || is_true(y)) return x;
  if (is_false(y) || is_true(x)) return y;
  if (x.s == y.s) return x;
  ojson conj = ojson::object();
  conj["allOf"] = ojson::array({*x.s, *y.s});
  std::string key = conj.dump();
  if (auto it = arena_index_.find(key); it != arena_index_.end()) return Node{it->second, x.ptr};
  arena_bytes_ += key.size();
  if (arena_bytes_ > 4 * limits_.max_schema_bytes)
    throw SchemaError("allOf", x.ptr, "merging the schema's conjunctions grows it past 4 times max_schema_bytes");
  arena_.push_back(std::move(conj));
  arena_index_.emplace(std::move(key), &arena_.back());
  return Node{&arena_.back(), x.ptr};
}

std::optional<Simple> Converter::merge(const Simple& a, const Simple& b) {
  Simple r = a;
  r.types = a.types & b.types;
  if (!r.types) return std::nullopt;
  if (b.has_values) {
    if (!a.has_values) {
      r.values = b.values;
    } else {
      r.values.clear();
      for (const ojson& v : a.values)
        if (std::any_of(b.values.begin(), b.values.end(), [&](const ojson& w) { return same_value(v, w); }))
          r.values.push_back(v);
    }
    r.has_values = true;
    r.values_keyword = b.values_keyword;
  }
  r.constraints.insert(r.constraints.end(), b.constraints.begin(), b.constraints.end());
  r.min_len = std::max(a.min_len, b.min_len);
  r.not_in.insert(r.not_in.end(), b.not_in.begin(), b.not_in.end());
  r.contains.insert(r.contains.end(), b.contains.begin(), b.contains.end());
  r.unique = a.unique || b.unique;
  r.max_len = min_of(a.max_len, b.max_len);
  for (const auto& p : b.patterns)
    if (std::none_of(r.patterns.begin(), r.patterns.end(), [&](const auto& q) { return q.first == p.first; }))
      r.patterns.push_back(p);
  if (!b.format.empty()) {
    if (!a.format.empty() && a.format != b.format)
      throw SchemaError("format", b.format_ptr, "formats '" + a.format + "' and '" + b.format + "' cannot both be enforced");
    r.format = b.format, r.format_ptr = b.format_ptr;
  }
  tighten(r.lo, b.lo, true);
  r.multiples.insert(r.multiples.end(), b.multiples.begin(), b.multiples.end());
  tighten(r.hi, b.hi, false);
  merge_objects(a, b, r);
  merge_arrays(a, b, r);
  r.min_items = std::max(a.min_items, b.min_items);
  r.max_items = min_of(a.max_items, b.max_items);
  r.min_props = std::max(a.min_props, b.min_props);
  r.max_props = min_of(a.max_props, b.max_props);
  return r;
}

void Converter::merge_objects(const Simple& a, const Simple& b, Simple& r) {
  r.props.clear();
  // additionalProperties of one side applies to the other's extra names.
  for (const auto& [k, n] : a.props) r.props.emplace_back(k, both(n, prop_schema(b, k)));
  for (const auto& [k, n] : b.props)
    if (!find_prop(a, k)) r.props.emplace_back(k, both(prop_schema(a, k), n));
  for (const std::string& k : b.required)
    if (std::find(r.required.begin(), r.required.end(), k) == r.required.end()) r.required.push_back(k);
  // A name one side's pattern matches must also meet the other side's
  // additionalProperties, where that side has no property of the name
  // and no pattern that matches it: the patterns' complement, not held.
  for (const auto& [x, y] : {std::pair{&a, &b}, std::pair{&b, &a}})
    if (x->additional && !is_true(*x->additional) && !y->pattern_props.empty())
      throw SchemaError("patternProperties", y->pattern_props.front().ptr,
                        "merged with a schema whose additionalProperties is not true: not enforced");
  r.pattern_props = a.pattern_props;
  r.pattern_props.insert(r.pattern_props.end(), b.pattern_props.begin(), b.pattern_props.end());
  r.property_names = a.property_names;
  r.property_names.insert(r.property_names.end(), b.property_names.begin(), b.property_names.end());
  if (a.additional && b.additional) r.additional = both(*a.additional, *b.additional);
  else r.additional = a.additional ? a.additional : b.additional;
}

void Converter::merge_arrays(const Simple& a, const Simple& b, Simple& r) {
  const Node any{&kTrueSchema, a.ptr};
  auto at = [&](const Simple& s, size_t i) { return i < s.prefix.size() ? s.prefix[i] : s.rest ? *s.rest : any; };
  r.prefix.clear();
  for (size_t i = 0; i < std::max(a.prefix.size(), b.prefix.size()); ++i) r.prefix.push_back(both(at(a, i), at(b, i)));
  if (a.rest && b.rest) r.rest = both(*a.rest, *b.rest);
  else r.rest = a.rest ? a.rest : b.rest;
}

std::vector<Simple> Converter::conjoin(const std::vector<Simple>& xs, const std::vector<Simple>& ys,
                                       const std::string& kw, const std::string& ptr) {
  std::vector<Simple> out;
  for (const Simple& x : xs)
    for (const Simple& y : ys)
      if (auto m = merge(x, y)) {
        out.push_back(std::move(*m));
        if (out.size() > kMaxDisjuncts)
          throw SchemaError(kw, ptr, "more than " + std::to_string(kMaxDisjuncts) + " branches once allOf is distributed over anyOf/oneOf");
      }
  return out;
}

// A schema the converter writes (kept in the arena with the merged ones).
Node Converter::synthetic(ojson schema, const std::string& ptr) {
  std::string key = schema.dump();
  if (auto it = arena_index_.find(key); it != arena_index_.end()) return Node{it->second, ptr};
  arena_bytes_ += key.size();
  if (arena_bytes_ > 4 * limits_.max_schema_bytes)
    throw SchemaError("limits", ptr, "the schemas written for allOf, dependencies and negations grow past 4 times max_schema_bytes");
  arena_.push_back(std::move(schema));
  arena_index_.emplace(std::move(key), &arena_.back());
  return Node{&arena_.back(), ptr};
}

}  // namespace troupe::grammar::schema
