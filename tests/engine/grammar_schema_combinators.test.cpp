// Values and combinations: enum and const, anyOf, oneOf, allOf, not, if/then/else and
// dependencies.
// Each feature compiled with compile_gbnf and matched against texts that validate and texts
// that do not; refusals name their keyword and JSON pointer (grammar_schema_testing.h).
#include <catch2/catch.hpp>

#include "tests/engine/grammar_schema_testing.h"

using namespace troupe::grammar;
using namespace troupe::grammar::testing;

TEST_CASE("enum and const accept exactly their values in any escaping", "[json_schema]") {
  const auto e = schema(R"({"enum": ["red", "a\"b", 3, 2.5, null, [1, "x"], {"k": true}]})");
  for (const char* ok : {R"("red")", R"("\u0072ed")", R"("a\"b")", R"("a\u0022b")", "3", "2.5", "null", R"([1, "x"])",
                         R"({"k": true})", R"({ "k" : true })"})
    CHECK(e(ok));
  for (const char* bad : {R"("Red")", "4", "2.50", R"([1])", R"({"k": false})", "true"}) CHECK_FALSE(e(bad));
  // An integral value is written as an integer, in every number context.
  const auto c = schema(R"({"const": 2.0})");
  CHECK(c("2"));
  CHECK_FALSE(c("2.0"));
  const auto typed = schema(R"({"type": "string", "enum": ["a", 1]})");
  CHECK(typed(R"("a")"));
  CHECK_FALSE(typed("1"));
  // Other keywords beside enum keep the values that meet them.
  for (const auto& o : {kExact, kGeneration}) {
    const auto narrowed = schema(R"({"enum": ["a", "bb", 5, 50], "maxLength": 1, "maximum": 10})", o);
    CHECK(narrowed(R"("a")"));
    CHECK(narrowed("5"));
    CHECK_FALSE(narrowed(R"("bb")"));
    CHECK_FALSE(narrowed("50"));
  }
  CHECK(refusal(R"({"enum": ["bb"], "maxLength": 1})").keyword() == "unsatisfiable");
}

TEST_CASE("anyOf accepts any branch, and oneOf takes each branch less the others", "[json_schema]") {
  const auto any = schema(R"({"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer"}]})");
  CHECK(any(R"("a")"));
  CHECK(any("5"));
  CHECK_FALSE(any(R"("ab")"));
  CHECK_FALSE(any("null"));
  const auto one = schema(R"({"oneOf": [{"type": "string"}, {"type": "null"}, {"const": 3}]})");
  CHECK(one(R"("a")"));
  CHECK(one("null"));
  CHECK(one("3"));
  CHECK_FALSE(one("4"));
  // Overlapping branches: each less the others, where the others can be negated.
  const auto overlap = schema(R"({"oneOf": [{"type": "string"}, {"minLength": 2}]})");
  CHECK(overlap(R"("a")"));
  CHECK(overlap("5"));
  CHECK_FALSE(overlap(R"("ab")"));  // both match
  const SchemaError e = refusal(R"({"properties": {"v": {"oneOf": [{"pattern": "a"}, {"pattern": "b"}]}}})");
  CHECK(e.keyword() == "oneOf");
  CHECK(e.pointer() == "/properties/v");
}

TEST_CASE("oneOf over objects with a distinct const discriminator is exact", "[json_schema]") {
  const auto pets = schema(R"({"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}}, "required": ["kind"]},
      {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}}, "required": ["kind"]}]})");
  CHECK(pets(R"({"kind": "cat", "lives": 9})"));
  CHECK(pets(R"({"kind": "dog", "good": true})"));
  CHECK_FALSE(pets(R"({"kind": "cat", "lives": "nine"})"));
  CHECK_FALSE(pets(R"({"kind": "cow"})"));
  // Exactly one of two names.
  const auto either = schema(R"({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]})");
  CHECK(either(R"({"a": 1})"));
  CHECK(either(R"({"b": 1, "c": 2})"));
  CHECK_FALSE(either(R"({"a": 1, "b": 2})"));
  CHECK_FALSE(either("{}"));
  // Generation: a branch need only differ from the others in what it writes.
  const auto g = gen(R"({"type": "object", "oneOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                                     {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]})");
  CHECK(g(R"({"a": 1})"));
  CHECK(g(R"({"b": 1})"));
  CHECK_FALSE(g(R"({"a": 1, "b": 2})"));
}

TEST_CASE("allOf merges what it can and refuses the rest", "[json_schema]") {
  const auto m = schema(R"({"allOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"b": {"type": "string"}, "a": {"minimum": 0}}, "required": ["b"]}]})");
  CHECK(m(R"({"a": 1, "b": "x"})"));
  CHECK_FALSE(m(R"({"a": -1, "b": "x"})"));
  CHECK_FALSE(m(R"({"a": 1})"));
  CHECK_FALSE(m(R"({"b": "x"})"));
  CHECK_FALSE(m(R"("x")"));
  // additionalProperties of one side applies to the other side's names.
  const auto closed = schema(R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false},
                                           {"properties": {"b": {}}}]})");
  CHECK(closed(R"({"a": 1})"));
  CHECK_FALSE(closed(R"({"b": 1})"));
  const auto distributed = schema(R"({"type": "string", "anyOf": [{"maxLength": 1}, {"minLength": 3}]})");
  CHECK(distributed(R"("a")"));
  CHECK(distributed(R"("abc")"));
  CHECK_FALSE(distributed(R"("ab")"));
  CHECK_FALSE(distributed("1"));
  const SchemaError e = refusal(R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})");
  CHECK(e.keyword() == "pattern");
  CHECK(e.pointer() == "/allOf/1/pattern");
  CHECK(refusal(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})").keyword() == "unsatisfiable");
}

TEST_CASE("not, if/then/else and dependencies hold through negation and branches", "[json_schema]") {
  for (const auto& o : {kExact, kGeneration}) {
    const auto n = schema(R"({"type": "object", "properties": {"kind": {"type": "string", "not": {"enum": ["a", "b"]}}}})", o);
    CHECK(n(R"({"kind": "c"})"));
    CHECK(n(R"({"kind": "ab"})"));
    CHECK_FALSE(n(R"({"kind": "a"})"));
    const auto cond = schema(R"({"type": "object", "properties": {"type": {"enum": ["circle", "square"]}, "r": {"type": "number"},
                                 "side": {"type": "number"}}, "required": ["type"],
                                 "if": {"properties": {"type": {"const": "circle"}}}, "then": {"required": ["r"]},
                                 "else": {"required": ["side"]}})", o);
    CHECK(cond(R"({"type": "circle", "r": 1})"));
    CHECK(cond(R"({"type": "square", "side": 2})"));
    CHECK_FALSE(cond(R"({"type": "circle", "side": 2})"));
    CHECK_FALSE(cond(R"({"type": "square", "r": 1})"));
    const auto dep = schema(R"({"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "dependencies": {"a": ["b"],
                                "c": {"properties": {"b": {"type": "integer"}}}}})", o);
    CHECK(dep(R"({"a": 1, "b": 2})"));
    CHECK(dep(R"({"b": "x"})"));
    CHECK(dep(R"({"b": 1, "c": 3})"));
    CHECK_FALSE(dep(R"({"a": 1})"));
    CHECK_FALSE(dep(R"({"b": "x", "c": 3})"));
  }
  // Numbers that are not integers, and numbers other than the listed.
  const auto frac = schema(R"({"type": "number", "not": {"type": "integer"}})");
  CHECK(frac("1.5"));
  CHECK_FALSE(frac("2"));
  CHECK_FALSE(frac("2.0"));
  const auto other = schema(R"({"type": "number", "not": {"enum": [1, 2.5]}})");
  CHECK(other("0"));
  CHECK(other("2"));
  CHECK_FALSE(other("1"));
  CHECK_FALSE(other("2.5"));
}
