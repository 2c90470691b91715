// One schema object read into a Simple: its types, values and the
// constraints of each type (json_schema_converter.h).
#include <algorithm>
#include <cmath>

#include "engine/grammar/json_schema_converter.h"
#include "engine/grammar/json_schema_formats.h"

namespace troupe::grammar::schema {

namespace {

void set_bound(Bound& b, const ojson& v, bool exclusive, const std::string& kw, const std::string& ptr, bool lower) {
  if (!v.is_number()) throw SchemaError(kw, ptr, "must be a number");
  tighten(b, Bound{true, exclusive, decimal_of(v), kw, ptr, !v.is_number_float()}, lower);
}

}  // namespace

int64_t Converter::count_value(const ojson& v, const std::string& kw, const std::string& ptr) {
  const bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) ||
                  (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() == std::floor(v.get<double>()));
  if (!ok) throw SchemaError(kw, ptr, "must be a non-negative integer");
  const double d = v.get<double>();
  return d > 1e15 ? int64_t{1} << 50 : v.get<int64_t>();
}

std::vector<std::string> Converter::string_list(const ojson& v, const std::string& kw, const std::string& ptr) {
  if (!v.is_array()) throw SchemaError(kw, ptr, "must be an array of strings");
  std::vector<std::string> out;
  for (const auto& x : v) {
    if (!x.is_string()) throw SchemaError(kw, ptr, "must be an array of strings");
    if (std::find(out.begin(), out.end(), x.get<std::string>()) == out.end()) out.push_back(x.get<std::string>());
  }
  return out;
}

Simple Converter::simple_of(const Node& n) const {
  Simple r;
  r.ptr = n.ptr;
  const KeywordAt at{n.ptr};
  read_types(*n.s, r, at);
  read_values(*n.s, r, at);
  read_strings(*n.s, r, at);
  read_bounds(*n.s, r, at);
  read_object(n, r, at);
  read_array(n, r, at);
  return r;
}

void Converter::read_types(const ojson& s, Simple& r, const KeywordAt& at) {
  if (auto it = s.find("type"); it != s.end()) {
    r.types = 0;
    const std::vector<std::string> names =
        it->is_string() ? std::vector<std::string>{it->get<std::string>()} : string_list(*it, "type", at("type"));
    for (const std::string& t : names) {
      if (!type_bits(t)) throw SchemaError("type", at("type"), "unknown type '" + t + "'");
      r.types |= type_bits(t);
    }
  }
  if (auto it = s.find("nullable"); it != s.end()) {
    if (!it->is_boolean()) throw SchemaError("nullable", at("nullable"), "must be a boolean");
    if (it->get<bool>() && s.contains("type")) r.types |= kNull;
  }
  if (s.contains("$troupe:not-integer")) r.types &= ~static_cast<unsigned>(kInteger);
}

void Converter::read_values(const ojson& s, Simple& r, const KeywordAt& at) {
  if (auto it = s.find("enum"); it != s.end()) {
    if (!it->is_array()) throw SchemaError("enum", at("enum"), "must be an array");
    r.has_values = true;
    r.values_keyword = "enum";
    r.values.assign(it->begin(), it->end());
  }
  if (auto it = s.find("const"); it != s.end()) {
    std::vector<ojson> kept;
    if (!r.has_values) kept.push_back(*it);
    for (const ojson& v : r.values)
      if (same_value(v, *it)) kept.push_back(v);
    r.has_values = true;
    r.values_keyword = "const";
    r.values = std::move(kept);
  }
}

void Converter::read_strings(const ojson& s, Simple& r, const KeywordAt& at) const {
  if (auto it = s.find("minLength"); it != s.end()) {
    r.min_len = count_value(*it, "minLength", at("minLength"));
    r.constraints.push_back("minLength");
  }
  if (auto it = s.find("maxLength"); it != s.end()) {
    r.max_len = count_value(*it, "maxLength", at("maxLength"));
    r.constraints.push_back("maxLength");
  }
  if (auto it = s.find("$troupe:not-in"); it != s.end()) {
    r.not_in = string_list(*it, "$troupe:not-in", at("$troupe:not-in"));
    r.constraints.push_back("$troupe:not-in");
  }
  if (auto it = s.find("pattern"); it != s.end()) {
    if (!it->is_string()) throw SchemaError("pattern", at("pattern"), "must be a string");
    r.patterns.emplace_back(it->get<std::string>(), at("pattern"));
    r.constraints.push_back("pattern");
  }
  if (auto it = s.find("format"); it != s.end()) {
    if (!it->is_string()) throw SchemaError("format", at("format"), "must be a string");
    const std::string f = it->get<std::string>();
    if (auto range = integer_formats().find(f); range != integer_formats().end()) {
      tighten(r.lo, Bound{true, false, decimal_of(ojson(range->second.first)), "format", at("format"), true}, true);
      tighten(r.hi, Bound{true, false, decimal_of(ojson(range->second.second)), "format", at("format"), true}, false);
      r.constraints.push_back("format(number)");
    } else if (refused_formats().count(f) || (f == "hostname" && exact_)) {
      throw SchemaError("format", at("format"),
                        "format '" + f + "' is not enforced" +
                            (f == "hostname" ? " exactly (its 253-character limit); the generation profile writes a subset" : ""));
    } else if (format_regexes().count(f)) {
      r.format = f;
      r.format_ptr = at("format");
      r.constraints.push_back("format");
    }
  }
}

void Converter::read_bounds(const ojson& s, Simple& r, const KeywordAt& at) const {
  // Draft 4 wrote exclusiveMinimum: true beside minimum; later drafts a number.
  auto side = [&](const char* incl, const char* excl, Bound& b, bool lower) {
    bool draft4_exclusive = false;
    if (auto it = s.find(excl); it != s.end()) {
      if (it->is_boolean()) draft4_exclusive = it->get<bool>();
      else set_bound(b, *it, true, excl, at(excl), lower), r.constraints.push_back(excl);
    }
    if (auto it = s.find(incl); it != s.end()) {
      Bound nb;
      set_bound(nb, *it, draft4_exclusive, incl, at(incl), lower);
      tighten(b, nb, lower);
      r.constraints.push_back(incl);
    }
  };
  side("minimum", "exclusiveMinimum", r.lo, true);
  side("maximum", "exclusiveMaximum", r.hi, false);
  if (auto it = s.find("multipleOf"); it != s.end()) {
    if (!it->is_number() || decimal_of(*it).sign() <= 0) throw SchemaError("multipleOf", at("multipleOf"), "must be a number above 0");
    r.multiples.emplace_back(decimal_of(*it), at("multipleOf"));
    r.constraints.push_back("multipleOf");
  }
}

void Converter::read_object(const Node& n, Simple& r, const KeywordAt& at) const {
  const ojson& s = *n.s;
  if (auto it = s.find("properties"); it != s.end()) {
    if (!it->is_object()) throw SchemaError("properties", at("properties"), "must be an object");
    for (const auto& [k, v] : it->items()) r.props.emplace_back(k, child(n, v, "/properties/" + escape_pointer_token(k)));
    r.constraints.push_back("properties");
  }
  if (auto it = s.find("required"); it != s.end()) {
    r.required = string_list(*it, "required", at("required"));
    r.constraints.push_back("required");
  }
  if (auto it = s.find("additionalProperties"); it != s.end()) {
    r.additional = child(n, *it, "/additionalProperties");
    r.constraints.push_back("additionalProperties");
  }
  if (auto it = s.find("patternProperties"); it != s.end()) {
    if (!it->is_object()) throw SchemaError("patternProperties", at("patternProperties"), "must be an object");
    for (const auto& [k, v] : it->items()) {
      const std::string ptr = n.ptr + "/patternProperties/" + escape_pointer_token(k);
      r.pattern_props.push_back({k, ptr, child(n, v, "/patternProperties/" + escape_pointer_token(k))});
    }
    r.constraints.push_back("patternProperties");
  }
  if (auto it = s.find("propertyNames"); it != s.end()) {
    r.property_names.push_back(child(n, *it, "/propertyNames"));
    r.constraints.push_back("propertyNames");
  }
  if (auto it = s.find("minProperties"); it != s.end())
    r.min_props = count_value(*it, "minProperties", at("minProperties")), r.constraints.push_back("minProperties");
  if (auto it = s.find("maxProperties"); it != s.end())
    r.max_props = count_value(*it, "maxProperties", at("maxProperties")), r.constraints.push_back("maxProperties");
}

void Converter::read_array(const Node& n, Simple& r, const KeywordAt& at) const {
  const ojson& s = *n.s;
  const auto items = s.find("items"), prefix = s.find("prefixItems"), additional = s.find("additionalItems");
  if (prefix != s.end()) {
    if (!prefix->is_array()) throw SchemaError("prefixItems", at("prefixItems"), "must be an array of schemas");
    if (additional != s.end())
      throw SchemaError("additionalItems", at("additionalItems"),
                        "beside prefixItems (2020-12) it is ambiguous; use items for the rest");
    if (items != s.end() && items->is_array())
      throw SchemaError("items", at("items"), "beside prefixItems, items must be one schema");
    for (size_t i = 0; i < prefix->size(); ++i) r.prefix.push_back(child(n, (*prefix)[i], "/prefixItems/" + std::to_string(i)));
    if (items != s.end()) r.rest = child(n, *items, "/items");
    r.constraints.push_back("prefixItems");
  } else if (items != s.end() && items->is_array()) {
    // Draft 7's tuple form; additionalItems is the rest.
    for (size_t i = 0; i < items->size(); ++i) r.prefix.push_back(child(n, (*items)[i], "/items/" + std::to_string(i)));
    if (additional != s.end()) r.rest = child(n, *additional, "/additionalItems");
    r.constraints.push_back("items");
  } else if (items != s.end()) {
    r.rest = child(n, *items, "/items");  // additionalItems has no effect beside a schema
    r.constraints.push_back("items");
  }
  if (auto it = s.find("contains"); it != s.end()) {
    r.contains.push_back(child(n, *it, "/contains"));
    r.constraints.push_back("contains");
  }
  if (auto it = s.find("uniqueItems"); it != s.end()) {
    if (!it->is_boolean()) throw SchemaError("uniqueItems", at("uniqueItems"), "must be a boolean");
    r.unique = it->get<bool>();
    r.constraints.push_back("uniqueItems");
  }
  if (auto it = s.find("minItems"); it != s.end()) r.min_items = count_value(*it, "minItems", at("minItems")), r.constraints.push_back("minItems");
  if (auto it = s.find("maxItems"); it != s.end()) r.max_items = count_value(*it, "maxItems", at("maxItems")), r.constraints.push_back("maxItems");
}

}  // namespace troupe::grammar::schema
