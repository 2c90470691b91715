// The forward pass's own invariants on synthetic models: batching, chunking
// and paging change nothing but the speed. (Correctness against an
// independent implementation is tests/reference/check_forward.py.)
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "engine/cpu/isa.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/synthetic_model.h"
#include "random_data.h"

using namespace troupe;
using troupe::test::random_tokens;

namespace {

std::string model_file(TensorType type, const std::string& arch = "qwen2") {
  // Per process: CTest runs this file's cases in parallel, each writing its models.
  const auto path = std::filesystem::temp_directory_path() / ("troupe-model-test-" + arch + "-" +
                                                              std::string(tensor_type_name(type)) + "-" +
                                                              std::to_string(getpid()) + ".gguf");
  SyntheticModelSpec spec;
  spec.architecture = arch;
  spec.weight_type = type;
  spec.embedding_type = type;
  spec.tied_output = false;
  spec.seed = 42;
  if (arch == "gemma3") {  // five sliding-window layers and a global one; prompts here reach past the window
    spec.n_layer = 6;
    spec.sliding_window = 24;
  }
  if (arch == "qwen2moe") {  // 8 experts, top-2, a shared expert
    spec.n_expert = 8;
    spec.n_expert_used = 2;
    spec.n_ff_expert = 256;
    spec.n_ff_shared = 256;
  }
  write_synthetic_model(spec, path.string());
  return path.string();
}

// Logits of every position of `tokens`, prefilled in chunks of `chunk`.
std::vector<float> run_alone(Model& m, KvCache& cache, const std::vector<int32_t>& tokens, size_t chunk) {
  KvSequence seq(cache);
  REQUIRE(seq.reserve(static_cast<int32_t>(tokens.size())));
  std::vector<float> all;
  Logits out;
  for (size_t pos = 0; pos < tokens.size(); pos += chunk) {
    const size_t len = std::min(chunk, tokens.size() - pos);
    Batch b;
    b.sequences.push_back({std::span(tokens).subspan(pos, len), static_cast<int32_t>(pos), seq.block_table(), LogitsWanted::all});
    m.forward(b, cache, out);
    all.insert(all.end(), out.values.begin(), out.values.end());
  }
  return all;
}

// Prefills tokens[0, prefilled) in one step, then decodes the rest one token
// a step: the logits of every decode step, in order.
std::vector<float> decode_after_prefill(Model& m, KvCache& cache, const std::vector<int32_t>& tokens, int32_t prefilled) {
  KvSequence seq(cache);
  REQUIRE(seq.reserve(static_cast<int32_t>(tokens.size())));
  Logits out;
  Batch prefill;
  prefill.sequences.push_back({std::span(tokens).first(static_cast<size_t>(prefilled)), 0, seq.block_table(), LogitsWanted::none});
  m.forward(prefill, cache, out);
  CHECK(out.rows() == 0);
  std::vector<float> all;
  for (auto pos = prefilled; pos < static_cast<int32_t>(tokens.size()); ++pos) {
    Batch step;
    step.sequences.push_back({std::span(tokens).subspan(static_cast<size_t>(pos), 1), pos, seq.block_table(), LogitsWanted::last});
    m.forward(step, cache, out);
    all.insert(all.end(), out.values.begin(), out.values.end());
  }
  return all;
}

float max_rel_diff(std::span<const float> a, std::span<const float> b) {
  float diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("a sequence's logits do not depend on how its prompt is chunked") {
  for (const std::string arch : {"qwen2", "gemma3", "bloom", "qwen2moe"})
  for (TensorType type : {TensorType::F32, TensorType::Q8_0, TensorType::Q4_K}) {
    INFO(arch << " " << tensor_type_name(type));
    Model m(GgufFile::open(model_file(type, arch)), 2);
    KvCache cache(m.config(), 8, 16);
    const auto tokens = random_tokens(37, m.config().n_vocab, 1);
    const auto whole = run_alone(m, cache, tokens, tokens.size());
    for (size_t chunk : {1u, 5u, 16u}) CHECK(max_rel_diff(run_alone(m, cache, tokens, chunk), whole) < 1e-4f);
  }
}

TEST_CASE("a sequence's logits are the same alone and in a batch of 8 of different lengths") {
  for (const std::string arch : {"qwen2", "gemma3", "bloom", "qwen2moe"})
  for (TensorType type : {TensorType::F32, TensorType::Q8_0}) {
    INFO(arch << " " << tensor_type_name(type));
    Model m(GgufFile::open(model_file(type, arch)), 2);
    KvCache cache(m.config(), 64, 16);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 8; ++i) prompts.push_back(random_tokens(3 + 7 * i, m.config().n_vocab, 100 + i));

    // Interleave page allocation so the batch's block tables are not contiguous.
    std::vector<KvSequence> seqs;
    for (int i = 0; i < 8; ++i) seqs.emplace_back(cache);
    for (int32_t n = 16; n < 64; n += 16)
      for (int i = 0; i < 8; ++i) REQUIRE(seqs[i].reserve(std::min<int32_t>(n, prompts[i].size())));
    for (int i = 0; i < 8; ++i) REQUIRE(seqs[i].reserve(static_cast<int32_t>(prompts[i].size())));
    Batch batch;
    for (int i = 0; i < 8; ++i) batch.sequences.push_back({prompts[i], 0, seqs[i].block_table(), LogitsWanted::last});
    Logits batched;
    m.forward(batch, cache, batched);
    REQUIRE(batched.rows() == 8);
    seqs.clear();

    for (int i = 0; i < 8; ++i) {
      const auto alone = run_alone(m, cache, prompts[i], prompts[i].size());
      const std::span<const float> last(alone.data() + alone.size() - m.config().n_vocab, m.config().n_vocab);
      CHECK(max_rel_diff(batched.row(i), last) < 1e-4f);
    }
  }
}

TEST_CASE("decode steps after a prefill give the logits a full prefill gives") {
  Model m(GgufFile::open(model_file(TensorType::F16, "llama")), 2);
  KvCache cache(m.config(), 8, 16);
  const auto tokens = random_tokens(20, m.config().n_vocab, 9);
  const auto full = run_alone(m, cache, tokens, tokens.size());
  const auto decoded = decode_after_prefill(m, cache, tokens, 12);
  const int64_t v = m.config().n_vocab;
  for (int32_t pos = 12; pos < 20; ++pos)
    CHECK(max_rel_diff(std::span(decoded).subspan((pos - 12) * v, v), std::span(full).subspan(pos * v, v)) < 1e-4f);
}

TEST_CASE("gemma3 and qwen2moe: prefill chunks and decode rows of other sequences in one step leave each sequence's logits as alone") {
  // gemma3's window 24: the decoding sequences are past it, the prefilling one crosses it;
  // qwen2moe: the step's tokens are grouped by expert, each expert's shared by other sequences.
  for (const std::string arch : {"gemma3", "qwen2moe"}) {
  INFO(arch);
  Model m(GgufFile::open(model_file(TensorType::Q8_0, arch)), 2);
  KvCache cache(m.config(), 32, 16);
  const auto a = random_tokens(60, m.config().n_vocab, 21), b = random_tokens(45, m.config().n_vocab, 22);
  const auto c = random_tokens(30, m.config().n_vocab, 23);
  const auto alone_a = run_alone(m, cache, a, a.size()), alone_b = run_alone(m, cache, b, b.size());
  const auto alone_c = run_alone(m, cache, c, c.size());
  KvSequence sa(cache), sb(cache), sc(cache);
  REQUIRE((sa.reserve(60) && sb.reserve(45) && sc.reserve(30)));
  Logits out;
  Batch first;  // a and b prefill all but their last tokens
  first.sequences.push_back({std::span(a).first(50), 0, sa.block_table(), LogitsWanted::none});
  first.sequences.push_back({std::span(b).first(40), 0, sb.block_table(), LogitsWanted::none});
  m.forward(first, cache, out);
  const int64_t v = m.config().n_vocab;
  for (int32_t i = 0; i < 5; ++i) {  // a and b decode one token each while c prefills in chunks of 6
    Batch step;
    step.sequences.push_back({std::span(a).subspan(50 + i, 1), 50 + i, sa.block_table(), LogitsWanted::last});
    step.sequences.push_back({std::span(c).subspan(6 * i, 6), 6 * i, sc.block_table(), LogitsWanted::all});
    step.sequences.push_back({std::span(b).subspan(40 + i, 1), 40 + i, sb.block_table(), LogitsWanted::last});
    m.forward(step, cache, out);
    REQUIRE(out.rows() == 8);
    CHECK(max_rel_diff(out.row(0), std::span(alone_a).subspan((50 + i) * v, v)) < 1e-4f);
    for (int32_t r = 0; r < 6; ++r) CHECK(max_rel_diff(out.row(1 + r), std::span(alone_c).subspan((6 * i + r) * v, v)) < 1e-4f);
    CHECK(max_rel_diff(out.row(7), std::span(alone_b).subspan((40 + i) * v, v)) < 1e-4f);
  }
  }
}

TEST_CASE("one KV head: decode steps split by KV chunks over two threads give the bits of one thread") {
  // Gemma 3 270M's layout (one KV head): a decode step is one tile, which the
  // model splits into 256-position chunks when it has more threads than tiles.
  const auto path = std::filesystem::temp_directory_path() /
                    ("troupe-model-test-gemma3-one-kv-head-" + std::to_string(getpid()) + ".gguf");
  SyntheticModelSpec spec;
  spec.architecture = "gemma3";
  spec.n_layer = 6;
  spec.n_head = 4;
  spec.n_head_kv = 1;
  spec.sliding_window = 300;
  spec.weight_type = spec.embedding_type = TensorType::Q8_0;
  write_synthetic_model(spec, path.string());
  const auto tokens = random_tokens(700, 200, 5);
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2}) {
    Model m(GgufFile::open(path.string()), threads);
    KvCache cache(m.config(), 48, 16);
    runs.push_back(decode_after_prefill(m, cache, tokens, 640));
  }
  CHECK(runs[0] == runs[1]);
}

TEST_CASE("a batch that names a bad token or an uncovered position is refused") {
  Model m(GgufFile::open(model_file(TensorType::F32)), 1);
  KvCache cache(m.config(), 2, 16);
  KvSequence seq(cache);
  REQUIRE(seq.reserve(16));
  Logits out;
  std::vector<int32_t> bad{static_cast<int32_t>(m.config().n_vocab)};
  Batch b1;
  b1.sequences.push_back({bad, 0, seq.block_table(), LogitsWanted::last});
  CHECK_THROWS_WITH(m.forward(b1, cache, out), Catch::Contains("token id"));
  std::vector<int32_t> ok{1};
  Batch b2;
  b2.sequences.push_back({ok, 16, seq.block_table(), LogitsWanted::last});
  CHECK_THROWS_WITH(m.forward(b2, cache, out), Catch::Contains("does not cover position 16"));
}

TEST_CASE("a step in which two rows would write one KV slot is refused before any is written") {
  // Rows write their K and V from several threads: two on one slot would race.
  Model m(GgufFile::open(model_file(TensorType::Q8_0)), 2);
  KvCache cache(m.config(), 4, 16);
  KvSequence seq(cache);
  REQUIRE(seq.reserve(16));
  const std::vector<int32_t> tokens = random_tokens(8, m.config().n_vocab, 3);
  Logits out;
  Batch first;
  first.sequences.push_back({tokens, 0, seq.block_table(), LogitsWanted::last});
  m.forward(first, cache, out);
  const auto slot_bytes = [&](int32_t slot) {  // every layer's and head's K and V of one slot
    std::vector<uint8_t> all;
    const int32_t page = seq.block_table()[0];
    for (int64_t layer = 0; layer < m.config().n_layer; ++layer)
      for (int64_t h = 0; h < m.config().n_head_kv; ++h) {
        const uint8_t* k = cache.key_row(layer, page, slot, h);
        const uint8_t* v = cache.value_row(layer, page, slot, h);
        all.insert(all.end(), k, k + cache.key_row_bytes(layer));
        all.insert(all.end(), v, v + cache.value_row_bytes());
      }
    return all;
  };
  const std::vector<uint8_t> before = slot_bytes(7);
  // Another sequence whose table names the same page, at position 7 (first's last row's slot).
  Batch twice;
  twice.sequences.push_back({std::span(tokens).subspan(7, 1), 7, seq.block_table(), LogitsWanted::last});
  twice.sequences.push_back({std::span(tokens).subspan(0, 1), 7, seq.block_table(), LogitsWanted::last});
  CHECK_THROWS_WITH(m.forward(twice, cache, out), Catch::Contains("two rows of the step write KV page") &&
                                                      Catch::Contains("slot 7"));
  CHECK(slot_bytes(7) == before);  // refused before any row was written
  // Distinct slots of one page in one step are fine.
  Batch distinct;
  distinct.sequences.push_back({std::span(tokens).subspan(0, 4), 8, seq.block_table(), LogitsWanted::last});
  CHECK_NOTHROW(m.forward(distinct, cache, out));
}

TEST_CASE("an empty batch runs nothing and returns no logits") {
  Model m(GgufFile::open(model_file(TensorType::Q8_0)), 1);
  KvCache cache(m.config(), 2, 16);
  Logits out;
  out.values.assign(5, 1.0f);
  m.forward(Batch{}, cache, out);
  CHECK(out.rows() == 0);
}

// On AVX-512 and AVX2 the quantized matrices are repacked into the lane
// layout at load (engine/cpu/repack.h); TROUPE_LANE_LAYOUT=off keeps the GGUF
// order. On AVX-512 both must give the same logits bit for bit, for the
// few-token kernels (decode steps) and the packed ones (a 48-token prefill),
// with a tied output too. The AVX2 lane kernels sum in another order: a
// last-bit difference can move an 8-bit activation code in the next layer,
// so there the logits agree as closely as the scalar and GGUF-layout AVX2
// paths do with each other (1-4 % of the largest logit on the real 0.5B).
TEST_CASE("the lane layout changes no logit") {
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::Q5_0, TensorType::Q4_0}) {
    for (bool tied : {false, true}) {
      const auto path = std::filesystem::temp_directory_path() /
                        ("troupe-model-test-lanes-" + std::string(tensor_type_name(type)) + (tied ? "-tied" : "") + ".gguf");
      SyntheticModelSpec spec;
      spec.weight_type = type;
      spec.embedding_type = type;
      spec.tied_output = tied;
      spec.seed = 7;
      write_synthetic_model(spec, path.string());
      const auto tokens = random_tokens(56, 256, 3);  // byte tokens: in every vocabulary
      std::vector<float> logits[2];
      for (int lanes = 0; lanes < 2; ++lanes) {
        if (lanes)
          unsetenv("TROUPE_LANE_LAYOUT");
        else
          setenv("TROUPE_LANE_LAYOUT", "off", 1);
        auto m = Model::load(path.string(), 2);
        KvCache cache(m->config(), 8, 16);
        const auto prefill = run_alone(*m, cache, std::vector<int32_t>(tokens.begin(), tokens.begin() + 48), 48);
        KvCache cache2(m->config(), 8, 16);
        logits[lanes] = run_alone(*m, cache2, tokens, 3);  // steps of 3 tokens: the few-token kernels
        logits[lanes].insert(logits[lanes].end(), prefill.begin(), prefill.end());
      }
      unsetenv("TROUPE_LANE_LAYOUT");
      INFO(tensor_type_name(type) << (tied ? " tied" : "") << " on " << cpu::isa_name(cpu::active_isa()));
      if (cpu::active_isa() == cpu::Isa::avx512)
        CHECK(logits[0] == logits[1]);
      else
        CHECK(max_rel_diff(logits[1], logits[0]) < 0.05f);
      std::filesystem::remove(path);
    }
  }
}
