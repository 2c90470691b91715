// JSON Schema, regex and choice constraints lowered to GBNF: each feature
// compiled with compile_gbnf and matched against texts that validate and
// texts that do not; refusals name their keyword and JSON pointer.
#include <catch2/catch.hpp>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <regex>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex_to_gbnf.h"

using namespace troupe::grammar;

namespace {

struct Compiled {
  std::shared_ptr<const Grammar> g;
  bool operator()(std::string_view text) const { return matches(*g, text); }
};

const SchemaOptions kExact{true}, kGeneration{false};

// The exact profile (every valid instance, any spelling) unless said otherwise.
Compiled schema(std::string_view s, const SchemaOptions& o = kExact) { return {compile_gbnf(json_schema_to_gbnf(s, {}, o))}; }
// The generation profile (the default).
Compiled gen(std::string_view s) { return {compile_gbnf(json_schema_to_gbnf(s))}; }
Compiled regex(std::string_view p) { return {compile_gbnf(regex_to_gbnf(p))}; }

SchemaError refusal(std::string_view s, const SchemaLimits& limits = {}, const SchemaOptions& o = kExact) {
  try {
    const std::string g = json_schema_to_gbnf(s, limits, o);
    FAIL("not refused: " << s << "\n" << g);
  } catch (const SchemaError& e) {
    return e;
  }
  throw std::logic_error("unreachable");
}

// A JSON string literal of `s` (quotes and backslashes escaped).
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

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

TEST_CASE("regex_to_gbnf matches whole strings exactly", "[json_schema]") {
  const auto r = regex(R"(\d{3}-[A-Z][a-z]+(?: [A-Z][a-z]+)?)");
  CHECK(r("123-Alice"));
  CHECK(r("123-Alice Smith"));
  CHECK_FALSE(r("123-alice"));
  CHECK_FALSE(r("x123-Alice"));
  CHECK_FALSE(r("123-Alice "));
  const auto anchors = regex("^(yes|no)$");
  CHECK(anchors("yes"));
  CHECK_FALSE(anchors("yesno"));
  const auto unicode = regex("[α-ω]+😀\\u00e9\\u{1F600}.");
  CHECK(unicode("αβ😀é😀\t"));
  CHECK_FALSE(unicode("αβ😀é😀\n"));
  const auto special = regex(R"(\.\*\+\?\(\)\[\]\{\}\|\\\/\^\$-\t\x41\cJ)");
  CHECK(special(".*+?()[]{}|\\/^$-\tA\n"));
  const auto classes = regex(R"([\w.-]+@[^\s@]+|\S\D\W)");
  CHECK(classes("a.b-c_1@host"));
  CHECK(classes("x!!"));
  CHECK_FALSE(classes("x1!"));
  CHECK(regex("a{0}")(""));
  CHECK(regex("")(""));
  CHECK_THROWS_AS(regex_to_gbnf("[]"), SchemaError);  // matches nothing
  CHECK_THROWS_AS(regex_to_gbnf("[]a"), SchemaError);
}

// std::regex (ECMAScript) decides the same strings as the grammar, over
// every string of up to 6 characters from a small alphabet.
TEST_CASE("regex_to_gbnf agrees with std::regex on every short string", "[json_schema]") {
  const char* patterns[] = {"a*b", "(ab|a)*c?", "[^b]{1,2}(c|)", "(a|b)+?", "a{2,}b{0,1}", "(?:a?b?)*c", "(a*)*b",
                            "((a|b)c)*", ".a.", "[a-b]+|c{3}", "(a|ab)(c|bcd)?", "a?a?a?aaa", "(?:)", "[-a]b?", "a+?b",
                            "a{1,2}?c", "\\:a\\-"};
  std::vector<std::string> texts{""};
  for (size_t i = 0; i < texts.size() && texts.size() < 2000; ++i)
    if (texts[i].size() < 6)
      for (char c : std::string("abcd\n")) texts.push_back(texts[i] + c);
  for (const char* p : patterns) {
    INFO(p);
    const auto g = regex(p);  // lazy quantifiers match the same strings as greedy ones
    const std::regex re(p, std::regex::ECMAScript);
    for (const std::string& t : texts) {
      INFO(t);
      CHECK(g(t) == std::regex_match(t, re));
    }
  }
}

TEST_CASE("choice_to_gbnf accepts exactly one of its strings", "[json_schema]") {
  const Compiled c{compile_gbnf(choice_to_gbnf({"yes", "no", "maybe \"so\"", "ünïcode\n", ""}))};
  CHECK(c("yes"));
  CHECK(c("no"));
  CHECK(c("maybe \"so\""));
  CHECK(c("ünïcode\n"));
  CHECK(c(""));
  CHECK_FALSE(c("yesno"));
  CHECK_FALSE(c("Yes"));
  CHECK_THROWS_AS(choice_to_gbnf({}), std::invalid_argument);
  CHECK_THROWS_AS(choice_to_gbnf({"\xff"}), std::invalid_argument);
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

// ---- the generation profile --------------------------------------------------------------

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

TEST_CASE("generation holds maxLength beside a pattern by capping its repetitions", "[json_schema][generation]") {
  const auto g = gen(R"({"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$", "maxLength": 12})");
  CHECK(g(R"("ab@cd.com")"));
  CHECK_FALSE(g(R"("abcdef@gh.com")"));  // 13 characters
  const auto f = gen(R"({"type": "string", "format": "email", "maxLength": 20})");
  CHECK(f(R"("ab@cd.ef")"));
  CHECK_FALSE(f(R"("abcdefghij@example.com")"));
  CHECK(refusal(R"({"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$", "maxLength": 12})").keyword() == "maxLength");
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
