// The HTTP API's ways to constrain an output (service/openai_constraint.h):
// OpenAI's response_format, llama-server's and vLLM's fields, each read into
// Sampling.constraint, at most one per request, each refusal naming its field.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "messages/client_generated.h"
#include "service/openai_constraint.h"

using namespace troupe;
using namespace troupe::service;
using json = nlohmann::ordered_json;

namespace {

uint8_t kind(wire::ConstraintKind k) { return static_cast<uint8_t>(k); }

messages::ConstraintFields read_ok(const std::string& body) {
  messages::ConstraintFields c;
  const auto e = read_constraint(json::parse(body), c);
  if (e) FAIL("refused: " << e->param << ": " << e->message);
  return c;
}

ConstraintError read_error(const std::string& body) {
  messages::ConstraintFields c;
  const auto e = read_constraint(json::parse(body), c);
  REQUIRE(e);
  return *e;
}

}  // namespace

TEST_CASE("openai constraint: a body without one, or with text or null fields, constrains nothing") {
  messages::ConstraintFields c;
  c.kind = kind(wire::ConstraintKind::regex);
  c.text = "left over";
  c.choices = {"x"};
  CHECK_FALSE(read_constraint(json::parse(R"({"messages":[]})"), c));
  CHECK(c == messages::ConstraintFields{});
  CHECK(read_ok(R"({"response_format":{"type":"text"}})") == messages::ConstraintFields{});
  CHECK(read_ok(R"({"response_format":null,"grammar":null,"json_schema":null,"guided_json":null,
                    "guided_regex":null,"guided_choice":null,"guided_grammar":null})") == messages::ConstraintFields{});
}

TEST_CASE("openai constraint: response_format json_object and json_schema, the schema's properties in the "
          "client's order") {
  CHECK(read_ok(R"({"response_format":{"type":"json_object"}})").kind == kind(wire::ConstraintKind::json_object));
  const auto c = read_ok(R"({"response_format":{"type":"json_schema","json_schema":{"name":"answer","strict":true,
      "schema":{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}}}}})");
  CHECK(c.kind == kind(wire::ConstraintKind::json_schema));
  CHECK(c.text == R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}})");
  CHECK(c.choices.empty());
  // strict false or null is the same: a schema is enforced exactly or refused.
  const auto loose = read_ok(
      R"({"response_format":{"type":"json_schema","json_schema":{"strict":false,"schema":{"type":"string"}}}})");
  CHECK(loose.text == R"({"type":"string"})");
  CHECK(read_ok(R"({"response_format":{"type":"json_schema","json_schema":{"strict":null,"schema":true}}})").text ==
        "true");
}

TEST_CASE("openai constraint: a json_schema without a schema is any JSON value, and a schema sent as a string "
          "is read") {
  const auto none = read_ok(R"({"response_format":{"type":"json_schema","json_schema":{"name":"any"}}})");
  CHECK(none.kind == kind(wire::ConstraintKind::json_schema));
  CHECK(none.text == "{}");
  CHECK(read_ok(R"({"response_format":{"type":"json_schema","json_schema":{"schema":null}}})").text == "{}");
  const auto text = read_ok(R"({"response_format":{"type":"json_schema",
      "json_schema":{"schema":"{\"type\": \"object\", \"required\": [\"b\", \"a\"]}"}}})");
  CHECK(text.text == R"({"type":"object","required":["b","a"]})");
}

TEST_CASE("openai constraint: a bad response_format is refused, naming the field at fault") {
  const std::string shape = "response_format must be an object with a type (text, json_object or json_schema)";
  for (const char* body : {R"({"response_format":"json_object"})", R"({"response_format":{}})",
                           R"({"response_format":{"type":3}})"}) {
    INFO(body);
    const auto e = read_error(body);
    CHECK(e.param == "response_format");
    CHECK(e.message == shape);
  }
  auto e = read_error(R"({"response_format":{"type":"xml"}})");
  CHECK(e.param == "response_format.type");
  CHECK(e.message == "response_format.type 'xml' is not text, json_object or json_schema");
  e = read_error(R"({"response_format":{"type":"json_schema"}})");
  CHECK(e.param == "response_format.json_schema");
  CHECK(e.message == "json_schema must be an object with a schema");
  e = read_error(R"({"response_format":{"type":"json_schema","json_schema":[]}})");
  CHECK(e.param == "response_format.json_schema");
  e = read_error(R"({"response_format":{"type":"json_schema","json_schema":{"name":7,"schema":{}}}})");
  CHECK(e.param == "response_format.json_schema.name");
  CHECK(e.message == "name must be a string");
  e = read_error(R"({"response_format":{"type":"json_schema","json_schema":{"strict":"yes","schema":{}}}})");
  CHECK(e.param == "response_format.json_schema.strict");
  CHECK(e.message == "strict must be true or false");
  e = read_error(R"({"response_format":{"type":"json_schema","json_schema":{"schema":5}}})");
  CHECK(e.param == "response_format.json_schema.schema");
  CHECK(e.message == "response_format.json_schema.schema must be a JSON Schema (an object)");
  e = read_error(R"({"response_format":{"type":"json_schema","json_schema":{"schema":"{not json"}}})");
  CHECK(e.param == "response_format.json_schema.schema");
  CHECK(e.message == "response_format.json_schema.schema is a string that is not JSON");
}

TEST_CASE("openai constraint: llama-server's json_schema and grammar, vLLM's guided fields, each read into its kind") {
  auto c = read_ok(R"({"json_schema":{"type":"array","items":{"type":"number"}}})");
  CHECK(c.kind == kind(wire::ConstraintKind::json_schema));
  CHECK(c.text == R"({"type":"array","items":{"type":"number"}})");
  c = read_ok(R"({"guided_json":"{\"type\":\"boolean\"}"})");
  CHECK(c.kind == kind(wire::ConstraintKind::json_schema));
  CHECK(c.text == R"({"type":"boolean"})");
  c = read_ok(R"({"grammar":"root ::= \"yes\" | \"no\""})");
  CHECK(c.kind == kind(wire::ConstraintKind::grammar));
  CHECK(c.text == R"(root ::= "yes" | "no")");
  c = read_ok(R"({"guided_grammar":"root ::= [a-z]+"})");
  CHECK(c.kind == kind(wire::ConstraintKind::grammar));
  CHECK(c.text == "root ::= [a-z]+");
  c = read_ok(R"({"guided_regex":"[0-9]{3}"})");
  CHECK(c.kind == kind(wire::ConstraintKind::regex));
  CHECK(c.text == "[0-9]{3}");
  c = read_ok(R"({"guided_choice":["red","green",""]})");
  CHECK(c.kind == kind(wire::ConstraintKind::choice));
  CHECK(c.choices == std::vector<std::string>{"red", "green", ""});
  CHECK(c.text.empty());
}

TEST_CASE("openai constraint: a field of the wrong type is refused, naming it") {
  auto e = read_error(R"({"json_schema":[1]})");
  CHECK(e.param == "json_schema");
  CHECK(e.message == "json_schema must be a JSON Schema (an object)");
  e = read_error(R"({"guided_json":"nope{"})");
  CHECK(e.param == "guided_json");
  CHECK(e.message == "guided_json is a string that is not JSON");
  e = read_error(R"({"grammar":{"root":"x"}})");
  CHECK(e.param == "grammar");
  CHECK(e.message == "grammar must be a GBNF grammar (a string)");
  e = read_error(R"({"guided_grammar":1})");
  CHECK(e.param == "guided_grammar");
  CHECK(e.message == "guided_grammar must be a GBNF grammar (a string)");
  e = read_error(R"({"guided_regex":["a"]})");
  CHECK(e.param == "guided_regex");
  CHECK(e.message == "guided_regex must be a string");
  for (const char* body : {R"({"guided_choice":[]})", R"({"guided_choice":"red"})", R"({"guided_choice":["red",1]})"}) {
    INFO(body);
    e = read_error(body);
    CHECK(e.param == "guided_choice");
    CHECK(e.message == "guided_choice must be a non-empty array of strings");
  }
}

TEST_CASE("openai constraint: two ways to constrain one output are refused, naming both") {
  auto e = read_error(R"({"response_format":{"type":"json_object"},"grammar":"root ::= \"x\""})");
  CHECK(e.param == "grammar");
  CHECK(e.message == "grammar and response_format both constrain the output; send one");
  e = read_error(R"({"json_schema":{},"guided_json":{}})");
  CHECK(e.param == "guided_json");
  CHECK(e.message == "guided_json and json_schema both constrain the output; send one");
  e = read_error(R"({"guided_regex":"a","guided_choice":["a"]})");
  CHECK(e.param == "guided_choice");
  CHECK(e.message == "guided_choice and guided_regex both constrain the output; send one");
  e = read_error(R"({"grammar":"root ::= \"x\"","guided_grammar":"root ::= \"y\""})");
  CHECK(e.param == "guided_grammar");
  // response_format text asks for nothing: another field may constrain.
  const auto c = read_ok(R"({"response_format":{"type":"text"},"guided_regex":"[a-z]"})");
  CHECK(c.kind == kind(wire::ConstraintKind::regex));
}
