// The Backend interface on the CPU: what open_backend gives, the host token
// choice, and a clear refusal of CUDA where there is none.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/page_pool.h"
#include "engine/synthetic_model.h"

using namespace troupe;

namespace {
std::string tiny_model() {
  const auto path = std::filesystem::temp_directory_path() / "troupe-backend-test.gguf";
  write_synthetic_model(SyntheticModelSpec{}, path.string());
  return path.string();
}
}  // namespace

TEST_CASE("open_backend gives a CPU backend whose pages serve KvSequence") {
  BackendOptions o;
  o.kv_pages = 5;
  auto b = open_backend(tiny_model(), o);
  CHECK(b->pages().capacity() == 5);
  CHECK(b->describe().find("cpu") == 0);
  KvSequence seq(b->pages(), b->page_size());
  REQUIRE(seq.reserve(20));
  std::vector<int32_t> tokens{1, 2, 3};
  Batch batch;
  batch.sequences.push_back({tokens, 0, seq.block_table(), LogitsWanted::last});
  std::vector<int32_t> picked;
  const TokenChoice greedy{};
  b->forward_choose(batch, std::span(&greedy, 1), picked);
  REQUIRE(picked.size() == 1);
  CHECK(picked[0] >= 0);
  CHECK(picked[0] < b->config().n_vocab);
}

TEST_CASE("open_backend runs attention in bf16 when asked: logits near fp32's, not equal, and said in its description") {
  const auto run = [](AttentionPrecision precision, std::string& description) {
    BackendOptions o;
    o.kv_pages = 24;
    o.attention_precision = precision;
    auto b = open_backend(tiny_model(), o);
    description = b->describe();
    KvSequence seq(b->pages(), b->page_size());
    REQUIRE(seq.reserve(300));
    std::vector<int32_t> tokens(300);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + 3) % 200);
    Batch batch;
    batch.sequences.push_back({tokens, 0, seq.block_table(), LogitsWanted::last});
    Logits out;
    b->forward(batch, out);
    return std::vector<float>(out.row(0).begin(), out.row(0).end());
  };
  std::string fp32_says, bf16_says;
  const auto fp32 = run(AttentionPrecision::fp32, fp32_says);
  const auto bf16 = run(AttentionPrecision::bf16, bf16_says);
  CHECK(fp32_says.find("bf16") == std::string::npos);
  CHECK(bf16_says.find("attention bf16") != std::string::npos);
  REQUIRE(bf16.size() == fp32.size());
  CHECK(bf16 != fp32);
  float largest = 0, spread = 0;
  for (size_t i = 0; i < fp32.size(); ++i) {
    largest = std::max(largest, std::fabs(bf16[i] - fp32[i]));
    spread = std::max(spread, std::fabs(fp32[i]));
  }
  INFO("largest logit change " << largest << " of logits up to " << spread);
  CHECK(largest < 0.02f * spread);
  CHECK_THROWS_WITH(attention_precision_from_name("fp16"), Catch::Contains("'fp16' (fp32, bf16)"));
}

TEST_CASE("device and weight names are parsed or refused by name") {
  CHECK(device_from_name("cuda") == Device::cuda);
  CHECK_THROWS_WITH(device_from_name("tpu"), Catch::Contains("unknown device 'tpu'"));
  CHECK(device_weights_from_name("int4") == DeviceWeights::int4);
  CHECK_THROWS_WITH(device_weights_from_name("fp8"), Catch::Contains("'fp8'"));
}

TEST_CASE("without a usable GPU, asking for CUDA is a clear error") {
  std::string why;
  if (cuda_available(&why)) return;  // a GPU machine: tests/cuda covers it
  CHECK_FALSE(why.empty());
  BackendOptions o;
  o.device = Device::cuda;
  CHECK_THROWS_WITH(open_backend(tiny_model(), o), Catch::Contains("CUDA"));
}

TEST_CASE("the CUDA backend refuses the architectures it does not run, naming the CPU backend, GPU or not") {
  std::string why;
  if (!cuda_available(&why) && why.find("no CUDA backend") != std::string::npos) return;  // not built in (TROUPE_CUDA=OFF)
  const auto dir = std::filesystem::temp_directory_path();
  for (const std::string arch : {"gemma3", "bloom", "mpt", "qwen2moe", "llama"}) {
    SyntheticModelSpec spec;
    spec.architecture = arch;
    spec.n_embd = 64;
    spec.n_ff = 128;
    if (arch.ends_with("moe") || arch == "llama") spec.n_expert = 4, spec.n_expert_used = 2;  // llama: Mixtral-style
    const auto path = dir / ("troupe-cuda-refusal-" + arch + "-" + std::to_string(getpid()) + ".gguf");
    write_synthetic_model(spec, path.string());
    BackendOptions o;
    o.device = Device::cuda;
    INFO(arch);
    CHECK_THROWS_WITH(open_backend(path.string(), o), Catch::Contains("runs on the CPU backend"));
    std::filesystem::remove(path);
  }
}

TEST_CASE("host token choice: greedy argmax, top-k and top-p cuts, reproducible draws") {
  const std::vector<float> logits{std::log(0.1f), std::log(0.4f), std::log(0.3f), std::log(0.2f)};
  CHECK(choose_token(logits, TokenChoice{}) == 1);
  std::map<int32_t, int> counts;
  for (uint64_t s = 0; s < 4000; ++s) ++counts[choose_token(logits, TokenChoice{1.0f, 2, 1.0f, s, 0})];
  CHECK(counts.size() == 2);  // only ids 1 and 2 survive top-k 2
  CHECK(counts[1] > counts[2]);
  counts.clear();
  for (uint64_t s = 0; s < 4000; ++s) ++counts[choose_token(logits, TokenChoice{1.0f, 0, 0.65f, s, 0})];
  CHECK(counts.size() == 2);  // 0.4 + 0.3 reach 0.65
  const TokenChoice c{0.7f, 0, 1.0f, 42, 9};
  CHECK(choose_token(logits, c) == choose_token(logits, c));
}
