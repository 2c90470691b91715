#pragma once
// The arithmetic of attention's two products (cpu/attention.h):
//
//   fp32  queries and probabilities rounded to half, keys and values as the
//         cache stores them, every product an fp32 fused multiply-add.
//   bf16  queries, keys, probabilities and values rounded to bfloat16 (8
//         significant bits), products summed in pairs into fp32, as the
//         AVX512_BF16 dot product (vdpbf16ps) does: half the instructions of
//         fp32 for the same work on CPUs that have it. Elsewhere a portable
//         kernel does the same arithmetic at fp32's speed.
//
// fp32 is the default (docs/DECISIONS.md, "Attention in bf16").
#include <string_view>

namespace troupe {

enum class AttentionPrecision { fp32, bf16 };

// "fp32" | "bf16"; throws std::invalid_argument naming the choices.
AttentionPrecision attention_precision_from_name(std::string_view name);
const char* attention_precision_name(AttentionPrecision precision);

}  // namespace troupe
