#pragma once
// GGML block formats, bit-exact with llama.cpp: decoding a block here gives the
// same floats as ggml and gguf-py. Layouts are in engine/tensor_type.h.
//
// quantize_row writes valid blocks of every format (weights, and Q8_K for
// activations). For the legacy formats it is the reference rounding; for
// K-quants it is a least-squares scale/min search per sub-block, sound but not
// byte-identical to llama.cpp's search.
#include <cstdint>

#include "engine/tensor_type.h"

namespace troupe::cpu {

// n values of `type` at src -> dst; n must be a multiple of the block size.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

// n floats -> row_bytes(type, n) bytes at dst; n must be a multiple of the block size.
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);

// Sub-block scale and min (6 bits each) of Q4_K/Q5_K sub-block j in 0..7 from
// their 12-byte packed form: j < 4 sit in the low 6 bits of bytes j (scale) and
// j+4 (min); j >= 4 take 4 low bits from byte j+4 and 2 high bits from the top
// of bytes j-4 (scale) and j (min).
void unpack_k_scales(const uint8_t* packed, uint8_t scales[8], uint8_t mins[8]);
void pack_k_scales(const uint8_t scales[8], const uint8_t mins[8], uint8_t* packed);

}  // namespace troupe::cpu
