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
};

void add_sampling_flags(CLI::App& cmd, SamplingOptions& o);
// --tier and --escalate-threshold: for commands that ask a server.
void add_tier_flags(CLI::App& cmd, SamplingOptions& o);
// As the client protocol carries them.
messages::SamplingFields wire_sampling(const SamplingOptions& o);

}  // namespace troupe::cli
