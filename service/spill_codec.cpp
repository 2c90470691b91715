#include "service/spill_codec.h"

#include <stdexcept>

namespace troupe::service {

KvPageCodec choose_spill_codec(uint8_t requested, KvType kv_type, const std::string& architecture,
                               const KvPageShape& shape) {
  KvPageCodec codec = static_cast<KvPageCodec>(requested);
  if (kv_type != KvType::f16) {
    // A quantized cache's pages are already small: they spill as they are.
    if (requested != kDefaultSpillCodec && codec != KvPageCodec::raw)
      throw std::runtime_error(std::string("--kv-spill-codec applies to an f16 KV cache; a ") + kv_type_name(kv_type) +
                               " cache spills its pages as they are");
    codec = KvPageCodec::raw;
  } else if (requested == kDefaultSpillCodec) {
    // Gemma's values are not normalized: rounded to 4 or 8 bits, a restored
    // session's next answer moved off a full prefill's (docs/DECISIONS.md).
    codec = architecture == "gemma3"                ? KvPageCodec::fp16
            : shape.supports(KvPageCodec::k8v4) ? KvPageCodec::k8v4
                                                 : KvPageCodec::int8;
  }
  if (!shape.supports(codec))
    throw std::runtime_error("--kv-spill-codec k8v4 needs a head dimension that is a multiple of 32; this model's is " +
                             std::to_string(shape.head_dim));
  return codec;
}

const char* spill_codec_description(KvPageCodec codec) {
  switch (codec) {
    case KvPageCodec::k8v4: return "k8v4";
    case KvPageCodec::raw: return "its own format";
    case KvPageCodec::fp16: return "fp16";
    case KvPageCodec::int8: return "int8";
  }
  return "int8";
}

}  // namespace troupe::service
