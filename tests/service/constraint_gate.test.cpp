// A request's constraint checked and lowered to GBNF at admission
// (service/constraint_gate.h): the grammar each kind becomes, compiled once
// through the cache, and each refusal naming the constraint's kind.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/grammar/constraint.h"
#include "engine/grammar/grammar.h"
#include "messages/client_generated.h"
#include "service/constraint_gate.h"

using namespace troupe;
using namespace troupe::service;

namespace {

messages::SamplingFields constrained(wire::ConstraintKind kind, std::string text,
                                     std::vector<std::string> choices = {}) {
  messages::SamplingFields s;
  s.constraint.kind = static_cast<uint8_t>(kind);
  s.constraint.text = std::move(text);
  s.constraint.choices = std::move(choices);
  return s;
}

bool accepts(grammar::GrammarCache& cache, const std::string& gbnf, const std::string& text) {
  return grammar::matches(*cache.get(gbnf), text);
}

}  // namespace

TEST_CASE("constraint gate: no constraint lowers to no grammar, and clears one left from before") {
  grammar::GrammarCache cache;
  messages::SamplingFields s;
  s.grammar = "root ::= \"stale\"";
  CHECK_FALSE(lower_constraint(s, false, cache));
  CHECK(s.grammar.empty());
  CHECK(cache.compiled() == 0);
  s.grammar = "root ::= \"stale\"";
  CHECK_FALSE(lower_constraint(s, true));  // ignore_eos is free without a constraint
  CHECK(s.grammar.empty());
}

TEST_CASE("constraint gate: a regex, a choice and a JSON object lower to grammars that hold the output to them") {
  grammar::GrammarCache cache;
  auto regex = constrained(wire::ConstraintKind::regex, "[0-9]+");
  REQUIRE_FALSE(lower_constraint(regex, false, cache));
  CHECK(accepts(cache, regex.grammar, "2024"));
  CHECK_FALSE(accepts(cache, regex.grammar, "20x4"));
  auto choice = constrained(wire::ConstraintKind::choice, "", {"yes", "no"});
  REQUIRE_FALSE(lower_constraint(choice, false, cache));
  CHECK(accepts(cache, choice.grammar, "no"));
  CHECK_FALSE(accepts(cache, choice.grammar, "maybe"));
  auto object = constrained(wire::ConstraintKind::json_object, "");
  REQUIRE_FALSE(lower_constraint(object, false, cache));
  CHECK(accepts(cache, object.grammar, R"({"a": [1, 2]})"));
  CHECK_FALSE(accepts(cache, object.grammar, "[1, 2]"));
  auto schema = constrained(wire::ConstraintKind::json_schema,
                            R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]})");
  REQUIRE_FALSE(lower_constraint(schema, false, cache));
  CHECK(accepts(cache, schema.grammar, R"({"n": 3})"));
  CHECK_FALSE(accepts(cache, schema.grammar, R"({"n": "3"})"));
  auto gbnf = constrained(wire::ConstraintKind::grammar, "root ::= \"a\" | \"b\"");
  REQUIRE_FALSE(lower_constraint(gbnf, false, cache));
  CHECK(gbnf.grammar == "root ::= \"a\" | \"b\"");  // a grammar is run as sent
  CHECK(accepts(cache, gbnf.grammar, "b"));
  // The constraint itself travels on unchanged.
  CHECK(regex.constraint.text == "[0-9]+");
  CHECK(choice.constraint.choices == std::vector<std::string>{"yes", "no"});
}

TEST_CASE("constraint gate: a grammar is compiled once through the cache, and lowering without one compiles nothing") {
  grammar::GrammarCache cache;
  auto a = constrained(wire::ConstraintKind::regex, "[a-z]{3}");
  auto b = a;
  REQUIRE_FALSE(lower_constraint(a, false, cache));
  CHECK(cache.compiled() == 1);
  REQUIRE_FALSE(lower_constraint(b, false, cache));
  CHECK(cache.compiled() == 1);  // the second request's grammar is the first's
  CHECK(a.grammar == b.grammar);
  auto resumed = constrained(wire::ConstraintKind::regex, "[a-z]{3}");
  REQUIRE_FALSE(lower_constraint(resumed, false));
  CHECK(resumed.grammar == a.grammar);
  CHECK(cache.compiled() == 1);
}

TEST_CASE("constraint gate: ignore_eos with a constraint is refused, naming the constraint's kind") {
  grammar::GrammarCache cache;
  auto s = constrained(wire::ConstraintKind::regex, "[0-9]+");
  CHECK(lower_constraint(s, true, cache) ==
        "sampling.constraint (regex): ignore_eos cannot go with a constraint; the output ends where its grammar does");
  CHECK(s.grammar.empty());
  auto j = constrained(wire::ConstraintKind::json_object, "");
  CHECK(lower_constraint(j, true) ==
        "sampling.constraint (json_object): ignore_eos cannot go with a constraint; the output ends where its grammar "
        "does");
  CHECK(cache.compiled() == 0);
}

TEST_CASE("constraint gate: a choice of nothing, an unknown kind and a bad regex are refused before anything "
          "compiles") {
  grammar::GrammarCache cache;
  auto none = constrained(wire::ConstraintKind::choice, "", {});
  CHECK(lower_constraint(none, false, cache) == "sampling.constraint (choice): a choice needs at least one string");
  CHECK(none.grammar.empty());
  messages::SamplingFields unknown;
  unknown.constraint.kind = 9;
  CHECK(lower_constraint(unknown, false, cache) == "sampling.constraint (unknown): unknown constraint kind 9");
  auto regex = constrained(wire::ConstraintKind::regex, "(unclosed");
  const auto why = lower_constraint(regex, false, cache);
  REQUIRE(why);
  CHECK_THAT(*why, Catch::StartsWith("sampling.constraint (regex): "));
  CHECK(regex.grammar.empty());
  CHECK(cache.compiled() == 0);
}

TEST_CASE("constraint gate: a schema keyword that cannot be enforced is refused with the keyword and where it is") {
  grammar::GrammarCache cache;
  auto s = constrained(wire::ConstraintKind::json_schema,
                       R"({"type":"object","properties":{"tags":{"type":"array","contains":{"type":"string"},)"
                       R"("minContains":2}}})");
  const auto why = lower_constraint(s, false, cache);
  REQUIRE(why);
  CHECK_THAT(*why, Catch::StartsWith("sampling.constraint (json_schema): ") && Catch::Contains("/properties/tags") &&
                       Catch::Contains("minContains"));
  CHECK(s.grammar.empty());
  // Without the cache too: a schema is lowered (and refused) either way.
  auto again = s;
  CHECK(lower_constraint(again, false) == why);
}

TEST_CASE("constraint gate: a grammar that does not compile is refused at admission, and passes when admitted before") {
  grammar::GrammarCache cache;
  auto s = constrained(wire::ConstraintKind::grammar, "root ::= undefined-rule");
  const auto why = lower_constraint(s, false, cache);
  REQUIRE(why);
  CHECK_THAT(*why, Catch::StartsWith("sampling.constraint (grammar): ") && Catch::Contains("undefined-rule"));
  CHECK(s.grammar.empty());
  // A resumed job's constraint was checked when it was first admitted: it
  // is lowered, not compiled again.
  auto resumed = constrained(wire::ConstraintKind::grammar, "root ::= undefined-rule");
  CHECK_FALSE(lower_constraint(resumed, false));
  CHECK(resumed.grammar == "root ::= undefined-rule");
}
