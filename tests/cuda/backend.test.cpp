// The CUDA backend against the CPU backend on the same synthetic models:
// logits within a stated tolerance per weight format, greedy tokens equal,
// and a row's result independent of its batch and of CUDA graphs.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "tests/cuda/support.h"

using namespace troupe;
using namespace troupe::test;

namespace {

// Tolerances on ||cuda - cpu|| / ||cpu|| per logits row. The GPU keeps
// activations in f32 for small batches and rounds them to bf16 for cuBLAS;
// the CPU quantizes activations to 8 bits for quantized weights, and the
// F32 file's weights are rounded to bf16 on the device.
struct FormatCase {
  TensorType type;
  double tolerance;
};
constexpr FormatCase kFormats[] = {{TensorType::F32, 2e-2}, {TensorType::BF16, 1e-2}, {TensorType::Q8_0, 3e-2},
                                   {TensorType::Q4_0, 3e-2}, {TensorType::Q4_K, 3e-2}};

SyntheticModelSpec spec_256() {
  SyntheticModelSpec s;  // head_dim 64; widths multiples of 256 for Q4_K
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 512;
  s.n_layer = 2;
  s.tied_output = false;
  return s;
}

}  // namespace

TEST_CASE("CUDA logits match the CPU backend for every weight format") {
  for (const auto& f : kFormats) {
    INFO(tensor_type_name(f.type));
    const std::string path = synthetic_model(f.type, "logits", spec_256());
    auto cpu = open(path, Device::cpu), gpu = open(path, Device::cuda);
    // 300 positions: past one attention split (256), prefilled as 37 + 255 then 8 decode steps.
    const auto tokens = random_tokens(300, cpu->config().n_vocab, 11);
    const std::vector<size_t> chunks{37, 255};
    const auto want = all_logits(*cpu, tokens, chunks);
    const auto got = all_logits(*gpu, tokens, chunks);
    REQUIRE(got.size() == want.size());
    const double worst = worst_row_error(got, want, cpu->config().n_vocab);
    std::printf("cuda vs cpu logits, %s: worst row relative L2 error %.2e (tolerance %.0e)\n",
                std::string(tensor_type_name(f.type)).c_str(), worst, f.tolerance);
    CHECK(worst < f.tolerance);
  }
}

TEST_CASE("head_dim 128 and a llama-style model also match the CPU") {
  SyntheticModelSpec s = spec_256();
  s.architecture = "llama";
  s.n_head = 2;  // head_dim 128
  s.n_head_kv = 1;
  const std::string path = synthetic_model(TensorType::BF16, "hd128", s);
  auto cpu = open(path, Device::cpu), gpu = open(path, Device::cuda);
  const auto tokens = random_tokens(40, cpu->config().n_vocab, 5);
  const auto want = all_logits(*cpu, tokens, {20});
  const auto got = all_logits(*gpu, tokens, {20});
  const double worst = worst_row_error(got, want, cpu->config().n_vocab);
  std::printf("cuda vs cpu logits, llama head_dim 128 BF16: worst row relative L2 error %.2e\n", worst);
  CHECK(worst < 1e-2);
}

TEST_CASE("device weight formats can be forced at load and stay close to the file") {
  const std::string path = synthetic_model(TensorType::F32, "forced", spec_256());
  auto cpu = open(path, Device::cpu);
  const auto tokens = random_tokens(24, cpu->config().n_vocab, 3);
  const auto want = all_logits(*cpu, tokens, {16});
  for (auto [w, tol] : {std::pair{DeviceWeights::bf16, 2e-2}, {DeviceWeights::int8, 5e-2}, {DeviceWeights::int4, 0.3}}) {
    auto gpu = open(path, Device::cuda, 64, w);
    const double worst = worst_row_error(all_logits(*gpu, tokens, {16}), want, cpu->config().n_vocab);
    std::printf("cuda %s vs cpu F32: worst row relative L2 error %.2e\n", gpu->describe().c_str(), worst);
    CHECK(worst < tol);
  }
}

TEST_CASE("a row's CUDA logits do not depend on its batch or on CUDA graphs") {
  const std::string path = synthetic_model(TensorType::Q8_0, "batch", spec_256());
  auto gpu = open(path, Device::cuda, 128);
  const int64_t vocab = gpu->config().n_vocab;
  constexpr int kSeqs = 20;  // up to 32 rows the int8 GEMV serves every size alike
  std::vector<std::vector<int32_t>> prompts;
  std::vector<KvSequence> seqs;
  for (int i = 0; i < kSeqs; ++i) {
    prompts.push_back(random_tokens(3 + 5 * i, vocab, 200 + i));
    seqs.emplace_back(gpu->pages(), gpu->page_size());
    REQUIRE(seqs.back().reserve(static_cast<int32_t>(prompts[i].size()) + 1));
  }
  Logits out;
  for (int i = 0; i < kSeqs; ++i) {  // prefill each
    Batch b;
    b.sequences.push_back({prompts[i], 0, seqs[i].block_table(), LogitsWanted::none});
    gpu->forward(b, out);
  }
  const int32_t next = 1;
  auto step_of = [&](int i) {
    return BatchSequence{std::span<const int32_t>(&next, 1), static_cast<int32_t>(prompts[i].size()),
                         seqs[i].block_table(), LogitsWanted::last};
  };
  for (bool graphs : {true, false}) {
    INFO("graphs " << graphs);
    setenv("TROUPE_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    Batch all;
    for (int i = 0; i < kSeqs; ++i) all.sequences.push_back(step_of(i));
    Logits together;
    gpu->forward(all, together);
    REQUIRE(together.rows() == kSeqs);
    for (int i = 0; i < kSeqs; ++i) {
      Batch one;
      one.sequences.push_back(step_of(i));
      gpu->forward(one, out);
      CHECK(std::equal(out.row(0).begin(), out.row(0).end(), together.row(i).begin()));
    }
  }
  unsetenv("TROUPE_CUDA_GRAPHS");
}

TEST_CASE("greedy decoding on CUDA picks the CPU's tokens for 64 steps") {
  // The F32 file's weights are rounded to bf16 on the device, hence its wider near-tie margin.
  for (auto [type, tie] : {std::pair{TensorType::F32, 1e-2f}, {TensorType::BF16, 2e-3f}}) {
    INFO(tensor_type_name(type));
    const std::string path = synthetic_model(type, "greedy", spec_256());
    auto cpu = open(path, Device::cpu), gpu = open(path, Device::cuda);
    const GreedyAgreement a = greedy_agreement(*cpu, *gpu, random_tokens(12, cpu->config().n_vocab, 77), 64);
    std::printf("greedy %s: %d of 64 steps identical%s\n", std::string(tensor_type_name(type)).c_str(), a.same,
                a.same < 64 ? (", then a near-tie of relative margin " + std::to_string(a.margin)).c_str() : "");
    CHECK((a.same == 64 || a.margin < tie));
  }
}

TEST_CASE("bad batches are refused and the CUDA backend keeps serving") {
  const std::string path = synthetic_model(TensorType::Q8_0, "bad", spec_256());
  auto gpu = open(path, Device::cuda, 4);
  KvSequence seq(gpu->pages(), gpu->page_size());
  REQUIRE(seq.reserve(16));
  Logits out;
  std::vector<int32_t> bad{static_cast<int32_t>(gpu->config().n_vocab)};
  Batch b1;
  b1.sequences.push_back({bad, 0, seq.block_table(), LogitsWanted::last});
  CHECK_THROWS_WITH(gpu->forward(b1, out), Catch::Contains("token id"));
  std::vector<int32_t> ok{1};
  Batch b2;
  b2.sequences.push_back({ok, 16, seq.block_table(), LogitsWanted::last});
  CHECK_THROWS_WITH(gpu->forward(b2, out), Catch::Contains("does not cover position 16"));
  Batch b3;
  b3.sequences.push_back({ok, 0, seq.block_table(), LogitsWanted::last});
  gpu->forward(b3, out);
  CHECK(out.rows() == 1);
}
