#pragma once
// What makes stored KV valid. A KV page computed by one model is garbage to
// another, and so is one written with another page layout, KV dtype, RoPE
// or spill codec: persisted pages are keyed by all of it, so a page that
// does not match is never found, let alone used.
#include <cstdint>
#include <string>

namespace troupe {

class GgufFile;
struct ModelConfig;

// A 64-bit hash of every byte of the model file (weights, tokenizer,
// metadata): not cryptographic, but no two different files in practice
// share it. Reads the whole file once (~0.1 s per GB).
uint64_t file_fingerprint(const GgufFile& file);

struct KvIdentity {
  uint64_t model = 0;   // file_fingerprint
  uint64_t layout = 0;  // page size, layers, KV heads, head dim, KV dtype, RoPE, codec version
  // 16 bytes, big-endian: the prefix of every persisted page's key.
  std::string key_prefix() const;
};

// `codec`: the KvPageCodec stored pages use, and the KV type of the cache
// they come from (both part of the layout).
KvIdentity kv_identity(const GgufFile& file, const ModelConfig& config, int32_t page_size, uint8_t codec = 0,
                       uint8_t kv_type = 0);

}  // namespace troupe
