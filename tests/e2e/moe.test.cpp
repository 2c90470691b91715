// A mixture of experts served end to end: concurrent streams equal the
// engine run alone, and `stats` reports the expert load, every token of
// every layer counted once per expert it went to.
#include <catch2/catch.hpp>

#include <numeric>

#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

TEST_CASE("a mixture of experts: 16 served streams equal the engine alone, and stats count each expert's tokens", "[service]") {
  SyntheticModelSpec spec = service_model_spec();
  spec.architecture = "qwen2moe";
  spec.n_expert = 8;
  spec.n_expert_used = 2;
  spec.n_ff_expert = 256;
  const auto path = std::filesystem::temp_directory_path() / ("troupe-moe-service-" + std::to_string(getpid()) + ".gguf");
  write_synthetic_model(spec, path.string());
  const std::string endpoint = ipc_endpoint("moe");
  ChildProcess server({troupe_binary(), "serve", "-m", path.string(), "--listen", endpoint, "--threads", "1",
                       "--kv-tokens", "4096", "--data-dir", Server::data_dir(endpoint)},
                      Server::log("moe"), "listening on");
  // 16 streams at once: each request shares its steps, and its experts' matmuls, with 15 others.
  std::vector<std::string> prompts;
  for (int i = 0; i < 16; ++i) prompts.push_back("the fox " + std::to_string(i) + (i % 3 ? " jumps over the lazy dog" : ""));
  constexpr int kTokens = 12;
  const auto got = concurrent_greedy(endpoint, prompts, kTokens);

  BackendOptions o;
  o.kv_pages = 64;
  auto backend = open_backend(path.string(), o);
  Tokenizer tok(load_vocabulary(backend->file()));
  uint64_t forward_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions g;
    g.max_tokens = kTokens;
    g.sampling.temperature = 0;
    const auto ids = tok.encode(prompts[i], tok.add_bos_by_default(), false);
    INFO("prompt " << i << ": " << got[i].message);
    REQUIRE(got[i].done);
    CHECK(got[i].tokens == generate(*backend, tok, ids, g, {}).tokens);
    // The prompt, then every generated token but the last goes through a forward pass.
    forward_tokens += static_cast<uint64_t>(got[i].usage.prompt_tokens) + got[i].tokens.size() - 1;
  }
  messages::ClientConnection c(endpoint);
  messages::Bytes keep;
  const auto* s = stats(c, keep);
  REQUIRE(s);
  REQUIRE(s->expert_tokens());
  REQUIRE(s->expert_tokens()->size() == 8);
  uint64_t total = 0, used = 0;
  for (uint64_t n : *s->expert_tokens()) total += n, used += n > 0;
  // Each token of each layer went to exactly n_expert_used experts; a stream
  // that ended on an end-of-text token also ran the token before it.
  const auto per_token = static_cast<uint64_t>(spec.n_layer * spec.n_expert_used);
  CHECK(total % per_token == 0);
  CHECK(total / per_token >= forward_tokens);
  CHECK(total / per_token <= forward_tokens + prompts.size());
  CHECK(used > 1);  // the router spreads tokens over several experts
  std::filesystem::remove(path);
}
