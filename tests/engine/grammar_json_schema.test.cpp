// JSON Schema's types as grammars: each type's values, strings' escapes, any value, null,
// the exact profile's whitespace, json_object; and the hook that times schemas.
// Each feature compiled with compile_gbnf and matched against texts that validate and texts
// that do not; refusals name their keyword and JSON pointer (grammar_schema_testing.h).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tests/engine/grammar_schema_testing.h"

using namespace troupe::grammar;
using namespace troupe::grammar::testing;

TEST_CASE("each type accepts its JSON values and nothing else", "[json_schema]") {
  const auto n = schema(R"({"type": "null"})");
  CHECK(n("null"));
  CHECK_FALSE(n("0"));
  const auto b = schema(R"({"type": "boolean"})");
  CHECK(b("true"));
  CHECK(b("false"));
  CHECK_FALSE(b("null"));
  const auto i = schema(R"({"type": "integer"})");
  for (const char* ok : {"0", "-0", "7", "-12", "123456789012345678901234567890"}) CHECK(i(ok));
  // Integers are written as integers: 1.0 and 1e2 are numbers a model should not write for them.
  for (const char* bad : {"1.0", "1e2", "01", "+1", "-", "", "1.", ".5", "\"1\""}) CHECK_FALSE(i(bad));
  const auto num = schema(R"({"type": "number"})");
  for (const char* ok : {"0", "-0.0", "1.5", "-2.5e-3", "1E+10", "10", "0e0"}) CHECK(num(ok));
  for (const char* bad : {"01", "1.", ".5", "1e", "--1", "NaN", "Infinity", "0x10"}) CHECK_FALSE(num(bad));
  const auto s = schema(R"({"type": "string"})");
  CHECK(s(R"("")"));
  CHECK(s(R"("héllo 😀")"));
  CHECK_FALSE(s("hello"));
  const auto a = schema(R"({"type": "array"})");
  CHECK(a("[]"));
  CHECK(a(R"([1, "a", [null], {"k": false}])"));
  CHECK_FALSE(a("{}"));
  const auto o = schema(R"({"type": "object"})");
  CHECK(o("{}"));
  CHECK(o(R"({"a": [1, {"b": null}], "c": "d"})"));
  CHECK_FALSE(o("[]"));
  CHECK_FALSE(o(R"({"a" 1})"));
  CHECK_FALSE(o(R"({"a": 1,})"));
  const auto multi = schema(R"({"type": ["integer", "string"]})");
  CHECK(multi("1"));
  CHECK(multi(R"("x")"));
  CHECK_FALSE(multi("1.5"));
  CHECK_FALSE(multi("null"));
}

TEST_CASE("strings take every JSON escape but no raw control character or lone surrogate", "[json_schema]") {
  const auto s = schema(R"({"type": "string"})");
  CHECK(s(R"("\" \\ \/ \b \f \n \r \t")"));
  CHECK(s(R"("\u0041\u00e9\uFFFF")"));
  CHECK(s(R"("\ud83d\ude00")"));  // a surrogate pair
  CHECK_FALSE(s(R"("\ud83d")"));  // a lone high surrogate
  CHECK_FALSE(s(R"("\ude00")"));
  CHECK_FALSE(s(R"("\x41")"));
  CHECK_FALSE(s(R"("\u12")"));
  CHECK_FALSE(s("\"a\nb\""));
  CHECK_FALSE(s("\"a\x01\""));
}

TEST_CASE("an empty schema and true accept any JSON value", "[json_schema]") {
  for (const char* text : {"{}", "true"}) {
    const auto any = schema(text);
    for (const char* ok : {"null", "1", "-1.5e3", R"("s")", "[]", R"({"a": [1, 2, {"b": "c"}]})", "false"}) CHECK(any(ok));
    CHECK_FALSE(any("nul"));
    CHECK_FALSE(any(""));
  }
}

TEST_CASE("nullable and a null in the type list accept null", "[json_schema]") {
  for (const char* s : {R"({"type": "string", "nullable": true})", R"({"type": ["string", "null"]})"}) {
    const auto g = schema(s);
    CHECK(g("null"));
    CHECK(g(R"("x")"));
    CHECK_FALSE(g("1"));
  }
  const auto plain = schema(R"({"type": "string", "nullable": false})");
  CHECK_FALSE(plain("null"));
}

TEST_CASE("whitespace between tokens is allowed but bounded", "[json_schema]") {
  const auto o = schema(R"({"type": "object", "properties": {"a": {"type": "array"}}})");
  CHECK(o("{ \"a\" : [ 1 , 2 ] }"));
  CHECK(o("{\n  \"a\": [\n    1,\n    2\n  ]\n}"));
  CHECK(o("{\n\t\"a\":[]}"));
  CHECK(o("{\n" + std::string(20, ' ') + "\"a\":[]}"));
  CHECK_FALSE(o("{\n" + std::string(21, ' ') + "\"a\":[]}"));
  CHECK_FALSE(o("{  \"a\":[]}"));
  CHECK_FALSE(o(" {}"));
  CHECK_FALSE(o("{} "));
}

TEST_CASE("json_object accepts any JSON object and nothing else", "[json_schema]") {
  const Compiled o{compile_gbnf(json_object_gbnf())};
  CHECK(o("{}"));
  CHECK(o(R"({"a": {"b": [1, 2.5, "c", null, true]}})"));
  CHECK_FALSE(o(R"({"a":1})"));  // the generation layout
  CHECK_FALSE(o("[]"));
  CHECK_FALSE(o(R"("x")"));
  CHECK_FALSE(o(R"({"a": })"));
  const Compiled any{compile_gbnf(json_object_gbnf(kExact))};
  CHECK(any(R"({"a":1})"));
  CHECK(any("{\n  \"a\": [ 1 ]\n}"));
  CHECK_FALSE(any("[]"));
}

// Not a test (hidden): ops/bench/schema_coverage.py --timing-tests runs it to
// time converting and compiling each schema of a list in-process (the list's
// path in TROUPE_SCHEMA_TIMING, one schema file a line), in the default
// (generation) profile, as `troupe grammar --json-schema` does.
TEST_CASE("time converting and compiling schemas", "[.schema_timing]") {
  const char* list = std::getenv("TROUPE_SCHEMA_TIMING");
  if (!list) return;
  std::ifstream in(list);
  std::string path;
  while (std::getline(in, path)) {
    std::ifstream f(path);
    std::stringstream text;
    text << f.rdbuf();
    const auto t0 = std::chrono::steady_clock::now();
    bool ok = true;
    try {
      compile_gbnf(json_schema_to_gbnf(text.str()));
    } catch (const std::exception&) {
      ok = false;
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "schema_timing\t" << path << '\t' << ok << '\t' << us << '\n';
  }
}
