// Token choice on the device, so that only token ids cross to the host: one
// block per row finds the argmax (greedy), or the top-k and top-p thresholds
// by bitwise search over order-preserving keys of the logits (exact, no sort),
// then draws from the kept tokens in id order with a counter-based generator.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Best {
  float value;
  int index;
};

struct BestOp {
  __device__ Best operator()(const Best& a, const Best& b) const {
    return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
  }
};

__global__ void __launch_bounds__(kThreads) choose_kernel(const float* logits, int64_t vocab, ChoiceInputs c, int32_t* out) {
  using ReduceBest = cub::BlockReduce<Best, kThreads>;
  using ReduceInt = cub::BlockReduce<int, kThreads>;
  using ReduceFloat = cub::BlockReduce<float, kThreads>;
  using Scan = cub::BlockScan<float, kThreads>;
  __shared__ union {
    typename ReduceBest::TempStorage best;
    typename ReduceInt::TempStorage count;
    typename ReduceFloat::TempStorage sum;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ float bcast_f;
  __shared__ int bcast_i;
  __shared__ Best best_all;

  const int row = blockIdx.x, tid = threadIdx.x;
  const float* z = logits + row * vocab;
  // A token the row's grammar refuses reads as -infinity everywhere below.
  const int32_t m = c.mask_row ? c.mask_row[row] : -1;
  const uint64_t* allowed = m >= 0 ? c.masks + m * c.mask_words : nullptr;
  auto logit = [&](int64_t i) { return !allowed || ((allowed[i >> 6] >> (i & 63)) & 1) ? z[i] : -INFINITY; };
  Best best{-INFINITY, 0x7fffffff};
  for (int64_t i = tid; i < vocab; i += kThreads) best = BestOp()(best, Best{logit(i), static_cast<int>(i)});
  best = ReduceBest(tmp.best).Reduce(best, BestOp());
  if (tid == 0) best_all = best;
  __syncthreads();
  const float temperature = c.temperature[row];
  if (temperature <= 0.0f) {
    if (tid == 0) out[row] = best_all.index;
    return;
  }
  const float mx = best_all.value, inv_t = 1.0f / temperature;

  // Top-k: the largest key t with at least k logits at or above it.
  uint32_t thr = 0;
  const int k = c.top_k[row];
  if (k > 0 && k < vocab) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = thr | (1u << bit);
      int cnt = 0;
      for (int64_t i = tid; i < vocab; i += kThreads) cnt += order_key(logit(i)) >= cand;
      cnt = ReduceInt(tmp.count).Sum(cnt);
      if (tid == 0) bcast_i = cnt;
      __syncthreads();
      if (bcast_i >= k) thr = cand;
      __syncthreads();
    }
  }
  auto mass_from = [&](uint32_t t) {  // softmax mass of logits with key >= t, on every thread
    float s = 0.0f;
    for (int64_t i = tid; i < vocab; i += kThreads) {
      const float v = logit(i);
      if (order_key(v) >= t) s += __expf((v - mx) * inv_t);
    }
    s = ReduceFloat(tmp.sum).Sum(s);
    if (tid == 0) bcast_f = s;
    __syncthreads();
    const float r = bcast_f;
    __syncthreads();
    return r;
  };
  float kept = mass_from(thr);
  const float top_p = c.top_p[row];
  if (top_p < 1.0f) {
    const float need = top_p * kept;
    // The largest t whose mass (within the top-k cut) still reaches top_p.
    uint32_t t = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = t | (1u << bit);
      if (mass_from(cand > thr ? cand : thr) >= need) t = cand;
    }
    thr = t > thr ? t : thr;
    kept = mass_from(thr);
  }

  // Draw u in [0, kept) and walk the kept tokens in id order: each thread
  // owns a contiguous chunk; a block scan finds the chunk holding u.
  const uint64_t bits = mix64(c.seed[row] ^ mix64(c.step[row]));
  const float u = static_cast<float>(static_cast<double>(bits >> 11) * 0x1.0p-53) * kept;
  const int64_t chunk = (vocab + kThreads - 1) / kThreads;
  const int64_t begin = tid * chunk, end = begin + chunk < vocab ? begin + chunk : vocab;
  float mine = 0.0f;
  for (int64_t i = begin; i < end; ++i)
    if (order_key(logit(i)) >= thr) mine += __expf((logit(i) - mx) * inv_t);
  float before = 0.0f;
  Scan(tmp.scan).ExclusiveSum(mine, before);
  if (tid == 0) bcast_i = best_all.index;  // fallback when rounding leaves u past the end
  __syncthreads();
  if (mine > 0.0f && u >= before && u < before + mine) {
    float acc = before;
    int pick = -1;
    for (int64_t i = begin; i < end; ++i) {
      if (order_key(logit(i)) < thr) continue;
      const float e = __expf((logit(i) - mx) * inv_t);
      if (e <= 0.0f) continue;  // a refused token (or one too unlikely to count) is never the pick
      acc += e;
      pick = static_cast<int>(i);
      if (u < acc) break;
    }
    bcast_i = pick;
  }
  __syncthreads();
  if (tid == 0) out[row] = bcast_i;
}

}  // namespace

void choose_tokens(const float* logits, int n, int64_t vocab, const ChoiceInputs& c, int32_t* out, cudaStream_t s) {
  if (n == 0) return;
  choose_kernel<<<n, kThreads, 0, s>>>(logits, vocab, c, out);
  TROUPE_CUDA_LAUNCHED();
}

}  // namespace troupe::cuda
