#pragma once
// The tensors of a loaded model, bound by name and checked against the
// config's shapes. Matrices point into the memory-mapped file (no copy); the
// small vectors (norms, biases) are converted to float once at load.
#include <vector>

#include "engine/cpu/matmul.h"

namespace troupe {

class GgufFile;
struct ModelConfig;

struct LayerWeights {
  std::vector<float> attn_norm;
  cpu::WeightMatrix wq, wk, wv, wo;
  std::vector<float> bq, bk, bv;  // empty when the architecture has no QKV bias
  std::vector<float> ffn_norm;
  cpu::WeightMatrix w_gate, w_up, w_down;
  // gemma3 (empty otherwise): RMSNorm of each query and key head (head_dim),
  // and of the attention's and the feed-forward's outputs before the residual.
  std::vector<float> q_norm, k_norm, post_attn_norm, post_ffn_norm;
  // bloom (empty otherwise): the norms' biases (LayerNorm) and the output,
  // up and down projections' biases. Its fused QKV matrix is bound as three
  // views (wq, wk, wv) of consecutive rows, its bias split into bq, bk, bv.
  std::vector<float> attn_norm_b, ffn_norm_b, bo, b_up, b_down;
  // Mixture of experts (ModelConfig::moe): the router (n_expert rows); each
  // expert's gate, up and down matrices as views of the file's 3-D tensors;
  // qwen2moe's shared expert and its sigmoid gate (n_embd values).
  cpu::WeightMatrix router;
  std::vector<cpu::WeightMatrix> exp_gate, exp_up, exp_down;
  cpu::WeightMatrix sh_gate, sh_up, sh_down;
  std::vector<float> shared_gate;
};

struct ModelWeights {
  cpu::WeightMatrix token_embd;  // rows = vocabulary, cols = embedding
  std::vector<float> output_norm, output_norm_b;
  std::vector<float> embd_norm, embd_norm_b;  // bloom: LayerNorm of the token embeddings
  cpu::WeightMatrix output;  // token_embd itself when the model ties them
  bool tied_output = false;
  std::vector<LayerWeights> layers;
};

// Throws GgufError naming the missing tensor or the mismatched shape.
ModelWeights bind_weights(const GgufFile& file, const ModelConfig& config);

}  // namespace troupe
