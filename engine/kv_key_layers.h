#pragma once
// The layers whose keys a quantized KV cache keeps in f16.
//
// A key bias on dimension pairs that RoPE turns quickly cannot be stored
// less (Model::key_offsets: it rotates with the position), so it stays in
// every key and sets the quantizer's range. Qwen2.5-0.5B's first layer has
// such a bias of rms 10 (the other 23 layers: 0.5 to 1.9); its scores reach
// rms ~450 and an 8-bit block scale over its keys leaves score errors of 0.34
// against at most 0.04 in any other layer (a float64 model of the real
// weights, 300 tokens of GPL-3), which was most of q8_0's perplexity loss.
// A layer is wide when that bias's rms is over 4 times the layers' median
// (and over 2), the widest first, at most one layer in 16, so that the KV
// bytes per token stay within 0.55 (q8_0) and 0.42 (k8v4) of f16's.
#include <cstdint>
#include <vector>

namespace troupe {

// A key bias pair RoPE turns by at most this many radians over the trained
// context stays nearly where it was: a quantized cache stores keys less it
// (Model::key_offsets), and it does not count against a layer here.
inline constexpr double kKeyOffsetTurn = 2.0;

class GgufFile;
struct ModelConfig;

// From the file's attn_k.bias tensors (F32, as converters write them); none
// for a model without key biases.
std::vector<int32_t> wide_key_layers(const GgufFile& file, const ModelConfig& config);

}  // namespace troupe
