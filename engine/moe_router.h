#pragma once
// The router of a mixture-of-experts layer: from each token's router logits,
// the experts it goes to and their weights. Softmax (or sigmoid) over the
// logits, the n_used most probable experts (a tie goes to the lower index,
// so the choice never depends on anything but the token's own logits), their
// probabilities as weights, renormalized to sum to 1 where the model says
// so (the sum kept above 2^-14, as llama.cpp keeps it), then scaled.
#include <cstdint>

#include "engine/model_config.h"

namespace troupe {

struct MoeRouting {
  int64_t n_expert = 0, n_used = 0;
  ModelConfig::Gating gating = ModelConfig::Gating::softmax;
  bool normalize = false;
  float scale = 1.0f;
  static MoeRouting of(const ModelConfig& c) {
    return {c.n_expert, c.n_expert_used, c.gating, c.expert_weights_norm, c.expert_weights_scale};
  }
};

// logits: n_tokens x n_expert (overwritten with the probabilities); experts
// and weights: n_tokens x n_used, most probable first.
void route_tokens(float* logits, int64_t n_tokens, const MoeRouting& routing, int32_t* experts, float* weights);

}  // namespace troupe
