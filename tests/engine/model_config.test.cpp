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
