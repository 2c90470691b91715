// A schema as a union of simple schemas: $ref, allOf, anyOf, oneOf, not,
// if/then/else and dependencies distributed (json_schema_converter.h).
#include <algorithm>

#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar::schema {

// The schema as a union of simple schemas. `nested`: a step deeper than
// the caller (false where lower() has counted this node already).
std::vector<Simple> Converter::expand(const Node& n, bool nested) {
  if (n.s->is_boolean()) {
    if (!n.s->get<bool>()) return {};
    Simple any;
    any.ptr = n.ptr;
    return {any};
  }
  if (!n.s->is_object()) throw SchemaError("schema", n.ptr, "a schema must be an object or a boolean");
  std::optional<Deeper> guard;
  if (nested) guard.emplace(*this, n.ptr);
  if (std::find(expanding_.begin(), expanding_.end(), n.s) != expanding_.end())
    throw SchemaError("$ref", n.ptr, "refers back to itself without nesting (through $ref, allOf, anyOf or oneOf)");
  expanding_.push_back(n.s);
  struct Pop {
    std::vector<const ojson*>& v;
    ~Pop() { v.pop_back(); }
  } pop{expanding_};
  check_keywords(n);
  if (ref_replaces(n)) return expand(resolve(n));
  std::vector<Simple> out = expand_applicators(n, {simple_of(n)});
  out = expand_not_and_if(n, std::move(out));
  return expand_dependencies(n, std::move(out));
}

// $ref beside other keywords, allOf, anyOf and oneOf, conjoined with `out`.
std::vector<Simple> Converter::expand_applicators(const Node& n, std::vector<Simple> out) {
  const ojson& s = *n.s;
  if (s.contains("$ref")) out = conjoin(out, expand(resolve(n)), "$ref", n.ptr);
  if (s.contains("allOf"))
    for (const Node& sub : subschemas(n, "allOf")) out = conjoin(out, expand(sub), "allOf", n.ptr);
  if (s.contains("anyOf")) {
    std::vector<Simple> options;
    for (const Node& sub : subschemas(n, "anyOf"))
      for (Simple& x : expand(sub)) options.push_back(std::move(x));
    out = conjoin(out, options, "anyOf", n.ptr);
  }
  if (s.contains("oneOf")) out = one_of(out, n);
  return out;
}

// not, and if/then/else as (if and then) or (not if, and else), conjoined
// with `out`.
std::vector<Simple> Converter::expand_not_and_if(const Node& n, std::vector<Simple> out) {
  const ojson& s = *n.s;
  if (auto it = s.find("not"); it != s.end())
    out = conjoin(out, expand(synthetic(negate(child(n, *it, "/not")), n.ptr + "/not")), "not", n.ptr);
  if (auto it = s.find("if"); it != s.end()) {
    const ojson then = s.contains("then") ? s["then"] : ojson(true), other = s.contains("else") ? s["else"] : ojson(true);
    ojson either = ojson::object();
    either["anyOf"] = ojson::array({ojson{{"allOf", ojson::array({*it, then})}},
                                    ojson{{"allOf", ojson::array({negate(child(n, *it, "/if")), other})}}});
    out = conjoin(out, expand(synthetic(std::move(either), n.ptr + "/if")), "if", n.ptr);
  }
  return out;
}

// A dependency holds where its name is absent, or present with what it
// requires: two branches each, conjoined with `out`.
std::vector<Simple> Converter::expand_dependencies(const Node& n, std::vector<Simple> out) {
  const ojson& s = *n.s;
  for (const char* kw : {"dependencies", "dependentRequired", "dependentSchemas"}) {
    auto it = s.find(kw);
    if (it == s.end()) continue;
    const std::string at = n.ptr + "/" + kw;
    if (!it->is_object()) throw SchemaError(kw, at, "must be an object");
    for (const auto& [name, dep] : it->items()) {
      const std::string ptr = at + "/" + escape_pointer_token(name);
      out = conjoin(out, dependency_branches(kw, name, dep, ptr), kw, ptr);
    }
  }
  return out;
}

std::vector<Simple> Converter::dependency_branches(const std::string& kw, const std::string& name, const ojson& dep,
                                                   const std::string& ptr) {
  ojson absent = ojson::object(), present = ojson::object();
  absent["properties"][name] = false;
  if (dep.is_array() && kw != "dependentSchemas") {
    std::vector<std::string> required{name};
    for (const std::string& r : string_list(dep, kw, ptr)) required.push_back(r);
    present["required"] = required;
  } else if (kw != "dependentRequired" && (dep.is_object() || dep.is_boolean())) {
    present["allOf"] = ojson::array({ojson{{"required", {name}}}, dep});
  } else {
    throw SchemaError(kw, ptr, "must be an array of names or a schema");
  }
  std::vector<Simple> options = expand(synthetic(std::move(absent), ptr));
  for (Simple& x : expand(synthetic(std::move(present), ptr))) options.push_back(std::move(x));
  return options;
}

std::vector<Node> Converter::subschemas(const Node& n, const std::string& kw) const {
  const ojson& v = (*n.s)[kw];
  if (!v.is_array() || v.empty()) throw SchemaError(kw, n.ptr + "/" + kw, "must be a non-empty array of schemas");
  std::vector<Node> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(child(n, v[i], "/" + kw + "/" + std::to_string(i)));
  return out;
}

}  // namespace troupe::grammar::schema
