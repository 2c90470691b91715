// regex_to_gbnf and choice_to_gbnf on their own: whole strings, agreement with std::regex.
// Each grammar compiled with compile_gbnf and matched against texts it must and must not
// accept (grammar_schema_testing.h).
#include <catch2/catch.hpp>

#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/engine/grammar_schema_testing.h"

using namespace troupe::grammar;
using namespace troupe::grammar::testing;

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
