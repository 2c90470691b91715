// `troupe serve --attention-precision bf16`: the server's attention runs in
// bf16, and its streams, several at once and batched together, give each
// prompt the tokens the engine gives it alone in bf16: a row's bf16
// arithmetic is its own, as fp32's is.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;

TEST_CASE("serve --attention-precision bf16: concurrent streams equal each prompt generated alone in bf16", "[service]") {
  Server server("bf16", {"--attention-precision", "bf16"});
  Reference bf16(AttentionPrecision::bf16);
  std::vector<std::string> prompts;
  for (int i = 0; i < 4; ++i) {
    std::string p;
    for (int k = 0; k <= 6 * i; ++k) p += "Line " + std::to_string(k) + " of request " + std::to_string(i) + " names a fox. ";
    prompts.push_back(p);
  }
  const std::vector<messages::StreamOutcome> got = concurrent_greedy(server.endpoint, prompts, 40);
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("stream " << i << ": " << got[i].message);
    REQUIRE(got[i].done);
    CHECK(got[i].tokens == bf16.greedy(prompts[i], 40));
  }
  // The server says what it runs (this small model's answers are too sure
  // for a logprob to show bf16's rounding; tests/engine shows the logits move).
  std::ifstream log(Server::log("bf16"));
  const std::string said((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK(said.find("attention bf16") != std::string::npos);
}
