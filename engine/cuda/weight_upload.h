#pragma once
// Host-side conversion of a model's GGUF matrices into the device formats
// (device_matrix.h) and their upload, once, at load. Matrices that one
// product reads together are concatenated by rows: Q|K|V and gate|up.
#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/device_matrix.h"
#include "engine/tensor_type.h"

namespace troupe {
struct ModelConfig;
struct ModelWeights;
}  // namespace troupe

namespace troupe::cuda {

struct DeviceLayer {
  DeviceMatrix qkv, wo, gate_up, down;
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* qkv_bias = nullptr;  // null when the architecture has none
};

struct UploadedWeights {
  DeviceMatrix token_embd;
  DeviceMatrix output;  // shares token_embd's memory when tied
  const float* output_norm = nullptr;
  std::vector<DeviceLayer> layers;
  int64_t bytes = 0;
  std::vector<DeviceBuffer> storage;
};

// Format each source tensor type is held in under `automatic`.
DeviceFormat automatic_format(TensorType source);

// `threads` host threads convert rows in parallel.
UploadedWeights upload_weights(const ModelWeights& w, const ModelConfig& c, DeviceWeights choice, int threads);

// Host encoding of one row into a device format (exposed for tests):
// q receives the row's weight bytes, scales its per-32 scales (int8/int4).
void encode_row(TensorType src_type, const void* src, int64_t cols, DeviceFormat f, uint8_t* q, uint8_t* scales);

}  // namespace troupe::cuda
