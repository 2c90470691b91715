#include "service/openai_constraint.h"

#include <nlohmann/json.hpp>

#include "messages/client_generated.h"

namespace troupe::service {
namespace {

using json = nlohmann::ordered_json;  // a schema's properties in the client's order

ConstraintError bad_constraint(const std::string& param, const std::string& message) { return {param, message}; }

std::optional<ConstraintError> schema_text(const json& schema, const std::string& param, std::string& text) {
  if (schema.is_string()) {  // a schema sent as a JSON string is read as one
    const json parsed = json::parse(schema.get<std::string>(), nullptr, false);
    if (parsed.is_discarded()) return bad_constraint(param, param + " is a string that is not JSON");
    text = parsed.dump();
    return std::nullopt;
  }
  if (!schema.is_object() && !schema.is_boolean()) return bad_constraint(param, param + " must be a JSON Schema (an object)");
  text = schema.dump();
  return std::nullopt;
}

std::optional<ConstraintError> response_format(const json& rf, messages::ConstraintFields& c) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    return bad_constraint("response_format", "response_format must be an object with a type (text, json_object or json_schema)");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    c.kind = static_cast<uint8_t>(wire::ConstraintKind::json_object);
    return std::nullopt;
  }
  if (type != "json_schema")
    return bad_constraint("response_format.type", "response_format.type '" + type + "' is not text, json_object or json_schema");
  const auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object()) return bad_constraint("response_format.json_schema", "json_schema must be an object with a schema");
  if (auto n = js->find("name"); n != js->end() && !n->is_string())
    return bad_constraint("response_format.json_schema.name", "name must be a string");
  // strict or not, the schema is enforced exactly or refused: a keyword the
  // engine cannot enforce is an error, never a silent best effort.
  if (auto st = js->find("strict"); st != js->end() && !st->is_null() && !st->is_boolean())
    return bad_constraint("response_format.json_schema.strict", "strict must be true or false");
  const auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) {
    c.kind = static_cast<uint8_t>(wire::ConstraintKind::json_schema);
    c.text = "{}";  // OpenAI: no schema is any JSON value
    return std::nullopt;
  }
  c.kind = static_cast<uint8_t>(wire::ConstraintKind::json_schema);
  return schema_text(*schema, "response_format.json_schema.schema", c.text);
}

}  // namespace

std::optional<ConstraintError> read_constraint(const json& body, messages::ConstraintFields& c) {
  c = {};
  std::string asked;
  auto once = [&](const char* field) -> std::optional<ConstraintError> {
    if (!asked.empty()) return bad_constraint(field, std::string(field) + " and " + asked + " both constrain the output; send one");
    asked = field;
    return std::nullopt;
  };
  auto present = [&](const char* field) {
    auto it = body.find(field);
    return it != body.end() && !it->is_null() ? &*it : nullptr;
  };
  if (const json* rf = present("response_format")) {
    if (auto e = response_format(*rf, c)) return e;
    if (c.kind != 0) asked = "response_format";
  }
  for (const char* field : {"json_schema", "guided_json"}) {
    if (const json* js = present(field)) {
      if (auto e = once(field)) return e;
      c.kind = static_cast<uint8_t>(wire::ConstraintKind::json_schema);
      if (auto e = schema_text(*js, field, c.text)) return e;
    }
  }
  for (const char* field : {"grammar", "guided_grammar"}) {
    if (const json* g = present(field)) {
      if (auto e = once(field)) return e;
      if (!g->is_string()) return bad_constraint(field, std::string(field) + " must be a GBNF grammar (a string)");
      c.kind = static_cast<uint8_t>(wire::ConstraintKind::grammar);
      c.text = g->get<std::string>();
    }
  }
  if (const json* r = present("guided_regex")) {
    if (auto e = once("guided_regex")) return e;
    if (!r->is_string()) return bad_constraint("guided_regex", "guided_regex must be a string");
    c.kind = static_cast<uint8_t>(wire::ConstraintKind::regex);
    c.text = r->get<std::string>();
  }
  if (const json* ch = present("guided_choice")) {
    if (auto e = once("guided_choice")) return e;
    if (!ch->is_array() || ch->empty()) return bad_constraint("guided_choice", "guided_choice must be a non-empty array of strings");
    for (const auto& x : *ch) {
      if (!x.is_string()) return bad_constraint("guided_choice", "guided_choice must be a non-empty array of strings");
      c.choices.push_back(x.get<std::string>());
    }
    c.kind = static_cast<uint8_t>(wire::ConstraintKind::choice);
  }
  return std::nullopt;
}

}  // namespace troupe::service
