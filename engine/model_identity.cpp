#include "engine/model_identity.h"

#include <cstring>
#include <span>

#include "engine/gguf_file.h"
#include "engine/model_config.h"

namespace troupe {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t mix(uint64_t lane, uint64_t word) { return rotl(lane + word * kP2, 31) * kP1; }
uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}

// Four independent lanes over 32-byte blocks (so the CPU overlaps them),
// then the tail byte by byte, then the length.
uint64_t hash_bytes(std::span<const uint8_t> b, uint64_t seed) {
  uint64_t lane[4] = {seed + kP1 + kP2, seed + kP2, seed, seed - kP1};
  size_t i = 0;
  for (; i + 32 <= b.size(); i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, b.data() + i + 8 * k, 8);
      lane[k] = mix(lane[k], w);
    }
  uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18);
  for (; i < b.size(); ++i) h = rotl(h ^ (b[i] * kP3), 11) * kP1;
  return avalanche(h ^ static_cast<uint64_t>(b.size()));
}

template <typename T>
void add(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

uint64_t file_fingerprint(const GgufFile& file) { return hash_bytes(file.bytes(), 0x7472'6f75'7065ull); }

std::string KvIdentity::key_prefix() const {
  std::string k;
  for (uint64_t v : {model, layout})
    for (int shift = 56; shift >= 0; shift -= 8) k.push_back(static_cast<char>(v >> shift));
  return k;
}

KvIdentity kv_identity(const GgufFile& file, const ModelConfig& c, int32_t page_size, uint8_t codec, uint8_t kv_type) {
  std::string layout = "kv-f16/page-codec-v1";
  add(layout, codec);
  if (kv_type != 0) {  // f16 stores keep the identity they had
    add(layout, kv_type);
    add(layout, static_cast<int32_t>(c.wide_key_layers.size()));
    for (int32_t l : c.wide_key_layers) add(layout, l);
  }
  add(layout, page_size);
  add(layout, c.n_layer);
  add(layout, c.n_head_kv);
  add(layout, c.head_dim);
  add(layout, c.rope_freq_base);
  add(layout, c.rope_freq_scale);
  add(layout, static_cast<int32_t>(c.rope_order));
  if (c.rope_scaling.type != RopeScalingType::none) {  // unscaled models keep the identity they had
    add(layout, static_cast<int32_t>(c.rope_scaling.type));
    add(layout, c.rope_scaling.factor);
    add(layout, c.rope_scaling.orig_ctx);
    add(layout, c.rope_scaling.attn_factor);
  }
  const auto* p = reinterpret_cast<const uint8_t*>(layout.data());
  return {file_fingerprint(file), hash_bytes({p, layout.size()}, 1)};
}

}  // namespace troupe
