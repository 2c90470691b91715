// Negation: a schema without `not` for exactly the instances a schema
// rejects, keyword by keyword (json_schema_converter.h).
#include <algorithm>
#include <map>

#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar::schema {

namespace {

// A schema for the types in `bits` (numbers that are not integers: an
// internal keyword).
ojson types_schema(unsigned bits) {
  std::vector<std::string> names;
  for (const auto& [bit, name] : std::vector<std::pair<unsigned, const char*>>{
           {kNull, "null"}, {kBool, "boolean"}, {kObject, "object"}, {kArray, "array"}, {kString, "string"}})
    if (bits & bit) names.push_back(name);
  std::vector<ojson> parts;
  if (!names.empty()) parts.push_back(ojson{{"type", names}});
  if ((bits & kInteger) && (bits & kFraction)) parts.push_back(ojson{{"type", "number"}});
  else if (bits & kInteger) parts.push_back(ojson{{"type", "integer"}});
  else if (bits & kFraction) parts.push_back(ojson{{"type", "number"}, {"$troupe:not-integer", true}});
  if (parts.empty()) return false;
  if (parts.size() == 1) return parts.front();
  return ojson{{"anyOf", parts}};
}

// Every value but these: strings other than the listed, numbers between
// the listed, the other boolean, null, arrays and objects where none is
// listed.
ojson values_outside(const std::vector<ojson>& values, const std::string& ptr) {
  std::vector<std::string> strings;
  std::vector<ojson> numbers;
  bool has_true = false, has_false = false, has_null = false;
  for (const ojson& v : values) {
    if (v.is_string()) strings.push_back(v.get<std::string>());
    else if (v.is_number()) numbers.push_back(v);
    else if (v.is_boolean()) (v.get<bool>() ? has_true : has_false) = true;
    else if (v.is_null()) has_null = true;
    else throw SchemaError("enum", ptr, "cannot be negated: an array or object value");
  }
  std::vector<ojson> parts;
  parts.push_back(strings.empty() ? ojson{{"type", "string"}} : ojson{{"type", "string"}, {"$troupe:not-in", strings}});
  std::sort(numbers.begin(), numbers.end(), [](const ojson& a, const ojson& b) { return compare(decimal_of(a), decimal_of(b)) < 0; });
  if (numbers.empty()) {
    parts.push_back(ojson{{"type", "number"}});
  } else {
    parts.push_back(ojson{{"type", "number"}, {"exclusiveMaximum", numbers.front()}});
    for (size_t i = 0; i + 1 < numbers.size(); ++i)
      if (compare(decimal_of(numbers[i]), decimal_of(numbers[i + 1])) < 0)
        parts.push_back(ojson{{"type", "number"}, {"exclusiveMinimum", numbers[i]}, {"exclusiveMaximum", numbers[i + 1]}});
    parts.push_back(ojson{{"type", "number"}, {"exclusiveMinimum", numbers.back()}});
  }
  if (!has_true || !has_false) parts.push_back(has_true ? ojson{{"const", false}} : has_false ? ojson{{"const", true}} : ojson{{"type", "boolean"}});
  if (!has_null) parts.push_back(ojson{{"type", "null"}});
  parts.push_back(ojson{{"type", ojson::array({"array", "object"})}});
  return ojson{{"anyOf", parts}};
}

ojson typed(const char* type, ojson rest) {
  rest["type"] = type;
  return rest;
}

// Draft 4 wrote exclusiveMinimum: true beside minimum.
bool draft4_exclusive(const ojson& s, const char* kw) {
  return s.contains(kw) && s[kw].is_boolean() && s[kw].get<bool>();
}

}  // namespace

// One schema being negated: where its negation nests, and the ways to fail
// it (any one will do), which each keyword adds to in turn.
struct Converter::Negation {
  Converter& c;
  const Node& n;
  int depth;
  bool draft4_min, draft4_max;  // draft 4's exclusiveMinimum/exclusiveMaximum: true
  std::vector<ojson> any;

  std::string at(const std::string& kw) const { return n.ptr + "/" + escape_pointer_token(kw); }
  [[noreturn]] void refuse(const std::string& kw, const std::string& why) const {
    throw SchemaError(kw, at(kw), "cannot be negated: " + why);
  }

  void keyword(const std::string& k, const ojson& v) {
    using Step = void (Negation::*)(const std::string&, const ojson&);
    static const std::map<std::string, Step, std::less<>> kSteps{
        {"enum", &Negation::values},
        {"const", &Negation::values},
        {"$troupe:not-in", &Negation::not_in},
        {"minLength", &Negation::count},
        {"maxLength", &Negation::count},
        {"minItems", &Negation::count},
        {"maxItems", &Negation::count},
        {"minProperties", &Negation::count},
        {"maxProperties", &Negation::count},
        {"minimum", &Negation::bound},
        {"maximum", &Negation::bound},
        {"exclusiveMinimum", &Negation::bound},
        {"exclusiveMaximum", &Negation::bound},
        {"required", &Negation::required},
        {"properties", &Negation::properties},
        {"additionalProperties", &Negation::additional_properties},
        {"items", &Negation::items},
        {"contains", &Negation::contains},
        {"uniqueItems", &Negation::unique_items},
        {"dependencies", &Negation::dependencies},
        {"dependentRequired", &Negation::dependencies},
        {"dependentSchemas", &Negation::dependencies},
        {"allOf", &Negation::all_or_any_of},
        {"anyOf", &Negation::all_or_any_of},
        {"oneOf", &Negation::one_of},
        {"not", &Negation::negated_not},
        {"if", &Negation::if_then_else},
        {"then", &Negation::with_if},
        {"else", &Negation::with_if},
        {"$ref", &Negation::reference},
    };
    const auto it = kSteps.find(k);
    if (it == kSteps.end()) refuse(k, "not supported");
    (this->*it->second)(k, v);
  }

  void values(const std::string& k, const ojson& v) {
    any.push_back(values_outside(k == "const" ? std::vector<ojson>{v} : std::vector<ojson>(v.begin(), v.end()), at(k)));
  }

  void not_in(const std::string&, const ojson& v) { any.push_back(typed("string", ojson{{"enum", v}})); }

  void count(const std::string& k, const ojson& v) {
    const int64_t c = count_value(v, k, at(k));
    const bool min = k.substr(0, 3) == "min";
    const std::string what = k.substr(3);
    const char* type = what == "Length" ? "string" : what == "Items" ? "array" : "object";
    if (min && c > 0) any.push_back(typed(type, ojson{{"max" + what, c - 1}}));
    if (!min) any.push_back(typed(type, ojson{{"min" + what, c + 1}}));
  }

  void bound(const std::string& k, const ojson& v) {
    if (!v.is_number()) return;  // draft 4's booleans go with their bound
    const bool lower = k == "minimum" || k == "exclusiveMinimum";
    const bool exclusive = k.substr(0, 9) == "exclusive" || (k == "minimum" && draft4_min) || (k == "maximum" && draft4_max);
    // Below an inclusive lower bound, or at or below an exclusive one.
    const std::string flipped = lower ? (exclusive ? "maximum" : "exclusiveMaximum") : (exclusive ? "minimum" : "exclusiveMinimum");
    any.push_back(typed("number", ojson{{flipped, v}}));
  }

  void required(const std::string& k, const ojson& v) {
    for (const std::string& name : string_list(v, k, at(k))) any.push_back(typed("object", ojson{{"properties", {{name, false}}}}));
  }

  void properties(const std::string& k, const ojson& v) {
    if (!v.is_object()) refuse(k, "not an object");
    for (const auto& [name, sub] : v.items()) {
      const ojson neg = c.negate(c.child(n, sub, "/properties/" + escape_pointer_token(name)), depth + 1);
      if (neg.is_boolean() && !neg.get<bool>()) continue;
      any.push_back(typed("object", ojson{{"required", {name}}, {"properties", {{name, neg}}}}));
    }
  }

  void additional_properties(const std::string& k, const ojson& v) {
    if (!is_true(c.child(n, v, "/additionalProperties"))) refuse(k, "\"some other property\" is not written");
  }

  void items(const std::string& k, const ojson& v) {
    if (v.is_array()) refuse(k, "not supported");
    const ojson neg = c.negate(c.child(n, v, "/items"), depth + 1);
    if (!(neg.is_boolean() && !neg.get<bool>())) {
      if (n.s->contains("prefixItems")) refuse(k, "beside prefixItems");
      any.push_back(typed("array", ojson{{"contains", neg}}));
    }
  }

  void contains(const std::string&, const ojson& v) {
    any.push_back(typed("array", ojson{{"items", c.negate(c.child(n, v, "/contains"), depth + 1)}}));
  }

  void unique_items(const std::string& k, const ojson& v) {
    if (v.is_boolean() && v.get<bool>()) refuse(k, "\"two items are equal\" is not written");
  }

  void dependencies(const std::string& k, const ojson& v) {
    if (!v.is_object()) refuse(k, "not an object");
    for (const auto& [name, dep] : v.items()) {
      if (dep.is_array()) {
        for (const std::string& r : string_list(dep, k, at(k)))
          any.push_back(typed("object", ojson{{"required", {name}}, {"properties", {{r, false}}}}));
      } else {
        const ojson neg = c.negate(c.child(n, dep, "/" + k + "/" + escape_pointer_token(name)), depth + 1);
        any.push_back(ojson{{"allOf", ojson::array({typed("object", ojson{{"required", {name}}}), neg})}});
      }
    }
  }

  void all_or_any_of(const std::string& k, const ojson&) {
    std::vector<ojson> parts;
    for (const Node& sub : c.subschemas(n, k)) parts.push_back(c.negate(sub, depth + 1));
    if (k == "allOf") any.insert(any.end(), parts.begin(), parts.end());
    else any.push_back(ojson{{"allOf", parts}});
  }

  // None matches, or two do.
  void one_of(const std::string& k, const ojson&) {
    const std::vector<Node> subs = c.subschemas(n, k);
    std::vector<ojson> none;
    for (const Node& sub : subs) none.push_back(c.negate(sub, depth + 1));
    any.push_back(ojson{{"allOf", none}});
    if (subs.size() * (subs.size() - 1) / 2 > kMaxDisjuncts) refuse(k, "too many pairs of branches");
    for (size_t i = 0; i < subs.size(); ++i)
      for (size_t j = i + 1; j < subs.size(); ++j) any.push_back(ojson{{"allOf", ojson::array({*subs[i].s, *subs[j].s})}});
  }

  void negated_not(const std::string&, const ojson& v) { any.push_back(v); }

  // (if and not then) or (not if and not else)
  void if_then_else(const std::string&, const ojson& v) {
    const ojson& s = *n.s;
    const ojson then = s.contains("then") ? c.negate(c.child(n, s["then"], "/then"), depth + 1) : ojson(false);
    const ojson other = s.contains("else") ? c.negate(c.child(n, s["else"], "/else"), depth + 1) : ojson(false);
    any.push_back(ojson{{"anyOf", ojson::array({ojson{{"allOf", ojson::array({v, then})}},
                                                ojson{{"allOf", ojson::array({c.negate(c.child(n, v, "/if"), depth + 1), other})}}})}});
  }

  void with_if(const std::string&, const ojson&) {}  // then and else are negated with their if

  void reference(const std::string&, const ojson&) { any.push_back(c.negate(c.resolve(n), depth + 1)); }
};

// A schema (without `not`) for exactly the instances `n` rejects; throws
// SchemaError naming a keyword that cannot be negated.
ojson Converter::negate(const Node& n, int depth) {
  if (depth > limits_.max_depth) throw SchemaError("not", n.ptr, "negations nest deeper than max_depth");
  const ojson& s = *n.s;
  if (s.is_boolean()) return !s.get<bool>();
  if (!s.is_object()) throw SchemaError("schema", n.ptr, "a schema must be an object or a boolean");
  check_keywords(n);
  if (ref_replaces(n)) return negate(resolve(n), depth + 1);
  Negation neg{*this, n, depth, draft4_exclusive(s, "exclusiveMinimum"), draft4_exclusive(s, "exclusiveMaximum"), {}};
  Simple types;
  read_types(s, types, KeywordAt{n.ptr});
  if (types.types != kAllTypes) neg.any.push_back(types_schema(kAllTypes & ~types.types));
  for (const auto& [k, v] : s.items())
    if (!(k == "type" || k == "nullable" || k == "$troupe:not-integer" || is_annotation(k))) neg.keyword(k, v);
  if (neg.any.empty()) return false;
  if (neg.any.size() == 1) return neg.any.front();
  return ojson{{"anyOf", neg.any}};
}

}  // namespace troupe::grammar::schema
