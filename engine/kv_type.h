#pragma once
// How the KV cache holds keys and values in memory. A row is one token's one
// KV head (head_dim values):
//
//   f16    IEEE half, 2 bytes a value                       1.00 of FP16
//   q8_0   blocks of 32: f16 scale d, 32 int8 q; x = d q     0.53 of FP16 (head dim 64)
//   q4_0   blocks of 32: f16 scale d, 16 bytes of nibbles;   0.28
//          byte j holds q[j] (low) and q[j + 16] (high), x = d (q - 8)
//
// Quantized rows hold their values rotated by an orthonormal Walsh-Hadamard
// transform (kv_rotate): it spreads the few huge channels some models' keys
// have (Qwen2's reach ~150 beside values of ~1) over every channel of their
// block, so one scale no longer wastes most of its range on them (q8_0 keys
// on Qwen2.5-0.5B: +5.9 % perplexity unrotated). Attention rotates its
// queries the same way (dot products are unchanged) and turns the output of
// rotated values back. llama.cpp rotates its quantized KV cache the same way.
//
// A KV type pairs a key and a value format: f16 (both f16), q8_0 (both q8_0),
// k8v4 (keys q8_0, values q4_0: 0.41 of FP16) and q4_0 (both q4_0: 0.28).
// Keys decide which tokens are attended, so k8v4 keeps them at 8 bits;
// values are averaged by attention and tolerate 4; q4_0 trades the keys'
// precision for the smallest cache. A model's few layers with a huge
// turning key bias keep f16 keys under any type (engine/kv_key_layers.h):
// on Qwen2.5-0.5B that is one layer of 24, and q8_0 costs 0.54 of FP16,
// k8v4 0.42, q4_0 0.30. Attention reads the rows as they are stored (cpu/attention),
// converting a block of rows at a time into L1; nothing is kept in FP16.
#include <cstdint>
#include <string_view>

namespace troupe {

enum class KvType : uint8_t { f16 = 0, q8_0 = 1, k8v4 = 2, q4_0 = 3 };
enum class KvRowFormat : uint8_t { f16, q8_0, q4_0 };

// "f16" | "q8_0" | "k8v4" | "q4_0"; throws std::invalid_argument naming the choices.
KvType kv_type_from_name(std::string_view name);
const char* kv_type_name(KvType type);

KvRowFormat key_format(KvType type);
KvRowFormat value_format(KvType type);
// The quantized formats work in blocks of 32 values.
constexpr int64_t kKvBlock = 32;
bool kv_type_fits(KvType type, int64_t head_dim);
int64_t kv_row_bytes(KvRowFormat format, int64_t n);

// One row of n values (n a multiple of 32 for the quantized formats).
// Encoding rounds to nearest; non-finite values are stored as 0 in the
// quantized formats (a NaN must not poison a whole block's scale).
void encode_kv_row(KvRowFormat format, const float* x, int64_t n, uint8_t* out);
void decode_kv_row(KvRowFormat format, const uint8_t* in, int64_t n, float* out);

// The orthonormal Walsh-Hadamard transform of x, in place, in blocks of the
// largest power of two dividing n (n itself for powers of two). It is its own
// inverse. Rows of quantized formats are stored rotated (KvCache::store).
void kv_rotate(float* x, int64_t n);
inline bool kv_rotated(KvRowFormat format) { return format != KvRowFormat::f16; }

}  // namespace troupe
