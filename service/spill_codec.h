#pragma once
// How a server's session KV pages spill to the store (engine/kv_page_codec.h):
// the codec `--kv-spill-codec` asked for, or the default for the model and
// its cache, refused where the cache or the model cannot take it.
#include <cstdint>
#include <string>

#include "engine/kv_page_codec.h"

namespace troupe::service {

constexpr uint8_t kDefaultSpillCodec = 255;  // --kv-spill-codec not given

// Throws std::runtime_error naming the flag and the reason.
KvPageCodec choose_spill_codec(uint8_t requested, KvType kv_type, const std::string& architecture,
                               const KvPageShape& shape);
// As `troupe serve` describes it: "k8v4", "fp16", "int8", or "its own format" (raw).
const char* spill_codec_description(KvPageCodec codec);

}  // namespace troupe::service
