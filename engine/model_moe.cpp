// The feed-forward of a mixture-of-experts layer (Model::moe_ffn).
//
// Batched as continuous batching needs it: the router picks each token's
// experts, the step's tokens are grouped by expert (in token order), and each
// expert with tokens runs its three matrices once over all of them with the
// ordinary quantized kernels. A token's output is its experts' outputs times
// their weights, summed in rank order (most probable first), plus the shared
// expert's: nothing in it depends on which other tokens share the step (the
// kernels give every row the same bits in any batch).
#include <array>
#include <cmath>
#include <cstring>

#include "engine/cpu/ops.h"
#include "engine/model.h"
#include "engine/moe_router.h"

namespace troupe {
namespace {

void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

std::vector<uint64_t> Model::expert_totals() const {
  std::vector<uint64_t> totals(static_cast<size_t>(config_.n_expert), 0);
  for (size_t i = 0; i < expert_tokens_.size(); ++i) totals[i % totals.size()] += expert_tokens_[i];
  return totals;
}

void Model::moe_ffn(const LayerWeights& l, int64_t layer) {
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(rows_.size()), e = c.n_embd, k = c.n_expert_used;
  grow(moe_logits_, static_cast<size_t>(n * c.n_expert));
  grow(moe_weights_, static_cast<size_t>(n * k));
  grow(moe_out_, static_cast<size_t>(n * k * e));
  if (moe_experts_.size() < static_cast<size_t>(n * k)) moe_experts_.resize(static_cast<size_t>(n * k));
  cpu::matmul(l.router, xn_.data(), static_cast<int>(n), moe_logits_.data(), pool_, scratch_);
  route_tokens(moe_logits_.data(), n, MoeRouting::of(c), moe_experts_.data(), moe_weights_.data());

  if (n == 1) {
    decode_experts(l, layer);
  } else {
    batch_experts(l, layer);
  }
  combine_experts(l);
}

// One token: every chosen expert reads the same row, so their gate and up
// matrices (and the shared expert's) run as one matmul_many. Its chunks then
// span all of them: a decode step's expert matrices are small (a few hundred
// KB), and streamed one call each they ran at half the bandwidth of one
// dense matrix of the same bytes.
void Model::decode_experts(const LayerWeights& l, int64_t layer) {
  const auto& c = config_;
  const int64_t e = c.n_embd, k = c.n_expert_used, ff = c.n_ff_expert;
  grow(moe_gate_, static_cast<size_t>(k * ff));
  grow(moe_up_, static_cast<size_t>(k * ff));
  std::array<cpu::WeightMatrix, 16> mats;
  std::array<float*, 16> outs;
  size_t used = 0;
  const auto flush = [&] {
    if (used > 0) cpu::matmul_many(std::span(mats.data(), used), xn_.data(), 1, std::span(outs.data(), used), pool_, scratch_);
    used = 0;
  };
  const auto add = [&](const cpu::WeightMatrix& w, float* out) {
    if (used == mats.size()) flush();
    mats[used] = w;
    outs[used++] = out;
  };
  for (int64_t slot = 0; slot < k; ++slot) {
    const auto x = static_cast<size_t>(moe_experts_[static_cast<size_t>(slot)]);
    expert_tokens_[static_cast<size_t>(layer * c.n_expert) + x] += 1;
    add(l.exp_gate[x], &moe_gate_[static_cast<size_t>(slot * ff)]);
    add(l.exp_up[x], &moe_up_[static_cast<size_t>(slot * ff)]);
  }
  if (!l.shared_gate.empty()) {
    add(l.sh_gate, gate_.data());
    add(l.sh_up, up_.data());
  }
  flush();
  cpu::silu_mul(moe_gate_.data(), moe_up_.data(), k * ff);
  for (int64_t slot = 0; slot < k; ++slot)
    cpu::matmul(l.exp_down[static_cast<size_t>(moe_experts_[static_cast<size_t>(slot)])], &moe_gate_[static_cast<size_t>(slot * ff)],
                1, &moe_out_[static_cast<size_t>(slot * e)], pool_, scratch_);
}

// Several tokens: grouped by expert, each expert's rows gathered and run as
// one matmul per matrix.
void Model::batch_experts(const LayerWeights& l, int64_t layer) {
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(rows_.size()), e = c.n_embd, k = c.n_expert_used, ff = c.n_ff_expert;
  // Expert by expert, the (token, rank) slots routed to it, in token order.
  for (int64_t x = 0; x < c.n_expert; ++x) {
    moe_rows_.clear();
    for (int64_t slot = 0; slot < n * k; ++slot)
      if (moe_experts_[static_cast<size_t>(slot)] == x) moe_rows_.push_back(static_cast<int32_t>(slot));
    const auto rows = static_cast<int64_t>(moe_rows_.size());
    if (rows == 0) continue;
    expert_tokens_[static_cast<size_t>(layer * c.n_expert + x)] += static_cast<uint64_t>(rows);
    grow(moe_in_, static_cast<size_t>(rows * e));
    grow(moe_gate_, static_cast<size_t>(rows * ff));
    grow(moe_up_, static_cast<size_t>(rows * ff));
    grow(moe_down_, static_cast<size_t>(rows * e));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(&moe_in_[static_cast<size_t>(r * e)], &xn_[static_cast<size_t>(moe_rows_[static_cast<size_t>(r)] / k * e)],
                  sizeof(float) * static_cast<size_t>(e));
    const cpu::WeightMatrix gate_up[] = {l.exp_gate[static_cast<size_t>(x)], l.exp_up[static_cast<size_t>(x)]};
    float* const outs[] = {moe_gate_.data(), moe_up_.data()};
    cpu::matmul_many(gate_up, moe_in_.data(), static_cast<int>(rows), outs, pool_, scratch_);
    cpu::silu_mul(moe_gate_.data(), moe_up_.data(), rows * ff);
    cpu::matmul(l.exp_down[static_cast<size_t>(x)], moe_gate_.data(), static_cast<int>(rows), moe_down_.data(), pool_,
                scratch_);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(&moe_out_[static_cast<size_t>(moe_rows_[static_cast<size_t>(r)] * e)], &moe_down_[static_cast<size_t>(r * e)],
                  sizeof(float) * static_cast<size_t>(e));
  }
}

// Weighted, in rank order: a multiply, then an add per further expert; then
// the shared expert (its gate and up already run with the experts' for one
// token), and the residual.
void Model::combine_experts(const LayerWeights& l) {
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(rows_.size()), e = c.n_embd, k = c.n_expert_used;
  for (int64_t t = 0; t < n; ++t) {
    float* out = &tmp_[static_cast<size_t>(t * e)];
    for (int64_t slot = 0; slot < k; ++slot) {
      const float w = moe_weights_[static_cast<size_t>(t * k + slot)];
      const float* o = &moe_out_[static_cast<size_t>((t * k + slot) * e)];
      for (int64_t i = 0; i < e; ++i) out[i] = slot == 0 ? o[i] * w : out[i] + o[i] * w;
    }
  }
  if (!l.shared_gate.empty()) {  // qwen2moe: a shared expert behind a sigmoid gate of its own
    const int64_t sf = c.n_ff_shared;
    grow(moe_shared_, static_cast<size_t>(n * e));
    if (n > 1) {
      const cpu::WeightMatrix gate_up[] = {l.sh_gate, l.sh_up};
      float* const outs[] = {gate_.data(), up_.data()};
      cpu::matmul_many(gate_up, xn_.data(), static_cast<int>(n), outs, pool_, scratch_);
    }
    cpu::silu_mul(gate_.data(), up_.data(), n * sf);
    cpu::matmul(l.sh_down, gate_.data(), static_cast<int>(n), moe_shared_.data(), pool_, scratch_);
    for (int64_t t = 0; t < n; ++t) {
      float dot = 0.0f;
      for (int64_t i = 0; i < e; ++i) dot += xn_[static_cast<size_t>(t * e + i)] * l.shared_gate[static_cast<size_t>(i)];
      const float g = 1.0f / (1.0f + std::exp(-dot));
      float* out = &tmp_[static_cast<size_t>(t * e)];
      for (int64_t i = 0; i < e; ++i) out[i] = out[i] + moe_shared_[static_cast<size_t>(t * e + i)] * g;
    }
  }
  cpu::add(x_.data(), tmp_.data(), n * e);
}

}  // namespace troupe
