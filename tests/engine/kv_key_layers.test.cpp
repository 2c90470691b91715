#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "engine/gguf_file.h"
#include "engine/gguf_writer.h"
#include "engine/kv_key_layers.h"
#include "engine/model_config.h"

using namespace troupe;

namespace {

ModelConfig config(int64_t layers) {
  ModelConfig c;
  c.n_layer = layers;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 16;
  c.n_ctx_train = 32768;
  c.rope_freq_base = 1000000.0f;
  c.rope_order = RopeOrder::halves;
  return c;
}

// A key bias per layer: `scale[layer]` on every dimension; the other layers' 1.
std::vector<uint8_t> file_with_key_biases(const ModelConfig& c, const std::vector<float>& scale) {
  GgufWriter w;
  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    std::vector<float> bias(static_cast<size_t>(c.kv_dim()), scale[static_cast<size_t>(layer)]);
    // Alternate signs, as trained biases have: the rms is what counts.
    for (size_t i = 1; i < bias.size(); i += 2) bias[i] = -bias[i];
    std::vector<uint8_t> bytes(bias.size() * sizeof(float));
    std::memcpy(bytes.data(), bias.data(), bytes.size());
    w.add_tensor("blk." + std::to_string(layer) + ".attn_k.bias", {c.kv_dim()}, TensorType::F32, std::move(bytes));
  }
  return w.to_bytes();
}

}  // namespace

TEST_CASE("a layer whose key bias is far wider than the others' keeps f16 keys") {
  const ModelConfig c = config(16);
  std::vector<float> scale(16, 1.0f);
  scale[0] = 10.0f;
  const auto bytes = file_with_key_biases(c, scale);
  CHECK(wide_key_layers(GgufFile::parse(bytes), c) == std::vector<int32_t>{0});
}

TEST_CASE("no layer is wide when the biases are alike, or small, or absent") {
  const ModelConfig c = config(16);
  SECTION("alike") {
    const auto bytes = file_with_key_biases(c, std::vector<float>(16, 3.0f));
    CHECK(wide_key_layers(GgufFile::parse(bytes), c).empty());
  }
  SECTION("over four times the median but under 2") {
    std::vector<float> scale(16, 0.1f);
    scale[5] = 1.5f;
    const auto bytes = file_with_key_biases(c, scale);
    CHECK(wide_key_layers(GgufFile::parse(bytes), c).empty());
  }
  SECTION("no key bias tensors") {
    const auto bytes = GgufWriter().to_bytes();
    CHECK(wide_key_layers(GgufFile::parse(bytes), c).empty());
  }
}

TEST_CASE("at most one layer in 16 is wide: the widest first") {
  const ModelConfig c = config(32);
  std::vector<float> scale(32, 1.0f);
  scale[3] = 8.0f;
  scale[20] = 12.0f;
  scale[30] = 9.0f;
  const auto bytes = file_with_key_biases(c, scale);
  CHECK(wide_key_layers(GgufFile::parse(bytes), c) == std::vector<int32_t>{20, 30});
}

TEST_CASE("only the pairs RoPE turns count: a bias on the slow pairs is stored less, not kept") {
  ModelConfig c = config(16);
  // Base 1e6, 16 dimensions: pairs 0..7 turn at 1e6^(-2i/16) radians a token.
  // With a trained context of 8 tokens only the first pair turns past 2 radians.
  c.n_ctx_train = 8;
  std::vector<float> scale(16, 1.0f);
  scale[2] = 10.0f;
  // Put layer 2's width on its slow pairs only.
  GgufWriter w;
  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    std::vector<float> bias(static_cast<size_t>(c.kv_dim()), 1.0f);
    if (layer == 2)
      for (int64_t h = 0; h < c.n_head_kv; ++h)
        for (int64_t i = 1; i < c.head_dim / 2; ++i) {
          bias[static_cast<size_t>(h * c.head_dim + i)] = 10.0f;
          bias[static_cast<size_t>(h * c.head_dim + i + c.head_dim / 2)] = 10.0f;
        }
    std::vector<uint8_t> bytes(bias.size() * sizeof(float));
    std::memcpy(bytes.data(), bias.data(), bytes.size());
    w.add_tensor("blk." + std::to_string(layer) + ".attn_k.bias", {c.kv_dim()}, TensorType::F32, std::move(bytes));
  }
  const auto bytes = w.to_bytes();
  CHECK(wide_key_layers(GgufFile::parse(bytes), c).empty());
  // The same width on every pair is wide.
  CHECK(wide_key_layers(GgufFile::parse(file_with_key_biases(c, scale)), c) == std::vector<int32_t>{2});
}
