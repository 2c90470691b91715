// Objects: declared properties in order, required and other properties, property counts,
// patternProperties and propertyNames.
// Each feature compiled with compile_gbnf and matched against texts that validate and texts
// that do not; refusals name their keyword and JSON pointer (grammar_schema_testing.h).
#include <catch2/catch.hpp>

#include "tests/engine/grammar_schema_testing.h"

using namespace troupe::grammar;
using namespace troupe::grammar::testing;

TEST_CASE("properties keep their declared order and optional ones may be left out", "[json_schema]") {
  const auto o = schema(R"({"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}},
                             "additionalProperties": false})");
  CHECK(o("{}"));
  CHECK(o(R"({"b": 1})"));
  CHECK(o(R"({"a": "x"})"));
  CHECK(o(R"({"b": 1, "a": "x"})"));
  CHECK_FALSE(o(R"({"a": "x", "b": 1})"));  // declared order only
  CHECK_FALSE(o(R"({"b": "x"})"));
  CHECK_FALSE(o(R"({"b": 1, "b": 2})"));
  CHECK_FALSE(o(R"({"c": 1})"));
}

TEST_CASE("required properties must be present and additionalProperties false forbids others", "[json_schema]") {
  const auto o = schema(R"({"type": "object", "properties": {"id": {"type": "integer"}, "tag": {"type": "string"}},
                             "required": ["id"], "additionalProperties": false})");
  CHECK(o(R"({"id": 1})"));
  CHECK(o(R"({"id": 1, "tag": "t"})"));
  CHECK_FALSE(o("{}"));
  CHECK_FALSE(o(R"({"tag": "t"})"));
  CHECK_FALSE(o(R"({"id": 1, "x": 2})"));
  // A required name that is not declared takes additionalProperties' schema.
  const auto extra = schema(R"({"type": "object", "required": ["z"], "additionalProperties": {"type": "boolean"}})");
  CHECK(extra(R"({"z": true})"));
  CHECK(extra(R"({"y": false, "z": true})"));
  CHECK_FALSE(extra(R"({"z": 1})"));
  CHECK_FALSE(extra(R"({"y": true})"));
}

TEST_CASE("undeclared properties may come anywhere by default but never under a declared name", "[json_schema]") {
  const auto o = schema(R"({"properties": {"foo": {"type": "integer"}, "bar": {"type": "integer"}},
                             "additionalProperties": {"type": "string"}})");
  CHECK(o(R"({"x": "1", "foo": 1, "y": "2", "bar": 2, "z": "3"})"));
  CHECK_FALSE(o(R"({"foo": 1, "x": 2})"));
  // "\u0066oo" is "foo": it must meet foo's schema, not additionalProperties'.
  CHECK(o(R"({"\u0066oo": 1})"));
  CHECK_FALSE(o(R"({"\u0066oo": "s"})"));
  CHECK_FALSE(o(R"({"fo\u006F": "s"})"));
  CHECK(o(R"({"fo": "s", "fooo": "s", "": "s"})"));
  // No additionalProperties: anything else, any value.
  const auto open = schema(R"({"properties": {"foo": {"type": "integer"}}})");
  CHECK(open(R"({"other": [1, {"a": null}], "foo": 3})"));
  CHECK_FALSE(open(R"({"foo": "3"})"));
}

TEST_CASE("minProperties counts declared properties and maxProperties every property", "[json_schema]") {
  // Other names may repeat in a text (a grammar cannot remember them), and a parser keeps one: they
  // count towards maxProperties only.
  const auto e = schema(R"({"maxProperties": 2})");
  CHECK(e("{}"));
  CHECK(e(R"({"a": 1, "b": 2})"));
  CHECK_FALSE(e(R"({"a": 1, "b": 2, "c": 3})"));
  CHECK(e("[]"));  // not an object: the keyword does not apply
  // One other name is certainly distinct; two may be one name twice.
  const auto one = schema(R"({"minProperties": 1})");
  CHECK_FALSE(one("{}"));
  CHECK(one(R"({"x": 1})"));
  CHECK(refusal(R"({"minProperties": 2})").keyword() == "minProperties");
  const auto d = schema(R"({"properties": {"a": {}, "b": {}}, "required": ["b"], "minProperties": 1, "maxProperties": 3})");
  CHECK(d(R"({"a": 1, "b": 2})"));
  CHECK(d(R"({"x": 1, "b": 2})"));
  CHECK(d(R"({"b": 2, "x": 1, "y": 2})"));
  CHECK_FALSE(d(R"({"a": 1, "b": 2, "x": 1, "y": 2})"));
  CHECK_FALSE(d(R"({"a": 1, "x": 2})"));
  const auto closed = schema(R"({"properties": {"a": {}, "b": {}}, "additionalProperties": false, "minProperties": 1})");
  CHECK_FALSE(closed("{}"));
  CHECK(closed(R"({"b": 1})"));
  const auto g = gen(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
                         "minProperties": 1, "maxProperties": 2})");
  CHECK_FALSE(g("{}"));
  CHECK(g(R"({"b": 1})"));
  CHECK(g(R"({"a": 1, "c": 3})"));
  CHECK_FALSE(g(R"({"a": 1, "b": 2, "c": 3})"));
  const auto m = gen(R"({"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": 2})");
  CHECK(m(R"({"a": 1, "b": 2})"));
  CHECK_FALSE(m(R"({"a": 1, "b": 2, "c": 3})"));
  const auto nonempty = gen(R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1})");
  CHECK_FALSE(nonempty("{}"));
  CHECK(nonempty(R"({"a": 1, "b": 2})"));
  CHECK(refusal(R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2})", {}, kGeneration)
            .keyword() == "unsatisfiable");
  CHECK(refusal(R"({"type": "object", "properties": {"a": {}}, "required": ["a"], "maxProperties": 0})").keyword() ==
        "unsatisfiable");
}

TEST_CASE("patternProperties and propertyNames constrain names by regex and schema", "[json_schema]") {
  // Exact: beside additionalProperties false, or with one pattern schema.
  const auto e = schema(R"({"properties": {"id": {"type": "integer"}}, "patternProperties": {"^x-": {"type": "string"}},
                            "additionalProperties": false})");
  CHECK(e(R"({"id": 1, "x-a": "s", "x-": "t"})"));
  CHECK(e(R"({"x-\u0061": "s"})"));
  CHECK_FALSE(e(R"({"x-a": 1})"));
  CHECK_FALSE(e(R"({"y": "s"})"));
  CHECK(refusal(R"({"patternProperties": {"^x-": {"type": "string"}}})").keyword() == "patternProperties");
  // A declared name the pattern matches meets both schemas, and is no pattern name besides.
  for (const auto& o : {kExact, kGeneration}) {
    const auto d = schema(R"({"properties": {"x-id": {"maxLength": 2}}, "patternProperties": {"^x-": {"type": "string"}},
                              "additionalProperties": false})", o);
    CHECK(d(R"({"x-id": "ab", "x-i": "abc"})"));
    CHECK_FALSE(d(R"({"x-id": "abc"})"));
    CHECK_FALSE(d(R"({"x-id": 1})"));
    CHECK(d(R"({"x-idx": "abc"})"));
  }
  const auto all = gen(R"({"properties": {"basic": {"type": "string"}}, "patternProperties": {".*": {"type": "string"}}})");
  CHECK(all(R"({"basic": "a", "other": "b"})"));
  CHECK_FALSE(all(R"({"basic": "a", "basic": "b"})"));
  // Generation: pattern names after the declared ones; additionalProperties beside patterns is not written.
  const auto g = gen(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                         "patternProperties": {"^[0-9]+$": {"type": "boolean"}}, "additionalProperties": true})");
  CHECK(g(R"({"a": 1, "12": true, "3": false})"));
  CHECK_FALSE(g(R"({"12": true, "a": 1})"));
  CHECK_FALSE(g(R"({"a": 1, "b": true})"));
  CHECK_FALSE(g(R"({"a": 1, "12": 3})"));
  // propertyNames: declared names that fail it cannot appear; other names must meet it.
  for (const auto& o : {kExact, kGeneration}) {
    const auto n = schema(R"({"properties": {"TOO_LONG": {}}, "propertyNames": {"pattern": "^[a-z]+$"},
                              "additionalProperties": {"type": "integer"}})", o);
    CHECK(n(R"({"ok": 1, "abc": 2})"));
    CHECK_FALSE(n(R"({"TOO_LONG": 1})"));
    CHECK_FALSE(n(R"({"ok": 1, "Abc": 2})"));
    CHECK_FALSE(n(R"({"ok": "s"})"));
  }
  // Other names that meet propertyNames must differ from a declared one that meets it too: not held.
  CHECK(refusal(R"({"properties": {"ok": {}}, "propertyNames": {"pattern": "^[a-z]+$"}})").keyword() == "propertyNames");
  const auto names = gen(R"({"type": "object", "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": {"type": "integer"}})");
  CHECK(names(R"({"a": 1, "b": 2})"));
  CHECK_FALSE(names(R"({"c": 1})"));
}
