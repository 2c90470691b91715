// The real shapes of Qwen2.5-0.5B and 1.5B (synthetic weights made on the GPU
// machine by ops/gpu-check.sh; hidden from plain runs by the [.real] tag):
// CUDA logits against the CPU backend per format, and 64 greedy steps.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "tests/cuda/support.h"

using namespace troupe;
using namespace troupe::test;

TEST_CASE("real-shape models: CUDA matches the CPU backend", "[.real]") {
  const char* dir = std::getenv("TROUPE_CUDA_REAL_DIR");
  REQUIRE(dir != nullptr);
  struct Case {
    const char* file;
    double tolerance;
    bool greedy;
  };
  for (const Case& c : {Case{"q05-BF16.gguf", 1e-2, true}, Case{"q05-Q8_0.gguf", 3e-2, false},
                        Case{"q05-Q4_0.gguf", 3e-2, false}, Case{"q15-BF16.gguf", 1e-2, true}}) {
    const std::string path = std::string(dir) + "/" + c.file;
    if (!std::filesystem::exists(path)) {
      std::printf("%s: missing, not checked\n", c.file);
      continue;
    }
    INFO(c.file);
    BackendOptions o;
    o.threads = 16;
    o.kv_pages = 64;
    o.max_batch_tokens = 512;
    auto cpu = open_backend(path, o);
    o.device = Device::cuda;
    auto gpu = open_backend(path, o);
    const auto tokens = random_tokens(24, cpu->config().n_vocab, 21);
    const double worst =
        worst_row_error(all_logits(*gpu, tokens, {16}), all_logits(*cpu, tokens, {16}), cpu->config().n_vocab);
    std::printf("%s: cuda vs cpu worst row relative L2 error %.2e (tolerance %.0e)\n", c.file, worst, c.tolerance);
    CHECK(worst < c.tolerance);
    if (c.greedy) {
      const GreedyAgreement a = greedy_agreement(*cpu, *gpu, random_tokens(8, cpu->config().n_vocab, 5), 64);
      std::printf("%s: greedy %d of 64 steps identical (first-difference margin %.2e)\n", c.file, a.same, a.margin);
      CHECK((a.same == 64 || a.margin < 2e-3f));
    }
  }
}
