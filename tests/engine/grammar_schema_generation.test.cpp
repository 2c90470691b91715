// The generation profile: one layout, other properties only where allowed, one spelling
// per character, values in the layout, types narrowed by keywords, numbers clear of double
// rounding, maxLength beside a pattern.
// Each feature compiled with compile_gbnf and matched against texts that validate and texts
// that do not; refusals name their keyword and JSON pointer (grammar_schema_testing.h).
#include <catch2/catch.hpp>

#include "tests/engine/grammar_schema_testing.h"

using namespace troupe::grammar;
using namespace troupe::grammar::testing;

TEST_CASE("generation writes one layout: \", \" and \": \", no other whitespace", "[json_schema][generation]") {
  const char* s = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "integer"}}},
                      "required": ["a"]})";
  const auto g = gen(s);
  CHECK(g(R"({"a": 1, "b": [1, 2]})"));
  CHECK(g(R"({"a": 1})"));
  CHECK(g(R"({"a": -7, "b": []})"));
  for (const char* bad : {R"({"a":1})", R"({ "a": 1})", R"({"a" : 1})", R"({"a": 1,"b": []})", R"({"a": 1, "b": [1,2]})",
                          R"({"a": 1, "b": [ 1, 2 ]})", "{\n  \"a\": 1\n}", R"({"a": 1} )", R"( {"a": 1})", R"({"a": 1.0})",
                          R"({"b": [1], "a": 1})"})
    CHECK_FALSE(g(bad));
  // The exact profile takes every spelling.
  const auto e = schema(s);
  CHECK(e(R"({"a":1})"));
  CHECK(e("{\n  \"a\": 1,\n  \"b\": [1,2]\n}"));
}

TEST_CASE("generation allows other properties only where additionalProperties says so, after the declared",
          "[json_schema][generation]") {
  const auto closed = gen(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  CHECK(closed(R"({"a": 1})"));
  CHECK(closed("{}"));
  CHECK_FALSE(closed(R"({"a": 1, "c": 2})"));
  CHECK_FALSE(closed(R"({"c": 2})"));
  CHECK(schema(R"({"type": "object", "properties": {"a": {"type": "integer"}}})")(R"({"a": 1, "c": 2})"));
  const auto open = gen(R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": true})");
  CHECK(open(R"({"a": 1, "x": [true], "y": {"z": null}})"));
  CHECK(open(R"({"x": 2})"));
  CHECK_FALSE(open(R"({"x": 2, "a": 1})"));  // other names come after the declared ones
  CHECK_FALSE(open(R"({"a": 1, "a": 2})"));
  const auto map = gen(R"({"type": "object", "additionalProperties": {"type": "string"}})");
  CHECK(map(R"({"k": "v", "l": "w"})"));
  CHECK_FALSE(map(R"({"k": 1})"));
  // An object schema that names nothing is the empty object; a schema that says nothing is any value.
  const auto bare = gen(R"({"type": "object"})");
  CHECK(bare("{}"));
  CHECK_FALSE(bare(R"({"a": 1})"));
  const auto any = gen("{}");
  CHECK(any(R"({"k": [1, {"z": null}], "s": "t"})"));
  CHECK(any("-1.5e3"));
  CHECK_FALSE(any(R"({"k":1})"));
  CHECK_FALSE(any("[1,2]"));
}

TEST_CASE("generation spells each character one way, escapes only where JSON needs them", "[json_schema][generation]") {
  const auto s = gen(R"({"type": "string"})");
  CHECK(s(R"("a\"b\\c\nd\te")"));
  CHECK(s(R"("é😀/")"));
  CHECK(s(R"("\u0001\u001f\b\f\r")"));
  for (const char* bad : {R"("\u0041")", R"("\/")", R"("\u00e9")", R"("\u001F")", R"("\u000a")", R"("\ud83d\ude00")",
                          "\"a\nb\""})
    CHECK_FALSE(s(bad));
  // Keys and const/enum strings in their plain spelling.
  const auto keys = gen(R"({"properties": {"é/x": {"enum": ["a\"b", "tab\t", "ü"]}}, "required": ["é/x"]})");
  CHECK(keys(R"({"é/x": "a\"b"})"));
  CHECK(keys(R"({"é/x": "tab\t"})"));
  CHECK(keys(R"({"é/x": "ü"})"));
  CHECK_FALSE(keys(R"({"\u00e9/x": "ü"})"));
  CHECK_FALSE(keys(R"({"é\/x": "ü"})"));
  CHECK_FALSE(keys(R"({"é/x": "a\u0022b"})"));
  CHECK_FALSE(keys(R"({"é/x": "\u00fc"})"));
  // Patterns see characters; their escapes are the canonical ones.
  const auto p = gen(R"({"type": "string", "pattern": "^[a-c\"]+$"})");
  CHECK(p(R"("ab\"c")"));
  CHECK_FALSE(p(R"("a\u0062")"));
}

TEST_CASE("generation writes enum and const values in the layout, integers as integers", "[json_schema][generation]") {
  const auto e = gen(R"({"enum": [{"k": [1, 2.5, null]}, [true, "x"], 2.0]})");
  CHECK(e(R"({"k": [1, 2.5, null]})"));
  CHECK(e(R"([true, "x"])"));
  CHECK(e("2"));
  CHECK_FALSE(e(R"({"k":[1,2.5,null]})"));
  CHECK_FALSE(e(R"([true,"x"])"));
  CHECK_FALSE(e("2.0"));
  const auto i = gen(R"({"type": "integer"})");
  CHECK(i("12"));
  CHECK_FALSE(i("12.0"));
  CHECK_FALSE(i("1e2"));
}

TEST_CASE("generation narrows a schema without a type to the types its keywords constrain", "[json_schema][generation]") {
  const auto g = gen(R"({"minLength": 2})");
  CHECK(g(R"("ab")"));
  CHECK_FALSE(g("3"));
  CHECK_FALSE(g("{}"));
  CHECK(schema(R"({"minLength": 2})")("3"));  // exact: the keyword does not apply to numbers
  const auto o = gen(R"({"properties": {"a": {"type": "integer"}}, "required": ["a"]})");
  CHECK(o(R"({"a": 1})"));
  CHECK_FALSE(o(R"("a")"));
  const auto n = gen(R"({"minimum": 1})");
  CHECK(n("1.5"));
  CHECK_FALSE(n("true"));
}

TEST_CASE("generation keeps bounded numbers clear of double rounding", "[json_schema][generation]") {
  // x > 0.1 written with 20 digits reads back as 0.1: exclusive bounds move in at the 16th digit.
  const auto ex = gen(R"({"type": "number", "exclusiveMinimum": 0.1, "exclusiveMaximum": 0.2})");
  CHECK(ex("0.15"));
  CHECK(ex("0.100000000000001"));
  CHECK_FALSE(ex("0.1000000000000000001"));
  CHECK_FALSE(ex("0.1999999999999999999"));
  CHECK(schema(R"({"type": "number", "exclusiveMinimum": 0.1})")("0.1000000000000000001"));  // exact: decimal
  // An integer bound past 2^53 with a fraction: 9223372036854775807.5 reads as 2^63.
  const auto i64 = gen(R"({"type": "number", "maximum": 9223372036854775807})");
  CHECK(i64("9223372036854774000"));
  CHECK_FALSE(i64("9223372036854775000"));
  CHECK_FALSE(i64("9223372036854775807.0"));
  const auto ints = gen(R"({"type": "integer", "maximum": 9223372036854775807})");
  CHECK(ints("9223372036854775807"));  // integers compare exactly
}

TEST_CASE("generation holds maxLength beside a pattern by capping its repetitions", "[json_schema][generation]") {
  const auto g = gen(R"({"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$", "maxLength": 12})");
  CHECK(g(R"("ab@cd.com")"));
  CHECK_FALSE(g(R"("abcdef@gh.com")"));  // 13 characters
  const auto f = gen(R"({"type": "string", "format": "email", "maxLength": 20})");
  CHECK(f(R"("ab@cd.ef")"));
  CHECK_FALSE(f(R"("abcdefghij@example.com")"));
  CHECK(refusal(R"({"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$", "maxLength": 12})").keyword() == "maxLength");
}
