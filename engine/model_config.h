#pragma once
// The hyperparameters of a transformer, read from GGUF metadata
// (`<arch>.embedding_length` and friends) and checked for consistency.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/rope_scaling.h"

namespace troupe {

class GgufFile;

// How RoPE pairs the dimensions of a head. `adjacent` rotates (0,1), (2,3), ...
// (llama-family GGUF files, whose converter permuted Q/K for it); `halves`
// rotates (i, i + d/2) (qwen2, GPT-NeoX).
enum class RopeOrder { adjacent, halves };

// The feed-forward's activation: SiLU (qwen2, llama) or GELU's tanh form
// (gemma3, bloom), of a gate times an up projection, or of the up projection
// alone (bloom: no gate).
enum class FfnActivation { silu, gelu_tanh };

struct ModelConfig {
  std::string architecture;  // "qwen2", "qwen2moe", "llama", "gemma3", "bloom", "mpt"
  std::string name;          // general.name, for display
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-6f;
  float rope_freq_base = 10000.0f;
  RopeScaling rope_scaling;      // from the file's rope.scaling.* keys, or an override
  float rope_freq_scale = 1.0f;  // linear scaling's 1 / factor (1 otherwise): part of the KV identity
  RopeOrder rope_order = RopeOrder::halves;
  // Layers whose keys a quantized KV cache keeps in f16 (engine/kv_key_layers.h).
  std::vector<int32_t> wide_key_layers;

  // What gemma3 adds (docs/MODELS.md says where each implicit value comes from).
  FfnActivation ffn_activation = FfnActivation::silu;
  float embedding_scale = 1.0f;  // token embeddings times this (gemma: sqrt(n_embd))
  // Queries times this before attention's 1/sqrt(head_dim): 1 but for a model
  // whose attention scale is not 1/sqrt(head_dim) (gemma3 27B).
  float query_scale = 1.0f;
  // Sliding-window attention: a local layer's query at position p sees keys
  // p - sliding_window < k <= p; 0 = no local layers.
  int64_t sliding_window = 0;
  std::vector<uint8_t> local_layers;  // n_layer flags, 1 = local (sliding window)
  float rope_local_freq_base = 10000.0f;  // local layers' RoPE base, unscaled

  // What bloom adds: LayerNorm (mean removed, a bias) instead of RMSNorm, a
  // normalized embedding, an ungated feed-forward, biases on every
  // projection, and ALiBi instead of RoPE (max_alibi_bias > 0).
  bool layer_norm = false;
  bool gated_ffn = true;
  bool fused_qkv = false;  // bloom, mpt: one attn_qkv matrix
  float max_alibi_bias = 0.0f;
  float clamp_kqv = 0.0f;  // mpt: Q, K and V clamped to [-c, c] (0: not)
  bool alibi() const { return max_alibi_bias > 0.0f; }
  // The longest context the model runs: its trained context, but for ALiBi,
  // whose biases extrapolate past it ("train short, test long"): there only
  // memory bounds it, as llama.cpp lets n_ctx exceed n_ctx_train.
  int64_t context_limit() const { return alibi() ? int64_t{1} << 24 : n_ctx_train; }

  // Mixture of experts (qwen2moe; llama with expert tensors, Mixtral's
  // layout): n_expert feed-forwards of n_ff_expert, n_expert_used of them
  // per token, chosen by a router; qwen2moe adds a shared expert of
  // n_ff_shared with its own sigmoid gate. 0 experts: a dense model.
  enum class Gating { softmax, sigmoid };
  int64_t n_expert = 0, n_expert_used = 0, n_ff_expert = 0, n_ff_shared = 0;
  Gating gating = Gating::softmax;
  bool expert_weights_norm = false;  // renormalize the chosen experts' weights to sum to 1
  float expert_weights_scale = 1.0f;
  bool moe() const { return n_expert > 0; }

  bool is_local(int64_t layer) const { return !local_layers.empty() && local_layers[static_cast<size_t>(layer)] != 0; }

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
};

// What a user may set over the file's metadata (`--rope-scaling` and friends).
struct ModelOverrides {
  bool rope = false;  // use rope_scaling instead of the file's
  RopeScaling rope_scaling;
};

// Throws GgufError naming the missing, inconsistent or out-of-range key (or override).
ModelConfig read_model_config(const GgufFile& file, const ModelOverrides& overrides = {});

}  // namespace troupe
