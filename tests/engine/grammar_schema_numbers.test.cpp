// Numbers: integer and number bounds, at zero and elsewhere, and multipleOf.
// Each feature compiled with compile_gbnf and matched against texts that validate and texts
// that do not; refusals name their keyword and JSON pointer (grammar_schema_testing.h).
#include <catch2/catch.hpp>

#include <climits>
#include <cstdio>
#include <string>

#include "tests/engine/grammar_schema_testing.h"

using namespace troupe::grammar;
using namespace troupe::grammar::testing;

TEST_CASE("integer bounds are exact at every digit count", "[json_schema]") {
  struct Case {
    const char* schema;
    long lo, hi;  // inclusive; LONG_MIN/LONG_MAX: open
  };
  const Case cases[] = {
      {R"({"type": "integer", "minimum": 0})", 0, LONG_MAX},
      {R"({"type": "integer", "minimum": 17, "maximum": 1234})", 17, 1234},
      {R"({"type": "integer", "minimum": -345, "maximum": -7})", -345, -7},
      {R"({"type": "integer", "minimum": -99, "maximum": 100})", -99, 100},
      {R"({"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 1001})", 6, 1000},
      {R"({"type": "integer", "maximum": -10})", LONG_MIN, -10},
      {R"({"type": "integer", "minimum": 1.5, "maximum": 9.9})", 2, 9},
      {R"({"type": "integer", "minimum": 3, "exclusiveMinimum": true})", 4, LONG_MAX},  // draft 4
      {R"({"type": "integer", "minimum": 990})", 990, LONG_MAX},
  };
  for (const Case& c : cases) {
    INFO(c.schema);
    const auto g = schema(c.schema);
    for (long v = -1500; v <= 1500; ++v) {
      INFO(v);
      CHECK(g(std::to_string(v)) == (v >= c.lo && v <= c.hi));
    }
    CHECK(g("123456789012") == (c.hi == LONG_MAX));
    CHECK(g("-123456789012") == (c.lo == LONG_MIN));
    CHECK(g("-0") == (c.lo <= 0 && c.hi >= 0));
    CHECK_FALSE(g("007"));
  }
  const auto big = schema(R"({"type": "integer", "minimum": -1000000000000000000, "maximum": 999999999999999999})");
  CHECK(big("999999999999999999"));
  CHECK_FALSE(big("1000000000000000000"));
  CHECK(big("-1000000000000000000"));
  CHECK_FALSE(big("-1000000000000000001"));
  // Bounds past 64 bits, as digit strings.
  const auto huge = schema(R"({"type": "integer", "minimum": -9223372036854775808, "maximum": 1e30})");
  CHECK(huge("1000000000000000000000000000000"));
  CHECK_FALSE(huge("1000000000000000000000000000001"));
  CHECK(huge("-9223372036854775808"));
  CHECK_FALSE(huge("-9223372036854775809"));
}

TEST_CASE("number bounds at zero are exact, exponents included", "[json_schema]") {
  const auto nonneg = schema(R"({"type": "number", "minimum": 0})");
  for (const char* ok : {"0", "-0", "-0.000e5", "0.5", "3", "1e-300", "0.0001"}) CHECK(nonneg(ok));
  for (const char* bad : {"-0.1", "-1", "-1e-300"}) CHECK_FALSE(nonneg(bad));
  const auto positive = schema(R"({"type": "number", "exclusiveMinimum": 0})");
  CHECK(positive("0.001"));
  CHECK(positive("2E3"));
  CHECK_FALSE(positive("0"));
  CHECK_FALSE(positive("0.000e9"));
  CHECK_FALSE(positive("-0"));
  const auto negative = schema(R"({"type": "number", "exclusiveMaximum": 0})");
  CHECK(negative("-0.5"));
  CHECK_FALSE(negative("-0.0"));
  CHECK_FALSE(negative("1"));
  const auto zero = schema(R"({"type": "number", "minimum": 0, "maximum": 0})");
  CHECK(zero("0.00"));
  CHECK(zero("-0"));
  CHECK_FALSE(zero("1e-9"));
}

TEST_CASE("other number bounds hold on plain decimal text", "[json_schema]") {
  for (const SchemaOptions& o : {kExact, kGeneration}) {
    const auto unit = schema(R"({"type": "number", "minimum": 0.25, "exclusiveMaximum": 1.5})", o);
    for (const char* ok : {"0.25", "0.250", "0.3", "1", "1.0", "1.4999999", "0.99"}) CHECK(unit(ok));
    for (const char* bad : {"0.2499", "0.24", "0", "1.5", "1.50", "2", "-1", "2.5e-1", "1e0"}) CHECK_FALSE(unit(bad));
    const auto neg = schema(R"({"exclusiveMinimum": -2.5, "maximum": -0.125})", o);
    for (const char* ok : {"-2.4", "-2", "-0.125", "-0.2", "-1.99"}) CHECK(neg(ok));
    for (const char* bad : {"-2.5", "-2.50", "-3", "-0.1", "0", "-0.12"}) CHECK_FALSE(neg(bad));
  }
  // Every decimal between the bounds, to three places, against the comparison.
  const auto g = schema(R"({"type": "number", "minimum": -1.25, "maximum": 10.5})");
  for (int v = -2000; v <= 12000; v += 7) {
    const double x = v / 1000.0;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", x);
    INFO(buf);
    CHECK(g(buf) == (v >= -1250 && v <= 10500));
  }
}

TEST_CASE("multipleOf: integral multiples by digits modulo the step", "[json_schema]") {
  for (const auto& o : {kExact, kGeneration}) {
    const auto seven = schema(R"({"type": "integer", "multipleOf": 7})", o);
    for (int v = -200; v <= 200; ++v) {
      INFO(v);
      CHECK(seven(std::to_string(v)) == (v % 7 == 0));
    }
    CHECK(seven("700000000000000000000000000007"));
    CHECK_FALSE(seven("700000000000000000000000000008"));
    const auto ranged = schema(R"({"type": "number", "multipleOf": 5, "minimum": -12, "exclusiveMaximum": 20})", o);
    for (const char* ok : {"-10", "0", "15"}) CHECK(ranged(ok));
    for (const char* bad : {"-15", "20", "7", "5.0"}) CHECK_FALSE(ranged(bad));
    const auto whole = schema(R"({"type": "number", "multipleOf": 1, "maximum": 3})", o);
    CHECK(whole("3"));
    CHECK_FALSE(whole("2.5"));
    CHECK_FALSE(whole("4"));
  }
  // Fractional steps: exact only (validators divide in doubles and disagree).
  const auto quarter = schema(R"({"type": "number", "multipleOf": 0.25})");
  for (const char* ok : {"0", "0.25", "0.5", "1", "-1.75", "2.50", "100.0"}) CHECK(quarter(ok));
  for (const char* bad : {"0.1", "0.26", "1.3", "-0.05"}) CHECK_FALSE(quarter(bad));
  CHECK(refusal(R"({"type": "number", "multipleOf": 0.01})", {}, kGeneration).keyword() == "multipleOf");
}
