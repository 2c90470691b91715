// Arrays: items, tuples, item counts, contains and uniqueItems.
// Each feature compiled with compile_gbnf and matched against texts that validate and texts
// that do not; refusals name their keyword and JSON pointer (grammar_schema_testing.h).
#include <catch2/catch.hpp>

#include "tests/engine/grammar_schema_testing.h"

using namespace troupe::grammar;
using namespace troupe::grammar::testing;

TEST_CASE("items, prefixItems and additionalItems shape arrays", "[json_schema]") {
  const auto items = schema(R"({"type": "array", "items": {"type": "integer"}})");
  CHECK(items("[]"));
  CHECK(items("[1, 2, 3]"));
  CHECK_FALSE(items(R"([1, "2"])"));
  const auto tuple = schema(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                                 "items": false})");
  CHECK(tuple("[]"));
  CHECK(tuple("[1]"));
  CHECK(tuple(R"([1, "a"])"));
  CHECK_FALSE(tuple(R"([1, "a", 2])"));
  CHECK_FALSE(tuple(R"(["a"])"));
  const auto draft7 = schema(R"({"items": [{"type": "integer"}], "additionalItems": {"type": "boolean"}})");
  CHECK(draft7("[1, true, false]"));
  CHECK_FALSE(draft7("[1, 2]"));
  const auto rest_default = schema(R"({"prefixItems": [{"type": "integer"}]})");
  CHECK(rest_default(R"([1, "anything", {}])"));
  const auto ignored = schema(R"({"items": {"type": "integer"}, "additionalItems": false})");
  CHECK(ignored("[1, 2, 3]"));
}

TEST_CASE("minItems and maxItems bound arrays, tuples included", "[json_schema]") {
  const auto a = schema(R"({"type": "array", "minItems": 2, "maxItems": 3})");
  CHECK_FALSE(a("[1]"));
  CHECK(a("[1, 2]"));
  CHECK(a("[1, 2, 3]"));
  CHECK_FALSE(a("[1, 2, 3, 4]"));
  const auto t = schema(R"({"prefixItems": [{"type": "integer"}, {"type": "integer"}, {"type": "integer"}],
                             "minItems": 2, "maxItems": 4, "items": {"type": "string"}})");
  CHECK_FALSE(t("[1]"));
  CHECK(t("[1, 2]"));
  CHECK(t(R"([1, 2, 3, "x"])"));
  CHECK_FALSE(t(R"([1, 2, 3, "x", "y"])"));
  CHECK_FALSE(t(R"([1, 2, "x"])"));
  const auto none = schema(R"({"type": "array", "maxItems": 0})");
  CHECK(none("[]"));
  CHECK(none("[ ]"));
  CHECK_FALSE(none("[1]"));
}

TEST_CASE("contains asks one item at least to meet its schema", "[json_schema]") {
  for (const auto& o : {kExact, kGeneration}) {
    const auto c = schema(R"({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 10}, "maxItems": 3})", o);
    CHECK(c("[10]"));
    CHECK(c("[1, 2, 30]"));
    CHECK_FALSE(c("[]"));
    CHECK_FALSE(c("[1, 2]"));
    CHECK_FALSE(c("[1, 2, 3, 40]"));
  }
}

TEST_CASE("uniqueItems over finitely many values", "[json_schema]") {
  const char* s = R"({"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": true, "minItems": 1})";
  const auto e = schema(s);
  CHECK(e(R"(["a", "c"])"));
  CHECK(e(R"(["c", "b", "a"])"));
  CHECK_FALSE(e(R"(["a", "a"])"));
  CHECK_FALSE(e("[]"));
  // Generation writes the values in the schema's order.
  const auto g = gen(s);
  CHECK(g(R"(["a", "c"])"));
  CHECK_FALSE(g(R"(["c", "a"])"));
  CHECK_FALSE(g(R"(["a", "a"])"));
  const auto flags = schema(R"({"type": "array", "items": {"type": "boolean"}, "uniqueItems": true})");
  CHECK(flags("[true, false]"));
  CHECK_FALSE(flags("[true, true]"));
  CHECK(schema(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true, "maxItems": 1})")(R"(["x"])"));
  CHECK(refusal(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true})").keyword() == "uniqueItems");
  CHECK(refusal(R"({"type": "array", "uniqueItems": true})").keyword() == "uniqueItems");
}
