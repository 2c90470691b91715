// Strings: lengths in code points, patterns (anchors, escapes, refused features) and formats.
// Each feature compiled with compile_gbnf and matched against texts that validate and texts
// that do not; refusals name their keyword and JSON pointer (grammar_schema_testing.h).
#include <catch2/catch.hpp>

#include <regex>
#include <string>
#include <vector>

#include "tests/engine/grammar_schema_testing.h"

using namespace troupe::grammar;
using namespace troupe::grammar::testing;

TEST_CASE("minLength and maxLength count code points, escapes as one", "[json_schema]") {
  const auto s = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  CHECK_FALSE(s(R"("a")"));
  CHECK(s(R"("ab")"));
  CHECK(s(R"("a\nb")"));
  CHECK(s(R"("😀😀")"));
  CHECK(s(R"("\ud83d\ude00\u0041")"));
  CHECK_FALSE(s(R"("abcd")"));
  CHECK_FALSE(s(R"("😀")"));
  // Past gbnf.cpp's repetition cap, as repeated blocks.
  const auto big = schema(R"({"type": "string", "minLength": 12345, "maxLength": 32767})");
  CHECK_FALSE(big(quoted(std::string(12344, 'x'))));
  CHECK(big(quoted(std::string(12345, 'x'))));
  CHECK(big(quoted(std::string(20000, 'x'))));
  CHECK(big(quoted(std::string(32767, 'x'))));
  CHECK_FALSE(big(quoted(std::string(32768, 'x'))));
  CHECK(refusal(R"({"maxLength": 2000000})").keyword() == "maxLength");
}

TEST_CASE("patterns match anywhere unless anchored and see through escapes", "[json_schema]") {
  const auto anywhere = schema(R"({"type": "string", "pattern": "a+b"})");
  CHECK(anywhere(R"("xxaabyy")"));
  CHECK(anywhere(R"("ab")"));
  CHECK_FALSE(anywhere(R"("ba")"));
  CHECK(anywhere(R"("\u0061b")"));
  const auto anchored = schema(R"({"type": "string", "pattern": "^[a-c]{2}\\d$"})");
  CHECK(anchored(R"("ab1")"));
  CHECK(anchored(R"("a\u00629")"));
  CHECK_FALSE(anchored(R"("ab1 ")"));
  CHECK_FALSE(anchored(R"("ad1")"));
  const auto half = schema(R"({"type": "string", "pattern": "^ab|cd$"})");
  CHECK(half(R"("abxx")"));
  CHECK(half(R"("xxcd")"));
  CHECK_FALSE(half(R"("xabx")"));
  const auto empty_ok = schema(R"({"type": "string", "pattern": "x*"})");
  CHECK(empty_ok(R"("anything")"));
  const auto negated = schema(R"({"type": "string", "pattern": "^[^a]$"})");
  CHECK(negated(R"("b")"));
  CHECK(negated(R"("\n")"));
  CHECK(negated(R"("😀")"));
  CHECK_FALSE(negated(R"("a")"));
  CHECK_FALSE(negated(R"("\u0061")"));
  const auto bounded = schema(R"({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3})");
  CHECK(bounded(R"("abc")"));
  CHECK_FALSE(bounded(R"("abcd")"));
  CHECK_FALSE(bounded(R"("")"));
  CHECK(refusal(R"({"type": "string", "pattern": "a", "maxLength": 3})").keyword() == "maxLength");
}

TEST_CASE("regex features a grammar cannot hold are refused with the pattern's pointer", "[json_schema]") {
  for (const char* p : {"(?=a)", "(?!a)", "(?<=a)b", "(?<!a)b", "(a)\\1", "\\bword", "a\\B", "a^b", "a$b", "(a|^b)*",
                        "x(^a)", "\\p{L}", "[", "(a", "a)", "*a", "a{2", "\\q", "\\k<x>", "(?i)a",
                        "a**", "[b-a]", "[\\d-z]", "\\ud800", "{", "}", "]", "\\07"}) {
    INFO(p);
    const SchemaError e = refusal(R"({"properties": {"p": {"type": "string", "pattern": )" + quoted(p) + "}}}");
    CHECK(e.keyword() == "pattern");
    CHECK(e.pointer() == "/properties/p/pattern");
    CHECK_THROWS_AS(regex_to_gbnf(p), SchemaError);
  }
}

TEST_CASE("formats have exact grammars and unknown formats are refused", "[json_schema]") {
  auto fmt = [](const char* f) { return schema(std::string(R"({"type": "string", "format": ")") + f + "\"}"); };
  const auto date = fmt("date");
  for (const char* ok : {"2024-02-29", "2000-02-29", "2023-12-31", "0000-01-01", "1999-04-30"}) CHECK(date(quoted(ok)));
  for (const char* bad : {"2023-02-29", "1900-02-29", "2023-04-31", "2023-13-01", "2023-00-10", "2023-1-01", "20230101"})
    CHECK_FALSE(date(quoted(bad)));
  CHECK(date(R"("2024-02-2\u0039")"));
  const auto time = fmt("time");
  for (const char* ok : {"23:59:59Z", "00:00:00.123+05:30", "12:30:00-08:00", "01:02:03z"}) CHECK(time(quoted(ok)));
  for (const char* bad : {"24:00:00Z", "12:60:00Z", "12:00:00", "12:00Z", "12:00:00+5:00", "23:59:60Z"}) CHECK_FALSE(time(quoted(bad)));
  const auto dt = fmt("date-time");
  CHECK(dt(quoted("2024-05-01T12:00:00Z")));
  CHECK(dt(quoted("2024-05-01t12:00:00.5+01:00")));
  CHECK_FALSE(dt(quoted("2024-05-01 12:00:00Z")));
  const auto uuid = fmt("uuid");
  CHECK(uuid(quoted("123e4567-e89b-12d3-A456-426614174000")));
  CHECK_FALSE(uuid(quoted("123e4567e89b12d3a456426614174000")));
  CHECK_FALSE(uuid(quoted("123e4567-e89b-12d3-a456-42661417400g")));
  const auto email = fmt("email");
  CHECK(email(quoted("first.last+tag@example.co.uk")));
  for (const char* bad : {"no-at-sign", "a@b", "a..b@example.com", ".a@example.com", "a@-example.com", "a b@example.com"})
    CHECK_FALSE(email(quoted(bad)));
  const auto uri = fmt("uri");
  for (const char* ok : {"https://example.com/a/b?q=1#frag", "mailto:someone@example.com", "urn:isbn:0451450523",
                         "http://[::1]:8080/", "http://user:pw@host:1/p%20q", "file:///etc/hosts"})
    CHECK(uri(quoted(ok)));
  for (const char* bad : {"/relative/path", "example.com", "http://exa mple.com", "1http://x", "http://x/%zz"})
    CHECK_FALSE(uri(quoted(bad)));
  const auto ipv4 = fmt("ipv4");
  CHECK(ipv4(quoted("192.168.0.255")));
  for (const char* bad : {"256.1.1.1", "1.2.3", "01.2.3.4", "1.2.3.4.5"}) CHECK_FALSE(ipv4(quoted(bad)));
  const auto ipv6 = fmt("ipv6");
  for (const char* ok : {"::", "::1", "fe80::1:2", "2001:db8:0:0:0:0:2:1", "::ffff:192.0.2.1", "1:2:3:4:5:6:7::"})
    CHECK(ipv6(quoted(ok)));
  for (const char* bad : {"1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", ":1"}) CHECK_FALSE(ipv6(quoted(bad)));
  const SchemaError e = refusal(R"({"properties": {"h": {"format": "hostname"}}})");
  CHECK(e.keyword() == "format");
  CHECK(e.pointer() == "/properties/h/format");
}

TEST_CASE("formats: OpenAPI's integer ranges, durations, references, and generation's host names", "[json_schema]") {
  for (const auto& o : {kExact, kGeneration}) {
    const auto i32 = schema(R"({"type": "integer", "format": "int32"})", o);
    CHECK(i32("2147483647"));
    CHECK(i32("-2147483648"));
    CHECK_FALSE(i32("2147483648"));
    const auto d = schema(R"({"type": "string", "format": "duration"})", o);
    for (const char* ok : {"P1Y", "P1Y2M3DT4H5M6S", "PT36H", "P4W", "P1DT1S"}) CHECK(d(quoted(ok)));
    for (const char* bad : {"P", "PT", "1Y", "P1H", "P1S", "P1W2D", "PT1D"}) CHECK_FALSE(d(quoted(bad)));
    const auto r = schema(R"({"type": "string", "format": "uri-reference"})", o);
    for (const char* ok : {"https://example.com/a", "/relative/path?q", "#frag", "", "a/b:c", "//host/p"}) CHECK(r(quoted(ok)));
    for (const char* bad : {"a:b:/ c", "%zz", "a b"}) CHECK_FALSE(r(quoted(bad)));
    const auto p = schema(R"({"type": "string", "format": "json-pointer"})", o);
    CHECK(p(quoted("/a~1b/0")));
    CHECK_FALSE(p(quoted("a/b")));
    CHECK_FALSE(p(quoted("/a~2")));
  }
  const auto host = gen(R"({"type": "string", "format": "hostname"})");
  CHECK(host(quoted("api.example-1.com")));
  CHECK_FALSE(host(quoted("-bad.com")));
  CHECK_FALSE(host(quoted("a..b")));
  CHECK(refusal(R"({"type": "string", "format": "hostname"})").keyword() == "format");  // exact: the 253-character limit
  // Generation writes dates Python's datetime reads: no year 0000, upper-case T and Z.
  const auto dt = gen(R"({"type": "string", "format": "date-time"})");
  CHECK(dt(quoted("2024-02-29T12:00:00Z")));
  CHECK_FALSE(dt(quoted("0000-01-01T12:00:00Z")));
  CHECK_FALSE(dt(quoted("2024-02-29t12:00:00z")));
  CHECK(schema(R"({"type": "string", "format": "date-time"})")(quoted("0000-01-01t12:00:00z")));
}

// A schema's pattern matches anywhere (ECMA-262 search): anchors inside
// groups that open or close an alternative, lazy quantifiers and escaped
// punctuation, against std::regex_search.
TEST_CASE("patterns with anchors in groups agree with std::regex_search", "[json_schema]") {
  const char* patterns[] = {"(^a|b$)", "^(a|$)", "(^ab$)|(^c)", "(^a)(b|c)", "a(b|c$)", "(?:^a|^b)c", "(^$)|(^a+$)", "a+?b",
                            "^(?<n>a|bc$)"};
  std::vector<std::string> texts{""};
  for (size_t i = 0; i < texts.size() && texts.size() < 1000; ++i)
    if (texts[i].size() < 5)
      for (char c : std::string("abc")) texts.push_back(texts[i] + c);
  for (const char* p : patterns) {
    INFO(p);
    for (const auto& o : {kExact, kGeneration}) {
      const auto g = schema(R"({"type": "string", "pattern": )" + quoted(p) + "}", o);
      const std::regex re(std::regex_replace(std::string(p), std::regex("\\?<n>"), ""), std::regex::ECMAScript);
      for (const std::string& t : texts) {
        INFO(t);
        CHECK(g(quoted(t)) == std::regex_search(t, re));
      }
    }
  }
}
