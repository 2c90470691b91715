// Model validation at load: a file whose hyper-parameters are not finite or
// in range, or whose vocabulary does not match its embedding rows, is refused
// with one line naming the key, before any request can reach it.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "engine/gguf_file.h"
#include "engine/gguf_writer.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/synthetic_model.h"

using namespace troupe;

namespace {

SyntheticModelSpec small_spec() {
  SyntheticModelSpec s;
  s.n_embd = 64;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 128;
  s.n_merges = 32;
  return s;
}

// The config read from a small synthetic file after `change` edits its writer.
template <typename Change>
ModelConfig read_changed(Change change, SyntheticModelSpec spec = small_spec()) {
  GgufWriter w;
  build_synthetic_model(spec, w);
  change(w);
  const auto bytes = w.to_bytes();
  return read_model_config(GgufFile::parse(bytes, "m.gguf"));
}

std::string refusal(const auto& change) {
  try {
    read_changed(change);
  } catch (const GgufError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("a well-formed synthetic file passes validation") {
  const ModelConfig c = read_changed([](GgufWriter&) {});
  CHECK(c.n_embd == 64);
  CHECK(c.n_ctx_train == 2048);
}

TEST_CASE("a vocabulary that does not match the embedding rows is refused") {
  const std::string why = refusal([](GgufWriter& w) {
    w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  });
  CHECK_THAT(why, Catch::StartsWith("m.gguf: the vocabulary has 3 tokens but token_embd.weight has "));
}

TEST_CASE("non-finite or out-of-range hyper-parameters are refused, each naming its key") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK_THAT(refusal([&](GgufWriter& w) { w.set_f32("qwen2.attention.layer_norm_rms_epsilon", nan); }),
             Catch::Contains("layer_norm_rms_epsilon") && Catch::Contains("out of range"));
  CHECK_THAT(refusal([&](GgufWriter& w) { w.set_f32("qwen2.rope.freq_base", std::numeric_limits<float>::infinity()); }),
             Catch::Contains("rope.freq_base"));
  CHECK_THAT(refusal([&](GgufWriter& w) {
               w.set_string("qwen2.rope.scaling.type", "yarn");
               w.set_f32("qwen2.rope.scaling.factor", nan);
             }),
             Catch::Contains("factor"));
  CHECK_THAT(refusal([](GgufWriter& w) { w.set("qwen2.context_length", GgufValue{GgufValueType::UINT64, uint64_t{1} << 63}); }),
             Catch::Contains("context_length' is out of range"));
  CHECK_THAT(refusal([](GgufWriter& w) { w.set_u32("qwen2.context_length", 0); }),
             Catch::Contains("context_length' is out of range"));
  CHECK_THAT(refusal([](GgufWriter& w) { w.set_u32("qwen2.attention.key_length", 0); }),
             Catch::Contains("head dimension 0"));
  CHECK_THAT(refusal([](GgufWriter& w) { w.set_u32("qwen2.attention.head_count", 0); }),
             Catch::Contains("head_count' = 0 is out of range"));
}

TEST_CASE("gemma3: every sixth layer is global, the others slide, and its implicit values are set") {
  SyntheticModelSpec spec = small_spec();
  spec.architecture = "gemma3";
  spec.n_layer = 13;
  spec.sliding_window = 40;
  const ModelConfig c = read_changed([](GgufWriter&) {}, spec);
  CHECK(c.sliding_window == 40);
  for (int64_t l = 0; l < 13; ++l) CHECK(c.is_local(l) == (l != 5 && l != 11));
  CHECK(c.ffn_activation == FfnActivation::gelu_tanh);
  CHECK(c.embedding_scale == Approx(8.0f));  // sqrt(64)
  CHECK(c.rope_freq_base == 1e6f);
  CHECK(c.rope_local_freq_base == 10000.0f);
  CHECK(c.rope_order == RopeOrder::halves);
  const ModelConfig q = read_changed([](GgufWriter&) {});
  CHECK_FALSE(q.is_local(0));
  CHECK(q.sliding_window == 0);
}

TEST_CASE("gemma3 with a zero sliding window, or an architecture troupe does not run, is refused in one line") {
  SyntheticModelSpec spec = small_spec();
  spec.architecture = "gemma3";
  try {
    read_changed([](GgufWriter& w) { w.set_u32("gemma3.attention.sliding_window", 0); }, spec);
    FAIL("accepted");
  } catch (const GgufError& e) {
    CHECK(std::string(e.what()) == "m.gguf: 'gemma3.attention.sliding_window' = 0 is out of range");
  }
  const std::string why = refusal([](GgufWriter& w) { w.set_string("general.architecture", "gemma2"); });
  CHECK(why == "m.gguf: architecture 'gemma2' is not supported (qwen2, qwen2moe, llama, gemma3, bloom, mpt)");
}

TEST_CASE("mpt variants troupe does not run, and a missing ALiBi bias, are refused in one line") {
  SyntheticModelSpec spec = small_spec();
  spec.architecture = "mpt";
  const auto refused = [&](const auto& change) {
    try {
      read_changed(change, spec);
    } catch (const GgufError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(read_changed([](GgufWriter&) {}, spec).max_alibi_bias == 8.0f);
  CHECK(refused([](GgufWriter& w) { w.set_f32("mpt.attention.max_alibi_bias", 0.0f); }) ==
        "m.gguf: mpt.attention.max_alibi_bias = 0.000000 is missing or out of range (0, 64]: troupe runs MPT with ALiBi");
  CHECK(refused([](GgufWriter& w) { w.set_f32("mpt.attention.clamp_kqv", -1.0f); }) ==
        "m.gguf: mpt.attention.clamp_kqv = -1.000000 must be 0 or more");
  CHECK(refused([](GgufWriter& w) {
          w.add_tensor("position_embd.weight", {64, 4}, TensorType::F32, std::vector<uint8_t>(64 * 4 * 4));
        }) == "m.gguf: tensor 'position_embd.weight' (learned positions, QK LayerNorm or activation scales) is an MPT "
              "variant troupe does not run");
}

TEST_CASE("mixture-of-experts files troupe cannot run are refused at load in one line") {
  SyntheticModelSpec spec = small_spec();
  spec.architecture = "qwen2moe";
  spec.n_expert = 4;
  spec.n_expert_used = 2;
  const auto refused = [&](const auto& change) {
    try {
      GgufWriter w;
      build_synthetic_model(spec, w);
      change(w);
      const auto bytes = w.to_bytes();
      const GgufFile file = GgufFile::parse(bytes, "m.gguf");
      bind_weights(file, read_model_config(file));
    } catch (const GgufError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(refused([](GgufWriter&) {}) == "(accepted)");
  CHECK(refused([](GgufWriter& w) { w.set_u32("qwen2moe.expert_used_count", 5); }) ==
        "m.gguf: qwen2moe.expert_used_count 5 must be 1 to expert_count 4");
  CHECK(refused([](GgufWriter& w) { w.set_u32("qwen2moe.expert_count", 0); }) == "m.gguf: qwen2moe needs qwen2moe.expert_count > 0");
  CHECK(refused([](GgufWriter& w) { w.set_u32("qwen2moe.expert_gating_func", 7); }) ==
        "m.gguf: qwen2moe.expert_gating_func = 7 is not a gating function troupe runs (1 softmax, 2 sigmoid)");
  // Expert tensors whose shapes disagree with the metadata (an expert fewer than the count says).
  CHECK(refused([](GgufWriter& w) { w.set_u32("qwen2moe.expert_count", 3); }) ==
        "m.gguf: tensor 'blk.0.ffn_gate_inp.weight' has shape [64, 4], expected [64, 3]");
  CHECK(refused([](GgufWriter& w) { w.set_u32("qwen2moe.expert_feed_forward_length", 64); }) ==
        "m.gguf: tensor 'blk.0.ffn_gate_exps.weight' has shape [64, 128, 4], expected [64, 64, 4]");
}
