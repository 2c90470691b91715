// How session KV pages spill (service/spill_codec.h): the default per model
// and cache, and each refusal.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "service/spill_codec.h"

using namespace troupe;
using namespace troupe::service;

namespace {

KvPageShape shape(int32_t head_dim, KvType kv_type = KvType::f16) {
  KvPageShape s;
  s.n_layer = 2, s.page_size = 16, s.n_head_kv = 2, s.head_dim = head_dim;
  s.kv_type = kv_type;
  return s;
}

}  // namespace

TEST_CASE("spill codec: by default k8v4 where the head dimension allows it, int8 where not, fp16 for Gemma") {
  CHECK(choose_spill_codec(kDefaultSpillCodec, KvType::f16, "qwen2", shape(64)) == KvPageCodec::k8v4);
  CHECK(choose_spill_codec(kDefaultSpillCodec, KvType::f16, "qwen2", shape(48)) == KvPageCodec::int8);
  CHECK(choose_spill_codec(kDefaultSpillCodec, KvType::f16, "gemma3", shape(256)) == KvPageCodec::fp16);
}

TEST_CASE("spill codec: one asked for is kept where the model can take it") {
  CHECK(choose_spill_codec(0, KvType::f16, "qwen2", shape(64)) == KvPageCodec::int8);
  CHECK(choose_spill_codec(1, KvType::f16, "gemma3", shape(256)) == KvPageCodec::fp16);
  CHECK_THROWS_WITH(choose_spill_codec(2, KvType::f16, "qwen2", shape(48)),
                    "--kv-spill-codec k8v4 needs a head dimension that is a multiple of 32; this model's is 48");
}

TEST_CASE("spill codec: a quantized cache spills its pages as they are, and refuses another codec") {
  CHECK(choose_spill_codec(kDefaultSpillCodec, KvType::q8_0, "qwen2", shape(64, KvType::q8_0)) == KvPageCodec::raw);
  CHECK(choose_spill_codec(3, KvType::k8v4, "qwen2", shape(64, KvType::k8v4)) == KvPageCodec::raw);
  CHECK_THROWS_WITH(choose_spill_codec(0, KvType::q8_0, "qwen2", shape(64, KvType::q8_0)),
                    "--kv-spill-codec applies to an f16 KV cache; a q8_0 cache spills its pages as they are");
}

TEST_CASE("spill codec: each codec as serve describes it") {
  CHECK(std::string(spill_codec_description(KvPageCodec::k8v4)) == "k8v4");
  CHECK(std::string(spill_codec_description(KvPageCodec::raw)) == "its own format");
}
