// Types and keywords as the JSON Schema converter reads them
// (json_schema_keywords.h).
#include "engine/grammar/json_schema_keywords.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace troupe::grammar::schema {

using json = nlohmann::json;

unsigned type_bits(std::string_view name) {
  if (name == "null") return kNull;
  if (name == "boolean") return kBool;
  if (name == "object") return kObject;
  if (name == "array") return kArray;
  if (name == "string") return kString;
  if (name == "integer") return kInteger;
  if (name == "number") return kInteger | kFraction;
  return 0;
}

unsigned value_type(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return kNull;
    case ojson::value_t::boolean: return kBool;
    case ojson::value_t::object: return kObject;
    case ojson::value_t::array: return kArray;
    case ojson::value_t::string: return kString;
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned: return kInteger;
    case ojson::value_t::number_float: {
      const double d = v.get<double>();
      return std::isfinite(d) && d == std::floor(d) ? kInteger : kFraction;
    }
    default: return 0;
  }
}

bool same_value(const ojson& a, const ojson& b) { return json(a) == json(b); }

const std::set<std::string, std::less<>>& supported_keywords() {
  static const std::set<std::string, std::less<>> s{
      "type",      "enum",     "const",     "properties", "required",   "additionalProperties", "items",
      "prefixItems", "additionalItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "nullable",
      "minLength", "maxLength", "pattern",  "format",     "minimum",    "maximum",              "exclusiveMinimum",
      "exclusiveMaximum", "minProperties", "maxProperties", "patternProperties", "propertyNames", "dependencies",
      "dependentRequired", "dependentSchemas", "not", "if", "then", "else", "contains", "multipleOf", "uniqueItems",
      // What negations write (not for schemas to use): numbers that are not
      // integers, strings other than the listed.
      "$troupe:not-integer", "$troupe:not-in"};
  return s;
}

unsigned keyword_types(const std::vector<std::string>& keywords) {
  static const std::map<std::string, unsigned, std::less<>> m{
      {"minLength", kString},     {"maxLength", kString},       {"pattern", kString},         {"format", kString},
      {"format(number)", kInteger | kFraction},
      {"minimum", kInteger | kFraction}, {"maximum", kInteger | kFraction}, {"exclusiveMinimum", kInteger | kFraction},
      {"exclusiveMaximum", kInteger | kFraction}, {"multipleOf", kInteger | kFraction},
      {"properties", kObject},    {"required", kObject},        {"additionalProperties", kObject},
      {"patternProperties", kObject}, {"propertyNames", kObject}, {"minProperties", kObject}, {"maxProperties", kObject},
      {"items", kArray},          {"prefixItems", kArray},      {"additionalItems", kArray},  {"minItems", kArray},
      {"maxItems", kArray},       {"uniqueItems", kArray},      {"contains", kArray},
      {"$troupe:not-in", kString}};
  unsigned t = 0;
  for (const std::string& k : keywords) {
    auto it = m.find(k);
    if (it == m.end()) return 0;
    t |= it->second;
  }
  return t;
}

const std::map<std::string, std::string, std::less<>>& refused_keywords() {
  static const std::map<std::string, std::string, std::less<>> m{
      {"minContains", "\"some item matches\" is not enforced"},
      {"maxContains", "\"some item matches\" is not enforced"},
      {"unevaluatedProperties", "annotation-dependent validation is not enforced"},
      {"unevaluatedItems", "annotation-dependent validation is not enforced"},
      {"$dynamicRef", "dynamic references are not supported"},
      {"$recursiveRef", "dynamic references are not supported"},
      {"extends", "draft 3's extends is not supported (use allOf)"},
      {"disallow", "draft 3's disallow is not supported (use not)"},
      {"divisibleBy", "draft 3's divisibleBy is not supported"},
  };
  return m;
}

namespace {

// Exactly one insertion, deletion, substitution or swap of neighbours apart.
bool one_edit(std::string_view a, std::string_view b) {
  if (a.size() > b.size()) std::swap(a, b);
  size_t i = 0;
  while (i < a.size() && a[i] == b[i]) ++i;
  if (a.size() + 1 == b.size()) return a.substr(i) == b.substr(i + 1);
  if (a.size() != b.size() || i == a.size()) return false;
  if (a.substr(i + 1) == b.substr(i + 1)) return true;
  return i + 1 < a.size() && a[i] == b[i + 1] && a[i + 1] == b[i] && a.substr(i + 2) == b.substr(i + 2);
}

}  // namespace

// The validation keyword an unknown keyword is probably a misspelling of:
// the same but for case (minlength), or one edit from a long one
// (additonalProperties). Names starting with '_' or '$' or "x-" are never.
std::string misspelt(std::string_view k) {
  if (k.empty() || !std::isalpha(static_cast<unsigned char>(k[0])) || k.substr(0, 2) == "x-") return "";
  auto iequal = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
  };
  auto check = [&](const std::string& v) { return v != k && (iequal(k, v) || (v.size() >= 8 && one_edit(k, v))); };
  for (const std::string& v : supported_keywords())
    if (check(v)) return v;
  for (const auto& [v, why] : refused_keywords())
    if (check(v)) return v;
  return "";
}

bool is_annotation(std::string_view k) {
  return !supported_keywords().count(k) && !refused_keywords().count(k) && misspelt(k).empty();
}

std::string escape_pointer_token(std::string_view t) {
  std::string out;
  for (char c : t) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

bool is_false(const Node& n) { return n.s->is_boolean() && !n.s->get<bool>(); }

bool is_true(const Node& n) {
  if (n.s->is_boolean()) return n.s->get<bool>();
  if (!n.s->is_object()) return false;
  for (const auto& [k, v] : n.s->items())
    if (!is_annotation(k)) return false;
  return true;
}

void tighten(Bound& b, const Bound& nb, bool lower) {
  if (!nb.set) return;
  if (!b.set) {
    b = nb;
    return;
  }
  const int c = compare(nb.value, b.value);
  const bool tighter = lower ? c > 0 : c < 0;
  if (tighter || (c == 0 && nb.exclusive && !b.exclusive)) b = nb;
}

const Node* find_prop(const Simple& s, std::string_view name) {
  for (const auto& [k, n] : s.props)
    if (k == name) return &n;
  return nullptr;
}

int64_t min_of(int64_t a, int64_t b) { return a < 0 ? b : b < 0 ? a : std::min(a, b); }

}  // namespace troupe::grammar::schema
