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

void grow_buffer(std::vector<float>& v, size_t n) {
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
  grow_buffer(moe_logits_, static_cast<size_t>(n * c.n_expert));
  grow_buffer(moe_weights_, static_cast<size_t>(n * k));
  grow_buffer(moe_out_, static_cast<size_t>(n * k * e));
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
// matrices and the shared expert's run as one call, and then their down
// matrices, each over its own expert's activations, as a second. A decode
// step's expert matrices are small (a few hundred KB each): streamed one call
// each they ran at half the bandwidth of one dense matrix of the same bytes,
// and paid a parallel region apiece.
void Model::decode_experts(const LayerWeights& l, int64_t layer) {
  const auto& c = config_;
  const int64_t e = c.n_embd, k = c.n_expert_used, ff = c.n_ff_expert;
  grow_buffer(moe_gate_, static_cast<size_t>(k * ff));
  grow_buffer(moe_up_, static_cast<size_t>(k * ff));
  moe_jobs_.clear();
  for (int64_t slot = 0; slot < k; ++slot) {
    const auto x = static_cast<size_t>(moe_experts_[static_cast<size_t>(slot)]);
    expert_tokens_[static_cast<size_t>(layer * c.n_expert) + x] += 1;
    moe_jobs_.push_back({l.exp_gate[x], xn_.data(), 1, &moe_gate_[static_cast<size_t>(slot * ff)]});
    moe_jobs_.push_back({l.exp_up[x], xn_.data(), 1, &moe_up_[static_cast<size_t>(slot * ff)]});
  }
  const bool shared = !l.shared_gate.empty();
  if (shared) {
    moe_jobs_.push_back({l.sh_gate, xn_.data(), 1, gate_.data()});
    moe_jobs_.push_back({l.sh_up, xn_.data(), 1, up_.data()});
  }
  cpu::matmul_jobs(moe_jobs_, pool_, scratch_);
  cpu::silu_mul(moe_gate_.data(), moe_up_.data(), k * ff);
  moe_jobs_.clear();
  for (int64_t slot = 0; slot < k; ++slot)
    moe_jobs_.push_back({l.exp_down[static_cast<size_t>(moe_experts_[static_cast<size_t>(slot)])],
                         &moe_gate_[static_cast<size_t>(slot * ff)], 1, &moe_out_[static_cast<size_t>(slot * e)]});
  if (shared) {
    grow_buffer(moe_shared_, static_cast<size_t>(e));
    cpu::silu_mul(gate_.data(), up_.data(), c.n_ff_shared);
    moe_jobs_.push_back({l.sh_down, gate_.data(), 1, moe_shared_.data()});
  }
  cpu::matmul_jobs(moe_jobs_, pool_, scratch_);
}

// Several tokens: grouped by expert, each expert's rows gathered; every
// active expert's gate and up (and the shared expert's over all tokens) run
// as one call, then every down matrix as a second, so a 16-stream step that
// touches most experts with two or three rows each is two parallel regions,
// not two per expert.
void Model::batch_experts(const LayerWeights& l, int64_t layer) {
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(rows_.size()), e = c.n_embd, k = c.n_expert_used, ff = c.n_ff_expert;
  // Expert by expert, the (token, rank) slots routed to it, in token order:
  // moe_rows_ lists them grouped, moe_groups_ where each expert's group starts.
  moe_rows_.clear();
  moe_groups_.assign(static_cast<size_t>(c.n_expert) + 1, 0);
  for (int64_t x = 0; x < c.n_expert; ++x) {
    moe_groups_[static_cast<size_t>(x)] = static_cast<int32_t>(moe_rows_.size());
    for (int64_t slot = 0; slot < n * k; ++slot)
      if (moe_experts_[static_cast<size_t>(slot)] == x) moe_rows_.push_back(static_cast<int32_t>(slot));
  }
  moe_groups_.back() = static_cast<int32_t>(moe_rows_.size());
  const auto total = static_cast<int64_t>(moe_rows_.size());
  grow_buffer(moe_in_, static_cast<size_t>(total * e));
  grow_buffer(moe_gate_, static_cast<size_t>(total * ff));
  grow_buffer(moe_up_, static_cast<size_t>(total * ff));
  grow_buffer(moe_down_, static_cast<size_t>(total * e));
  for (int64_t r = 0; r < total; ++r)
    std::memcpy(&moe_in_[static_cast<size_t>(r * e)], &xn_[static_cast<size_t>(moe_rows_[static_cast<size_t>(r)] / k * e)],
                sizeof(float) * static_cast<size_t>(e));
  const bool shared = !l.shared_gate.empty();
  auto each_expert = [&](auto&& add) {
    for (int64_t x = 0; x < c.n_expert; ++x) {
      const int32_t first = moe_groups_[static_cast<size_t>(x)], rows = moe_groups_[static_cast<size_t>(x) + 1] - first;
      if (rows > 0) add(static_cast<size_t>(x), first, rows);
    }
  };
  moe_jobs_.clear();
  each_expert([&](size_t x, int32_t first, int32_t rows) {
    expert_tokens_[static_cast<size_t>(layer * c.n_expert) + x] += static_cast<uint64_t>(rows);
    const float* in = &moe_in_[static_cast<size_t>(first * e)];
    moe_jobs_.push_back({l.exp_gate[x], in, rows, &moe_gate_[static_cast<size_t>(first * ff)]});
    moe_jobs_.push_back({l.exp_up[x], in, rows, &moe_up_[static_cast<size_t>(first * ff)]});
  });
  if (shared) {
    moe_jobs_.push_back({l.sh_gate, xn_.data(), static_cast<int>(n), gate_.data()});
    moe_jobs_.push_back({l.sh_up, xn_.data(), static_cast<int>(n), up_.data()});
  }
  cpu::matmul_jobs(moe_jobs_, pool_, scratch_);
  glu_split(cpu::silu_mul, {{moe_gate_.data(), moe_up_.data(), total * ff},
                            {gate_.data(), up_.data(), shared ? n * c.n_ff_shared : 0}});
  moe_jobs_.clear();
  each_expert([&](size_t x, int32_t first, int32_t rows) {
    moe_jobs_.push_back({l.exp_down[x], &moe_gate_[static_cast<size_t>(first * ff)], rows,
                         &moe_down_[static_cast<size_t>(first * e)]});
  });
  if (shared) {
    grow_buffer(moe_shared_, static_cast<size_t>(n * e));
    moe_jobs_.push_back({l.sh_down, gate_.data(), static_cast<int>(n), moe_shared_.data()});
  }
  cpu::matmul_jobs(moe_jobs_, pool_, scratch_);
  for (int64_t r = 0; r < total; ++r)
    std::memcpy(&moe_out_[static_cast<size_t>(moe_rows_[static_cast<size_t>(r)] * e)], &moe_down_[static_cast<size_t>(r * e)],
                sizeof(float) * static_cast<size_t>(e));
}

// Weighted, in rank order: a multiply, then an add per further expert; then
// the shared expert's output (computed with the experts') times its gate, and
// the residual.
void Model::combine_experts(const LayerWeights& l) {
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(rows_.size()), e = c.n_embd, k = c.n_expert_used;
  const auto combine = [&](int64_t t) {
    float* out = &tmp_[static_cast<size_t>(t * e)];
    for (int64_t slot = 0; slot < k; ++slot) {
      const float w = moe_weights_[static_cast<size_t>(t * k + slot)];
      const float* o = &moe_out_[static_cast<size_t>((t * k + slot) * e)];
      for (int64_t i = 0; i < e; ++i) out[i] = slot == 0 ? o[i] * w : out[i] + o[i] * w;
    }
    if (!l.shared_gate.empty()) {  // qwen2moe: a shared expert (run with the experts) behind a sigmoid gate
      // The gate's dot product as 16 interleaved sums (value i in sum i % 16)
      // folded pairwise: independent sums vectorize, where one running sum
      // was a chain of n_embd dependent adds.
      const float* xt = &xn_[static_cast<size_t>(t * e)];
      float part[16] = {};
      for (int64_t i = 0; i < e; ++i) part[i % 16] += xt[i] * l.shared_gate[static_cast<size_t>(i)];
      for (int w = 8; w > 0; w /= 2)
        for (int j = 0; j < w; ++j) part[j] += part[j + w];
      const float g = 1.0f / (1.0f + std::exp(-part[0]));
      for (int64_t i = 0; i < e; ++i) out[i] = out[i] + moe_shared_[static_cast<size_t>(t * e + i)] * g;
    }
    cpu::add(&x_[static_cast<size_t>(t * e)], out, e);
  };
  // Token by token, each on its own rows: the threads' split changes no value.
  if (n >= 4 && pool_.size() > 1) {
    pool_.parallel_for(n, [&](int64_t b, int64_t end) {
      for (int64_t t = b; t < end; ++t) combine(t);
    });
  } else {
    for (int64_t t = 0; t < n; ++t) combine(t);
  }
}

}  // namespace troupe
