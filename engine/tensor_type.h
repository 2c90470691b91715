#pragma once
// Tensor element formats as numbered by GGUF (ggml_type). Quantized formats
// store rows as blocks: `block_elems` values packed into `block_bytes` bytes.
//
//   type  block_elems block_bytes  layout of one block
//   F32        1          4        float
//   F16        1          2        IEEE half
//   BF16       1          2        bfloat16
//   Q4_0      32         18        f16 d | 16 B nibbles            x = d*(q-8)
//   Q5_0      32         22        f16 d | u32 high bits | 16 B    x = d*(q-16)
//   Q8_0      32         34        f16 d | 32 x int8               x = d*q
//   Q4_K     256        144        f16 d, dmin | 12 B 6-bit scales/mins | 128 B nibbles
//   Q5_K     256        176        as Q4_K | 32 B high bits | 128 B nibbles
//   Q6_K     256        210        128 B low nibbles | 64 B high 2 bits | 16 x int8 scales | f16 d
//   Q8_K     256        292        f32 d | 256 x int8 | 16 x int16 block sums (activations only)
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace troupe {

enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q5_0 = 6,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

struct TensorTypeTraits {
  std::string_view name;
  int64_t block_elems;
  int64_t block_bytes;
};

// Traits of a supported type, or nullopt for a number this engine does not read.
std::optional<TensorTypeTraits> tensor_type_traits(uint32_t raw_type);
TensorTypeTraits traits(TensorType type);
std::string_view tensor_type_name(TensorType type);
std::optional<TensorType> tensor_type_from_name(std::string_view name);

// Bytes of one row of `elems` values; `elems` must be a multiple of block_elems.
inline int64_t row_bytes(TensorType type, int64_t elems) {
  const auto t = traits(type);
  return elems / t.block_elems * t.block_bytes;
}

}  // namespace troupe
