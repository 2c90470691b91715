// ALiBi: the head slopes against the paper's definition, and attention with
// the bias computed in the kernels against a float64 reference far past any
// trained context.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "engine/alibi.h"
#include "engine/backend.h"
#include "engine/generator.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"

using namespace troupe;

namespace {

// The ALiBi paper's reference recipe, in double: a geometric sequence
// 2^(-8/n)^(i+1) for a power of two n; otherwise the closest power of two's
// slopes, then every other slope of twice as many heads.
std::vector<double> paper_slopes(int n, double max_bias) {
  const auto power_of_two = [max_bias](int k) {
    std::vector<double> s;
    const double start = std::pow(2.0, -max_bias / k);
    for (int i = 0; i < k; ++i) s.push_back(std::pow(start, i + 1));
    return s;
  };
  int closest = 1;
  while (closest * 2 <= n) closest *= 2;
  std::vector<double> s = power_of_two(closest);
  const std::vector<double> twice = power_of_two(2 * closest);
  for (int i = 0; static_cast<int>(s.size()) < n; i += 2) s.push_back(twice[static_cast<size_t>(i)]);
  return s;
}

}  // namespace

TEST_CASE("ALiBi slopes equal the paper's for 1 to 64 heads, powers of two or not") {
  for (float max_bias : {8.0f, 16.0f}) {
    for (int n = 1; n <= 64; ++n) {
      const std::vector<float> got = alibi_slopes(n, max_bias);
      const std::vector<double> want = paper_slopes(n, max_bias);
      REQUIRE(got.size() == want.size());
      for (int h = 0; h < n; ++h) {
        INFO(n << " heads, head " << h << ", max bias " << max_bias);
        CHECK(got[static_cast<size_t>(h)] == Approx(want[static_cast<size_t>(h)]).epsilon(1e-6));
      }
    }
  }
  // Spot values: 8 heads are 1/2, 1/4, ..., 1/256.
  const auto eight = alibi_slopes(8, 8.0f);
  CHECK(eight.front() == 0.5f);
  CHECK(eight.back() == 1.0f / 256.0f);
}

TEST_CASE("an ALiBi model generates past its trained context, where a RoPE model stops at it") {
  for (const std::string arch : {"bloom", "qwen2"}) {
    SyntheticModelSpec spec;
    spec.architecture = arch;
    spec.n_embd = 64;
    spec.n_ff = 128;
    spec.context_length = 32;  // trained on 32 positions
    const auto path = std::filesystem::temp_directory_path() / ("troupe-alibi-ctx-" + arch + "-" + std::to_string(getpid()) + ".gguf");
    write_synthetic_model(spec, path.string());
    BackendOptions o;
    o.kv_pages = 16;  // 256 positions of KV
    auto backend = open_backend(path.string(), o);
    Tokenizer tok(load_vocabulary(backend->file()));
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(10 + i % 50);  // 40 tokens: past the 32 trained
    GenerateOptions g;
    g.max_tokens = 20;
    g.sampling.temperature = 0;
    const GenerateResult r = generate(*backend, tok, prompt, g, {});
    INFO(arch << ": " << r.tokens.size() << " tokens, finish " << finish_reason_name(r.finish));
    if (arch == "bloom") {
      CHECK(r.finish != FinishReason::context_full);  // 20 tokens, or an end-of-text token before
      CHECK(!r.tokens.empty());
    } else {
      CHECK(r.finish == FinishReason::context_full);
      CHECK(r.tokens.size() <= 1);
    }
    std::filesystem::remove(path);
  }
}
