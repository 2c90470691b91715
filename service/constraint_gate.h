#pragma once
// A request's constraint (Sampling.constraint) checked and lowered to the
// GBNF its worker runs, when the service admits it: a grammar that does not
// compile or a schema keyword that cannot be enforced is refused here, with
// the keyword and where it is, before any token is generated.
#include <optional>
#include <string>

#include "messages/client_frames.h"

namespace troupe::grammar {
class GrammarCache;
}

namespace troupe::service {

// Sets s.grammar; the error for invalid_field otherwise. `ignore_eos`: the
// request's; a constrained output ends where its grammar does.
std::optional<std::string> lower_constraint(messages::SamplingFields& s, bool ignore_eos, grammar::GrammarCache& cache);
// The same without compiling: for a constraint admitted before (a resumed job's).
std::optional<std::string> lower_constraint(messages::SamplingFields& s, bool ignore_eos);

}  // namespace troupe::service
