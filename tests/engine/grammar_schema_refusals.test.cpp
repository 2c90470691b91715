// References and refusals: local references, recursion with no end, remote references,
// unsupported keywords, false and unsatisfiable schemas, and the limits.
// Each feature compiled with compile_gbnf and matched against texts that validate and texts
// that do not; refusals name their keyword and JSON pointer (grammar_schema_testing.h).
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "tests/engine/grammar_schema_testing.h"

using namespace troupe::grammar;
using namespace troupe::grammar::testing;

TEST_CASE("local references resolve, recursive ones included", "[json_schema]") {
  const auto tree = schema(R"({"$defs": {"node": {"type": "object", "properties": {
      "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value"], "additionalProperties": false}}, "$ref": "#/$defs/node"})");
  CHECK(tree(R"({"value": 1})"));
  CHECK(tree(R"({"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}, {"value": 4}]})"));
  CHECK_FALSE(tree(R"({"value": 1, "children": [{"value": "2"}]})"));
  const auto root = schema(R"({"type": "object", "properties": {"next": {"$ref": "#"}}, "additionalProperties": false})");
  CHECK(root(R"({"next": {"next": {}}})"));
  CHECK_FALSE(root(R"({"next": {"other": 1}})"));
  const auto escaped = schema(R"({"definitions": {"a/b": {"type": "integer"}, "c%d": {"type": "string"}},
                                   "properties": {"x": {"$ref": "#/definitions/a~1b"}, "y": {"$ref": "#/definitions/c%25d"}}})");
  CHECK(escaped(R"({"x": 1, "y": "s"})"));
  CHECK_FALSE(escaped(R"({"x": "1"})"));
  const auto legacy = schema(R"({"definitions": {"i": {"type": "integer"}}, "items": {"$ref": "#/definitions/i"}})");
  CHECK(legacy("[1, 2]"));
  CHECK_FALSE(legacy("[1.5]"));
}

TEST_CASE("a recursion with no way to end is refused", "[json_schema]") {
  const SchemaError e = refusal(R"({"$defs": {"loop": {"type": "object", "properties": {"next": {"$ref": "#/$defs/loop"}},
                                     "required": ["next"]}}, "properties": {"a": {"$ref": "#/$defs/loop"}}})");
  CHECK(e.keyword() == "$ref");
  CHECK(e.pointer() == "/$defs/loop");
  CHECK(refusal(R"({"$ref": "#"})").keyword() == "$ref");
  CHECK(refusal(R"({"anyOf": [{"$ref": "#"}, {"type": "string"}]})").keyword() == "$ref");
  CHECK(refusal(R"({"$ref": "#/$defs/missing"})").keyword() == "$ref");
}

TEST_CASE("remote references and keywords beside $ref without a declared draft are refused", "[json_schema]") {
  SchemaError e = refusal(R"({"properties": {"p": {"$ref": "http://example.com/s.json"}}})");
  CHECK(e.keyword() == "$ref");
  CHECK(e.pointer() == "/properties/p/$ref");
  CHECK(refusal(R"({"$ref": "other.json#/a"})").keyword() == "$ref");
  CHECK(refusal(R"({"$ref": "#foo"})").keyword() == "$ref");
  e = refusal(R"({"$defs": {"s": {"type": "array"}}, "properties": {"p": {"$ref": "#/$defs/s", "maxItems": 1}}})");
  CHECK(e.keyword() == "$ref");
  CHECK(e.pointer() == "/properties/p");
  // Draft 7 ignores them; 2020-12 applies them.
  const auto d7 = schema(R"({"$schema": "http://json-schema.org/draft-07/schema#", "$defs": {"s": {"type": "array"}},
                              "$ref": "#/$defs/s", "maxItems": 1})");
  CHECK(d7("[1, 2]"));
  const auto d2020 = schema(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": {"s": {"type": "array"}},
                                 "$ref": "#/$defs/s", "maxItems": 1})");
  CHECK(d2020("[1]"));
  CHECK_FALSE(d2020("[1, 2]"));
  CHECK(refusal(R"({"$defs": {"a": {"$id": "http://x/a", "type": "integer"}}, "$ref": "#/$defs/a"})").keyword() == "$id");
}

TEST_CASE("unsupported keywords are refused naming the keyword and its pointer", "[json_schema]") {
  const struct {
    const char* schema;
    const char* keyword;
    const char* pointer;
  } cases[] = {
      {R"({"properties": {"tags": {"type": "array", "uniqueItems": true}}})", "uniqueItems", "/properties/tags"},
      {R"({"multipleOf": 1001})", "multipleOf", "/multipleOf"},
      {R"({"items": {"not": {"pattern": "^a"}}})", "pattern", "/items/not/pattern"},
      {R"({"if": {"format": "date"}, "then": {"minLength": 1}})", "format", "/if/format"},
      {R"({"anyOf": [{"unevaluatedProperties": false}]})", "unevaluatedProperties", "/anyOf/0"},
      {R"({"$defs": {"a": {"type": "integer"}}, "prefixItems": [{"$ref": "#/$defs/a"}, {"$ref": "#x"}]})", "$ref",
       "/prefixItems/1/$ref"},
      // Unknown keywords this close to a validation keyword are taken for misspellings.
      {R"({"properties": {"p": {"type": "string", "minlength": 3}}})", "minlength", "/properties/p"},
      {R"({"additonalProperties": false})", "additonalProperties", ""},
      {R"({"type": "object", "Required": ["a"]})", "Required", ""},
      {R"({"format": "regex"})", "format", "/format"},
      {R"({"format": "idn-hostname"})", "format", "/format"},
  };
  for (const auto& c : cases) {
    INFO(c.schema);
    const SchemaError e = refusal(c.schema);
    CHECK(e.keyword() == c.keyword);
    CHECK(e.pointer() == c.pointer);
    CHECK(std::string(e.what()).find(std::string(c.pointer).empty() ? "/" : c.pointer) == 0);
  }
  const SchemaError e = refusal(R"({"properties": {"a/b": {"uniqueItems": true}}})");
  CHECK(e.pointer() == "/properties/a~1b");
  CHECK(std::string(e.what()) == "/properties/a~1b: uniqueItems: a grammar cannot compare array items of any value with each other");
  CHECK(refusal("[1]").keyword() == "schema");
  CHECK(refusal("{not json").keyword() == "schema");
  CHECK(refusal(R"({"type": "integr"})").keyword() == "type");
  // Annotations are ignored: JSON Schema's own, vendor keywords, and any other unknown keyword (a
  // validator ignores them too), formats no standard defines, content keywords.
  const auto annotated = schema(R"({"title": "t", "description": "d", "default": 1, "examples": [1], "$comment": "c",
      "deprecated": true, "readOnly": true, "writeOnly": false, "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "https://example.com/s", "type": "integer", "x-kubernetes-int-or-string": true, "self": {"vendor": "v"},
      "javaType": "Long", "_format": "int32", "_uniqueItems": true, "readonly": true, "example": 3, "$anchor": "a"})");
  CHECK(annotated("1"));
  CHECK(annotated("12345678901"));
  for (const auto& o : {kExact, kGeneration}) {
    const auto f = schema(R"({"type": "string", "format": "url", "contentMediaType": "application/json"})", o);
    CHECK(f(R"("not a url")"));
  }
  // Draft 4's id is its $id.
  CHECK(refusal(R"({"definitions": {"a": {"id": "http://x/a", "type": "integer"}}, "$ref": "#/definitions/a"})").keyword() == "id");
  CHECK(schema(R"({"id": "http://x/root", "definitions": {"a": {"type": "integer"}}, "$ref": "#/definitions/a"})")("1"));
}

TEST_CASE("false and unsatisfiable schemas are refused and false branches are dropped", "[json_schema]") {
  CHECK(refusal("false").keyword() == "false");
  CHECK(refusal(R"({"anyOf": [false, false]})").keyword() == "unsatisfiable");
  CHECK(refusal(R"({"type": "object", "properties": {"a": false}, "required": ["a"]})").keyword() == "unsatisfiable");
  const auto dropped = schema(R"({"anyOf": [false, {"type": "integer"}]})");
  CHECK(dropped("1"));
  CHECK_FALSE(dropped("null"));
  const auto forbidden = schema(R"({"properties": {"a": false, "b": {"type": "integer"}}})");
  CHECK(forbidden(R"({"b": 1})"));
  CHECK_FALSE(forbidden(R"({"a": 1})"));
  CHECK_FALSE(forbidden(R"({"\u0061": 1})"));
  const auto no_items = schema(R"({"type": "array", "items": false})");
  CHECK(no_items("[]"));
  CHECK_FALSE(no_items("[1]"));
  CHECK(refusal(R"({"type": "array", "items": false, "minItems": 1})").keyword() == "unsatisfiable");
}

TEST_CASE("a schema past the limits is refused quickly", "[json_schema]") {
  const std::string huge = R"({"enum": [)" + repeat(R"("abcdefghij",)", 400000) + R"("x"]})";
  REQUIRE(huge.size() > (size_t{4} << 20));
  const auto start = std::chrono::steady_clock::now();
  const SchemaError e = refusal(huge);
  CHECK(e.keyword() == "limits");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  // Deep nesting, deep $ref chains and oversized repetitions.
  std::string deep = "{}";
  for (int i = 0; i < 100; ++i) deep = R"({"items": )" + deep + "}";
  CHECK(refusal(deep).keyword() == "limits");
  std::string chain = R"({"$defs": {"d0": {"type": "integer"})";
  for (int i = 1; i < 80; ++i) chain += ",\"d" + std::to_string(i) + "\": {\"$ref\": \"#/$defs/d" + std::to_string(i - 1) + "\"}";
  chain += R"(}, "$ref": "#/$defs/d79"})";
  CHECK(refusal(chain).keyword() == "limits");
  SchemaLimits small;
  small.max_grammar_bytes = 2000;
  CHECK(refusal(R"({"type": "string", "format": "uri"})", small).keyword() == "limits");
  CHECK(refusal(R"({"type": "string", "pattern": "(a{1000}){1000}"})").keyword() == "pattern");
  CHECK(refusal(R"({"type": "array", "minItems": 2000000})").keyword() == "minItems");
  // anyOf products stop at a bound.
  std::string product = R"({"allOf": [)";
  for (int i = 0; i < 8; ++i) product += std::string(i ? "," : "") + R"({"anyOf": [{"type": "string"}, {"minLength": 1}]})";
  product += "]}";
  CHECK(refusal(product).keyword() == "allOf");
}
