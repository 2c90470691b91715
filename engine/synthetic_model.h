#pragma once
// Small models with random weights and a real (tiny) byte-level BPE
// vocabulary, written as GGUF files that llama.cpp would also load. Unit tests
// run on them in milliseconds; `troupe make-model` exposes them.
#include <cstdint>
#include <string>

#include "engine/tensor_type.h"

namespace troupe {

class GgufWriter;

struct SyntheticModelSpec {
  // qwen2 (QKV bias, RoPE halves), qwen2moe (qwen2 with experts), llama
  // (with experts: Mixtral's layout), or gemma3 (QK-norm, post-norms,
  // GELU, every sixth layer global and the others sliding-window), bloom
  // (ALiBi, LayerNorm, fused QKV, biases, GELU without a gate) or mpt (as
  // bloom, without biases or an embedding norm, its ALiBi bias in the file)
  std::string architecture = "qwen2";
  int64_t n_embd = 256;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t n_ff = 512;
  int64_t n_vocab = 0;      // 0 = the trained vocabulary as is; larger pads with unused tokens
  int32_t n_merges = 256;   // BPE merges learned from the built-in corpus
  int64_t context_length = 2048;
  TensorType weight_type = TensorType::F32;  // attention and FFN matrices
  TensorType embedding_type = TensorType::F32;
  bool tied_output = true;
  // The output norm's mean weight: below 1 the logits shrink and the model
  // is less sure of its tokens (tests of confidence-driven routing).
  float output_scale = 1.0f;
  uint64_t seed = 1;
  // rope.scaling.* metadata: "" (none written), "linear" or "yarn".
  std::string rope_scaling;
  double rope_factor = 1.0;
  int64_t rope_orig_ctx = 0;  // yarn: 0 writes none (the reader takes context_length)
  int64_t sliding_window = 512;  // gemma3's local layers
  double clamp_kqv = 0;  // mpt: attention.clamp_kqv (0 writes none)
  // Mixture of experts (qwen2moe, or llama as Mixtral): experts, how many a
  // token uses, their width (0: n_ff) and qwen2moe's shared expert's (0: n_ff).
  int64_t n_expert = 0, n_expert_used = 0, n_ff_expert = 0, n_ff_shared = 0;
  int64_t expert_ff() const { return n_ff_expert > 0 ? n_ff_expert : n_ff; }
  // qwen2moe always has a shared expert (llama.cpp requires it): n_ff unless set.
  int64_t shared_ff() const { return n_ff_shared > 0 ? n_ff_shared : architecture == "qwen2moe" ? n_ff : 0; }

  void validate() const;  // throws std::invalid_argument naming the problem
};

// Metadata, vocabulary and tensors into a writer (tests add or break things).
void build_synthetic_model(const SyntheticModelSpec& spec, GgufWriter& writer);
void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path);

}  // namespace troupe
