#include <catch2/catch.hpp>

#include <chrono>
#include <random>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/utf8_ranges.h"

using namespace troupe::grammar;

namespace {

bool ok(std::string_view grammar, std::string_view text) { return matches(*compile_gbnf(grammar), text); }

std::string refusal(std::string_view grammar) {
  try {
    compile_gbnf(grammar);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

// llama.cpp's JSON grammar, as users have it.
constexpr std::string_view kJson = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)";

}  // namespace

TEST_CASE("llama.cpp's JSON grammar parses and matches JSON", "[grammar]") {
  const auto g = compile_gbnf(kJson);
  CHECK(matches(*g, R"({"a": [1, 2.5, -3e4], "b": {"c": "d\n\u00e9"}, "e": true})"));
  CHECK(matches(*g, "{}"));
  CHECK(matches(*g, "{\"ключ\": \"значение 🙂\"}"));
  CHECK_FALSE(matches(*g, R"({"a": })"));
  CHECK_FALSE(matches(*g, R"({"a": 01})"));
  CHECK_FALSE(matches(*g, R"({"a": "unclosed})"));
  CHECK_FALSE(matches(*g, "[1]"));  // the root is an object
}

TEST_CASE("GBNF literals, classes, dot, groups and every repetition form", "[grammar]") {
  CHECK(ok(R"(root ::= "ab" | "c")", "ab"));
  CHECK(ok(R"(root ::= "ab" | "c")", "c"));
  CHECK_FALSE(ok(R"(root ::= "ab" | "c")", "a"));
  CHECK(ok(R"(root ::= [a-c]+ "!")", "abcab!"));
  CHECK_FALSE(ok(R"(root ::= [a-c]+ "!")", "!"));
  CHECK(ok(R"(root ::= [^a-c]*)", "xyz é"));
  CHECK_FALSE(ok(R"(root ::= [^a-c]*)", "xay"));
  CHECK(ok(R"(root ::= . . .)", "a€🙂"));
  CHECK_FALSE(ok(R"(root ::= . .)", "a"));
  CHECK(ok(R"(root ::= ("x" "y")? "z")", "xyz"));
  CHECK(ok(R"(root ::= ("x" "y")? "z")", "z"));
  CHECK(ok(R"(root ::= "ab"{2,3})", "ababab"));
  CHECK_FALSE(ok(R"(root ::= "ab"{2,3})", "ab"));
  CHECK_FALSE(ok(R"(root ::= "ab"{2,3})", "abababab"));
  CHECK(ok(R"(root ::= [0-9]{3})", "123"));
  CHECK_FALSE(ok(R"(root ::= [0-9]{3})", "1234"));
  CHECK(ok(R"(root ::= "a"{2,} "b")", "aaaab"));
  CHECK_FALSE(ok(R"(root ::= "a"{2,} "b")", "ab"));
  CHECK(ok("root ::= \"\\x41\\u00e9\\U0001F642\\n\"", "Aé🙂\n"));
  CHECK(ok("root ::= [\\u0400-\\u04FF]+", "привет"));
  CHECK_FALSE(ok("root ::= [\\u0400-\\u04FF]+", "hello"));
  CHECK(ok("root ::= x\nx ::= \"1\" x | \"2\"", "1112"));
  CHECK(ok("root ::= a\n  | b\na ::= \"a\"\nb ::= \"b\"", "b"));
}

TEST_CASE("stacked repetitions fold into one: the same language, and no exponential parse stacks", "[grammar]") {
  // Found by the gbnf fuzz target: 30 stacked '+' grew the automaton's parse
  // stacks past their limit, seconds into the first mask.
  std::string deep = "root ::= [a]";
  for (int i = 0; i < 30; ++i) deep += '+';
  const auto g = compile_gbnf(deep);
  CHECK(matches(*g, "a"));
  CHECK(matches(*g, std::string(200, 'a')));
  CHECK_FALSE(matches(*g, ""));
  const auto plus_opt = compile_gbnf(R"(root ::= ("ab")+? "!")");
  CHECK(matches(*plus_opt, "!"));
  CHECK(matches(*plus_opt, "ababab!"));
  const auto opt_opt = compile_gbnf(R"(root ::= "x"?? "!")");
  CHECK(matches(*opt_opt, "!"));
  CHECK(matches(*opt_opt, "x!"));
  CHECK_FALSE(matches(*opt_opt, "xx!"));
  const auto opt_plus = compile_gbnf(R"(root ::= "x"?+ "!")");
  CHECK(matches(*opt_plus, "!"));
  CHECK(matches(*opt_plus, "xxxx!"));
  const auto bounded = compile_gbnf(R"(root ::= "x"{2}+ "!")");  // after {m,n}, a new base: (xx)+
  CHECK(matches(*bounded, "xxxx!"));
  CHECK_FALSE(matches(*bounded, "xxx!"));
}

TEST_CASE("repetitions nested in groups too deep are refused in a moment, not after seconds of parse stacks", "[grammar]") {
  // ((((a)+)+)+...)+: each level doubles the stacks a state holds; the
  // per-state cap refuses it at once (the worker ends that sequence only).
  std::string nested = "root ::= ";
  for (int i = 0; i < 25; ++i) nested += '(';
  nested += "[a]";
  for (int i = 0; i < 25; ++i) nested += ")+";
  const auto g = compile_gbnf(nested);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(matches(*g, std::string(64, 'a')), GrammarError);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
}

TEST_CASE("UTF-8 ranges cover exactly the code points they name", "[grammar]") {
  const auto g = compile_gbnf("root ::= [\\u007F-\\u0800\\uFFFD]");
  for (uint32_t cp : {0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFDu}) {
    std::string s;
    append_utf8(s, cp);
    CHECK(matches(*g, s));
  }
  for (uint32_t cp : {0x7Eu, 0x801u, 0xFFFCu, 0x10000u}) {
    std::string s;
    append_utf8(s, cp);
    CHECK_FALSE(matches(*g, s));
  }
  CHECK_FALSE(matches(*g, "\xC0\x80"));  // an overlong encoding is not a character
  std::mt19937 rng(7);
  const auto any = compile_gbnf("root ::= [^\\u0041-\\u005A\\u4E00-\\u9FFF]");
  for (int i = 0; i < 2000; ++i) {
    uint32_t cp = rng() % 0x110000;
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    append_utf8(s, cp);
    const bool inside = (cp >= 0x41 && cp <= 0x5A) || (cp >= 0x4E00 && cp <= 0x9FFF);
    CHECK(matches(*any, s) == !inside);
  }
}

TEST_CASE("repeating what can match nothing is no left recursion", "[grammar]") {
  CHECK(ok("root ::= (\"a\"?)* \"b\"", "aaab"));
  CHECK(ok("root ::= (\"a\"?)* \"b\"", "b"));
  CHECK(ok("root ::= (\"x\"* | \"y\")+", "xxyx"));
  CHECK(ok("root ::= a\na ::= a | \"x\"", "x"));  // a tail reference to itself adds nothing
}

TEST_CASE("a bad grammar is refused with where and why", "[grammar]") {
  CHECK_THAT(refusal("root ::= \"a"), Catch::Contains("line 1") && Catch::Contains("not closed"));
  CHECK_THAT(refusal("root ::= b"), Catch::Contains("rule 'b' is used but never defined"));
  CHECK_THAT(refusal("start ::= \"a\""), Catch::Contains("no rule 'root'"));
  CHECK_THAT(refusal("root ::= root \"a\" | \"b\""), Catch::Contains("left-recursive"));
  CHECK_THAT(refusal("root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\""), Catch::Contains("left-recursive"));
  CHECK_THAT(refusal("root ::= \"a\" root"), Catch::Contains("can never end"));
  CHECK_THAT(refusal("root ::= (\"a\"? root \"b\")?"), Catch::Contains("rule 'root"));
  CHECK_THAT(refusal("root ::= [b-a]"), Catch::Contains("backwards"));
  CHECK_THAT(refusal("root ::= \"a\"{3,2}"), Catch::Contains("maximum is below"));
  CHECK_THAT(refusal("root ::= \"a\"{100000}"), Catch::Contains("repetition count above"));
  CHECK_THAT(refusal("root ::= \"\\q\""), Catch::Contains("unknown escape"));
  CHECK_THAT(refusal("root ::= \"a\"\nroot ::= \"b\""), Catch::Contains("defined twice"));
  CHECK_THAT(refusal("root ::= )"), Catch::Contains("unexpected ')'"));
  CHECK_THAT(refusal("root ::= [^\\x00-\\U0010FFFF]"), Catch::Contains("matches no character"));
}

TEST_CASE("a grammar whose expansion would explode is refused quickly", "[grammar]") {
  // Nested repetitions share rules, so these stay small...
  CHECK(ok("root ::= ((\"a\"{0,100}){0,100}){0,100} \"b\"", "aaab"));
  // ...while a text that really grows past the limit is refused.
  std::string big = "root ::= \"a\"{9000} \"b\"{9000} \"c\"{9000}";
  GrammarLimits small;
  small.max_elements = 20000;
  CHECK_THROWS_AS(compile_gbnf(big, small), GrammarError);
  CHECK_THROWS_WITH(compile_gbnf(std::string((1 << 20) + 1, ' ')), Catch::Contains("limit"));
}

namespace {

// A vocabulary where the tokens' bytes overlap in every way the trie walk must get right.
std::shared_ptr<const TokenTrie> tiny_trie() {
  std::vector<std::string> bytes{"", "{", "}", "\"", "\":", " ", "\"a", "a", "ab", "abc", "b", "1", "12", "\"}",
                                 ", \"", "é", "\xC3", "\xA9", "true", "tr", "x", "{\"", "\n"};
  return std::make_shared<TokenTrie>(bytes, std::vector<int32_t>{0});
}

}  // namespace

TEST_CASE("token masks equal a token-by-token check on every state a text passes", "[grammar]") {
  auto trie = tiny_trie();
  auto index = std::make_shared<GrammarIndex>(compile_gbnf(kJson), trie);
  const std::string text = "{\"ab\": 12, \"\xC3\xA9\": true}";
  Matcher m(index);
  for (size_t at = 0;;) {
    const auto mask = m.allowed();
    for (int32_t t = 0; t < trie->vocabulary_size(); ++t) CHECK(mask->allows(t) == m.allows(t));
    if (at == text.size()) break;
    // Longest tokens first, as a tokenizer would split it.
    const auto [token, len] = trie->longest_prefix(std::string_view(text).substr(at));
    REQUIRE(len > 0);
    REQUIRE(m.accept(token));
    at += len;
  }
  CHECK(m.can_end());
  CHECK(m.allowed()->allows(0));  // end of generation, where the text is whole
  CHECK(m.accept(0));
  CHECK(m.finished());
  CHECK(m.allowed()->count() == 0);
}

TEST_CASE("a refused token leaves the matcher where it was", "[grammar]") {
  auto index = std::make_shared<GrammarIndex>(compile_gbnf(R"(root ::= "ab" "c"?)"), tiny_trie());
  Matcher m(index);
  CHECK_FALSE(m.accept(10));  // "b"
  CHECK_FALSE(m.accept(0));   // cannot end yet
  CHECK(m.accept(8));         // "ab"
  CHECK(m.can_end());
  CHECK_FALSE(m.accept(9));  // "abc" is past the grammar
}

TEST_CASE("jump-forward writes the grammar's only continuation and leaves its last piece", "[grammar]") {
  auto index = std::make_shared<GrammarIndex>(compile_gbnf(R"(root ::= "{\"abc\": " [0-9]+ "}")"), tiny_trie());
  Matcher m(index);
  // Forced: {"abc":_ → longest tokens {" abc ": then the space is left to the model.
  const std::vector<int32_t> forced = m.forced_tokens(16);
  CHECK(forced == std::vector<int32_t>{21, 9, 4});
  // The same run from any point of it: forcing does not depend on how many
  // tokens a step takes at once.
  CHECK(m.forced_tokens(1) == std::vector<int32_t>{21});
  // Where tokens are forced, the logits keep the first one only.
  std::vector<float> logits(static_cast<size_t>(index->trie().vocabulary_size()), 1.0f);
  CHECK(m.apply(logits));
  for (size_t i = 0; i < logits.size(); ++i) CHECK((logits[i] > 0) == (i == 21));
  for (int32_t t : forced) REQUIRE(m.accept(t));
  CHECK(m.allows(5));
  CHECK_FALSE(m.allows(11));
  CHECK(m.forced_tokens(16).empty());  // one byte left: the model writes it
}
