#include "service/constraint_gate.h"

#include <stdexcept>

#include "engine/grammar/constraint.h"

namespace troupe::service {

namespace {

std::optional<std::string> lower(messages::SamplingFields& s, bool ignore_eos, grammar::GrammarCache* cache) {
  s.grammar.clear();
  if (s.constraint.kind == 0) return std::nullopt;
  const grammar::Constraint c{static_cast<grammar::ConstraintKind>(s.constraint.kind), s.constraint.text, s.constraint.choices};
  const std::string field = std::string("sampling.constraint (") + grammar::kind_name(c.kind) + ")";
  if (ignore_eos) return field + ": ignore_eos cannot go with a constraint; the output ends where its grammar does";
  try {
    std::string gbnf = grammar::constraint_gbnf(c);
    if (cache) cache->get(gbnf);  // compiles it once; the worker's cache compiles its own copy
    s.grammar = std::move(gbnf);
    return std::nullopt;
  } catch (const std::invalid_argument& e) {  // SchemaError, GrammarError, a bad choice list
    return field + ": " + e.what();
  }
}

}  // namespace

std::optional<std::string> lower_constraint(messages::SamplingFields& s, bool ignore_eos, grammar::GrammarCache& cache) {
  return lower(s, ignore_eos, &cache);
}

std::optional<std::string> lower_constraint(messages::SamplingFields& s, bool ignore_eos) {
  return lower(s, ignore_eos, nullptr);
}

}  // namespace troupe::service
