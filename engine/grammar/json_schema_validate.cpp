// Values checked against schemas, as the converter needs to: enum and
// const values against the other keywords, property names, oneOf branches
// (json_schema_converter.h).
#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar::schema {

const std::vector<RegexBranch>& Converter::regex(const std::string& pattern, const std::string& ptr) {
  auto it = regexes_.find(pattern);
  if (it == regexes_.end()) it = regexes_.emplace(pattern, parse_regex(pattern, ptr)).first;
  return it->second;
}

// The schema a property of this name meets: its own, those of the
// patterns it matches, else additionalProperties; false where the name
// fails propertyNames.
Node Converter::prop_schema(const Simple& s, std::string_view name) {
  const ojson key(std::string{name});
  for (const Node& pn : s.property_names)
    if (!satisfies(key, pn)) return Node{&kFalseSchema, pn.ptr};
  std::optional<Node> r;
  auto add = [&](const Node& n) { r = r ? both(*r, n) : n; };
  if (const Node* n = find_prop(s, name)) add(*n);
  const std::vector<uint32_t> cps = decode_utf8(name);
  for (const auto& pp : s.pattern_props)
    if (regex_search(regex(pp.regex, pp.ptr), cps)) add(pp.schema);
  if (!r) return s.additional ? *s.additional : Node{&kTrueSchema, s.ptr};
  return *r;
}

bool Converter::validates(const ojson& v) {
  possible_ = true;
  return satisfies(v, Node{&doc_, ""});
}

namespace {

// Every subschema a simple schema holds.
std::vector<const Node*> children(const Simple& s) {
  std::vector<const Node*> out;
  for (const auto& p : s.props) out.push_back(&p.second);
  for (const auto& pp : s.pattern_props) out.push_back(&pp.schema);
  if (s.additional) out.push_back(&*s.additional);
  for (const Node& n : s.property_names) out.push_back(&n);
  for (const Node& n : s.contains) out.push_back(&n);
  for (const Node& n : s.prefix) out.push_back(&n);
  if (s.rest) out.push_back(&*s.rest);
  return out;
}

}  // namespace

void Converter::read_whole() {
  possible_ = true;
  std::set<const ojson*> seen;
  std::vector<std::pair<Node, int>> todo{{Node{&doc_, ""}, 0}};
  while (!todo.empty()) {
    auto [n, depth] = std::move(todo.back());
    todo.pop_back();
    if (!seen.insert(n.s).second) continue;
    if (depth > limits_.max_depth) throw SchemaError("limits", n.ptr, "subschemas nest deeper than max_depth");
    for (const Simple& s : expand(n)) {
      for (const auto& [pattern, ptr] : s.patterns) regex(pattern, ptr);
      for (const auto& pp : s.pattern_props) regex(pp.regex, pp.ptr);
      for (const Node* c : children(s)) todo.emplace_back(*c, depth + 1);
    }
  }
}

// Whether `v` validates against the schema (formats as this profile
// writes them).
bool Converter::satisfies(const ojson& v, const Node& n, int depth) {
  if (n.s->is_boolean()) return n.s->get<bool>();
  if (depth > limits_.max_depth)
    throw SchemaError("limits", n.ptr, "checking a value against the schema nests deeper than max_depth");
  for (const Simple& s : expand(n))
    if (satisfies_simple(v, s, depth)) return true;
  return false;
}

bool Converter::satisfies_simple(const ojson& v, const Simple& s, int depth) {
  const unsigned t = value_type(v);
  if (!(t & s.types)) return false;
  if (s.has_values && std::none_of(s.values.begin(), s.values.end(), [&](const ojson& w) { return same_value(v, w); }))
    return false;
  if (t == kString) return satisfies_string(v, s);
  if (t == kInteger || t == kFraction) return satisfies_number(v, s);
  if (t == kArray) return satisfies_array(v, s, depth);
  if (t == kObject) return satisfies_object(v, s, depth);
  return true;
}

// The values of s (enum, const) that meet its other keywords too.
std::vector<ojson> Converter::allowed_values(const Simple& s) {
  Simple rest = s;
  rest.has_values = false;
  std::vector<ojson> out;
  for (const ojson& v : s.values)
    if ((value_type(v) & s.types) && (s.constraints.empty() || satisfies_simple(v, rest, 0))) out.push_back(v);
  return out;
}

bool Converter::satisfies_string(const ojson& v, const Simple& s) {
  const std::string& str = v.get_ref<const std::string&>();
  const std::vector<uint32_t> cps = decode_utf8(str);
  const auto len = static_cast<int64_t>(cps.size());
  if (len < s.min_len || (s.max_len >= 0 && len > s.max_len)) return false;
  if (std::find(s.not_in.begin(), s.not_in.end(), str) != s.not_in.end()) return false;
  for (const auto& [p, ptr] : s.patterns)
    if (!regex_search(regex(p, ptr), cps)) return false;
  if (!s.format.empty()) {
    // What the grammar writes: the profile's format; what a validator
    // may accept: the exact one (any string for generation's host names).
    if (possible_) {
      if (s.format != "hostname" && !expr_matches(exact_format_content(s.format), cps)) return false;
    } else if (!expr_matches(format_content(s.format), cps)) {
      return false;
    }
  }
  return true;
}

bool Converter::satisfies_number(const ojson& v, const Simple& s) {
  const Decimal x = decimal_of(v);
  const int lo = s.lo.set ? compare(x, s.lo.value) : 1, hi = s.hi.set ? compare(x, s.hi.value) : -1;
  if (lo < 0 || (lo == 0 && s.lo.exclusive) || hi > 0 || (hi == 0 && s.hi.exclusive)) return false;
  for (const auto& [m, ptr] : s.multiples)
    if (!multiple_of(x, m, ptr)) return false;
  return true;
}

bool Converter::satisfies_array(const ojson& v, const Simple& s, int depth) {
  const auto size = static_cast<int64_t>(v.size());
  if (size < s.min_items || (s.max_items >= 0 && size > s.max_items)) return false;
  for (size_t i = 0; i < v.size(); ++i) {
    const Node item = i < s.prefix.size() ? s.prefix[i] : s.rest ? *s.rest : Node{&kTrueSchema, s.ptr};
    if (!satisfies(v[i], item, depth + 1)) return false;
  }
  for (const Node& c : s.contains)
    if (std::none_of(v.begin(), v.end(), [&](const ojson& x) { return satisfies(x, c, depth + 1); })) return false;
  if (s.unique)
    for (size_t i = 0; i < v.size(); ++i)
      for (size_t j = i + 1; j < v.size(); ++j)
        if (same_value(v[i], v[j])) return false;
  return true;
}

bool Converter::satisfies_object(const ojson& v, const Simple& s, int depth) {
  const auto size = static_cast<int64_t>(v.size());
  if (size < s.min_props || (s.max_props >= 0 && size > s.max_props)) return false;
  for (const std::string& k : s.required)
    if (!v.contains(k)) return false;
  for (const auto& [k, x] : v.items())
    if (!satisfies(x, prop_schema(s, k), depth + 1)) return false;
  return true;
}

}  // namespace troupe::grammar::schema
