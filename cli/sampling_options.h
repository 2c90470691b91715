#pragma once
// The sampling flags shared by every command that generates text.
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "messages/client_frames.h"

namespace CLI {
class App;
}

namespace troupe::cli {

struct SamplingOptions {
  SamplingParams params;
  std::vector<std::string> stop;
  int max_tokens = 256;
  std::string tier;  // cascade routing on a server with tiers; empty: the server's default
  float escalate_threshold = 0;
  std::string escalate_class;
  int32_t kv_budget = 0;  // KV positions the request keeps (serve --kv-budget's, per request); 0: the server's
  // Constrained output (at most one): files are read when the request is built.
  std::string json_schema_file, grammar_file, regex;
  std::vector<std::string> choices;
  bool json_object = false;
};

void add_sampling_flags(CLI::App& cmd, SamplingOptions& o);  // with the constraint flags
// --json-schema, --grammar, --regex, --choice, --json-object (at most one).
void add_constraint_flags(CLI::App& cmd, SamplingOptions& o);
// --tier, --escalate-threshold and --kv-budget: for commands that ask a server.
void add_tier_flags(CLI::App& cmd, SamplingOptions& o);
// As the client protocol carries them. Throws std::invalid_argument for a
// constraint file that cannot be read.
messages::SamplingFields wire_sampling(const SamplingOptions& o);
// The constraint the flags ask for (kind 0: none).
messages::ConstraintFields constraint_of(const SamplingOptions& o);

}  // namespace troupe::cli
