// A batch job's check of a finished text (engine/grammar/text_check.h): a
// regex matches the whole text, a string is contained, a JSON Schema
// validates the text as one instance in any member order (the validator
// agrees with the JSON Schema Test Suite: json_schema_test_suite.test.cpp);
// what cannot be checked exactly is refused when the check is built.
#include <catch2/catch.hpp>

#include <string>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/text_check.h"

using troupe::grammar::SchemaError;
using troupe::grammar::TextCheck;
using troupe::grammar::TextCheckKind;

TEST_CASE("text check: a regex matches the whole text") {
  TextCheck c(TextCheckKind::regex, R"(Answer: \d+)");
  CHECK(c.passes("Answer: 42"));
  CHECK_FALSE(c.passes("The Answer: 42"));
  CHECK_FALSE(c.passes("Answer: 42."));
  CHECK_FALSE(c.passes(""));
  TextCheck search(TextCheckKind::regex, R"([\s\S]*Answer: \d+[\s\S]*)");
  CHECK(search.passes("Some steps.\nAnswer: 7\nDone."));
  CHECK_FALSE(search.passes("no answer"));
}

TEST_CASE("text check: a string is contained") {
  TextCheck c(TextCheckKind::contains, "def ");
  CHECK(c.passes("x\ndef f(): pass"));
  CHECK_FALSE(c.passes("de f"));
}

TEST_CASE("text check: a schema validates one instance, members in any order") {
  TextCheck c(TextCheckKind::json_schema,
              R"({"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array",
                  "items": {"type": "string"}, "uniqueItems": true}, "year": {"type": "integer", "minimum": 1900}},
                  "required": ["name", "year"], "additionalProperties": false})");
  CHECK(c.passes(R"({"name": "x", "year": 1999})"));
  CHECK(c.passes(R"(  {"year": 2001, "tags": ["a", "b"], "name": "y"}
)"));
  CHECK_FALSE(c.passes(R"({"name": "x"})"));                            // required
  CHECK_FALSE(c.passes(R"({"name": "x", "year": 1800})"));              // minimum
  CHECK_FALSE(c.passes(R"({"name": "x", "year": 2000, "extra": 1})"));  // additionalProperties
  CHECK_FALSE(c.passes(R"({"name": "x", "year": 2000, "tags": ["a", "a"]})"));  // uniqueItems
  CHECK_FALSE(c.passes(R"({"name": "x", "year": 2000} trailing)"));
  CHECK_FALSE(c.passes("```json\n{\"name\": \"x\", \"year\": 1999}\n```"));  // a fenced block is not JSON
  CHECK_FALSE(c.passes(std::string(10000, '[') + std::string(10000, ']')));  // nesting bounded, refused
}

TEST_CASE("text check: what cannot be checked exactly is refused when built") {
  CHECK_THROWS_AS(TextCheck(TextCheckKind::regex, "(?=a)b"), SchemaError);  // lookahead
  CHECK_THROWS_AS(TextCheck(TextCheckKind::json_schema, R"({"type": "strng"})"), SchemaError);
  CHECK_THROWS_AS(TextCheck(TextCheckKind::json_schema, "not json"), SchemaError);
  CHECK_THROWS_AS(TextCheck(TextCheckKind::contains, ""), std::invalid_argument);
  TextCheck none(TextCheckKind::none, "");
  CHECK(none.passes("anything"));
}
