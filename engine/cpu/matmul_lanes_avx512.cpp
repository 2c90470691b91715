// AVX-512 kernels for lane-layout weights (repack.h, decoded by
// lanes_avx512.h) and up to a few dozen tokens: 16 units side by side, so
// each vpdpbusd advances all 16 and every unit's exact integer sum lands in
// its own lane. The kernels in matmul_units_avx512.cpp spend most of their
// instructions gathering a unit's partial sums from 8 lanes into one
// (shuffles that Zen 4 runs at half rate); here a token costs 8 (4 for
// Q6_K) loads and vpdpbusd per group and the per-unit scaling, and the
// weights are unpacked once per group for 8 tokens.
//
// The arithmetic is the canonical order of matmul_units_avx512.cpp (lane c
// of the accumulator is chain c), so results equal the GGUF-layout kernels'
// bit for bit.
#if defined(__x86_64__)
#include <bit>

#include "engine/cpu/lane_drivers.h"
#include "engine/cpu/lanes_avx512.h"

namespace troupe::cpu::detail {
namespace {

// Offsets are powers of two: -kOffset * sum is a shift and a subtraction.
template <class F>
constexpr int kShift = std::countr_zero(static_cast<unsigned>(F::kOffset));

// The exact integer sums of 16 units with one token: code - kOffset times
// the activation codes, the offset coming in as the starting value
// -kOffset * (sum of the unit's activation codes). Two chains of vpdpbusd
// halve the latency a lone token waits on.
template <class F>
inline __m512i unit_sums(const LaneGroup& w, const int8_t* lq, const int32_t* lsum, __mmask16 valid) {
  static_assert((F::kOffset & (F::kOffset - 1)) == 0, "offsets are powers of two");
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
  if constexpr (F::kOffset != 0)
    s0 = _mm512_sub_epi32(s0, _mm512_slli_epi32(_mm512_maskz_loadu_epi32(valid, lsum), kShift<F>));
  for (int k = 0; k < F::kPieces; k += 2) {
    s0 = _mm512_dpbusd_epi32(s0, w.q[k], load512(lq + 64 * k));
    s1 = _mm512_dpbusd_epi32(s1, w.q[k + 1], load512(lq + 64 * k + 64));
  }
  return _mm512_add_epi32(s0, s1);
}

// Groups [g0, g1) of row r for tokens t0..t0+T-1, added into acc (which
// starts from zero at g0 = 0).
//
// With several tokens, their activations for a wide row (8 KB a token at
// 8960 values) crowd the weights out of L1 and the weight stream stalls; a
// prefetch that skips the other cache levels, 1 KB ahead, keeps it going
// (1.5B decode at 2-8 tokens a step about 10 % faster). A lone token streams
// well on the hardware prefetchers alone.
template <class F, int T, class Acc>
__attribute__((always_inline)) inline void row_groups(const KernelArgs& a, int64_t r, int t0, int64_t g0, int64_t g1,
                                                      Acc* acc_io) {
  const ActView& act = *a.act;
  const uint8_t* row = a.w + r * a.row_bytes;
  const int64_t units = a.cols / F::kUnitElems;
  const int64_t lq_s = act.lq_stride, ls_s = act.lsum_stride;
  const int64_t du_s = act.du ? act.du_stride : act.d_stride;
  const int8_t* lq = act.lq + t0 * lq_s;
  const int32_t* lsum = F::kOffset ? act.lsum + t0 * ls_s : nullptr;
  const float* du = act.du ? act.du + t0 * du_s : act.d + t0 * du_s;
  const float* dsum = F::kMins ? act.dsum + t0 * du_s : nullptr;
  // Every loop over acc unrolls, so the accumulators live in registers
  // (an indexed one would put the array on the stack).
  __m512 acc[T];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) acc[t] = g0 == 0 ? _mm512_setzero_ps() : acc_io[t];
  // Whole groups with their masks and loads known at compile time, then a
  // partial last one.
  const auto group = [&]<bool kWhole>(int64_t g, int n) __attribute__((always_inline)) {
    const __mmask16 valid = kWhole ? 0xFFFF : first_units(n);
    LaneGroup w;
    const uint8_t* gp = row + F::kGroupStride * g;
    if constexpr (T > 1)
      for (int64_t i = 0; i < F::kGroupStride; i += 64) _mm_prefetch(reinterpret_cast<const char*>(gp + 1024 + i), _MM_HINT_NTA);
    F::load(gp, kWhole ? 16 : n, w);
    __m512i sums[T];
    if constexpr (T == 1) {
      sums[0] = unit_sums<F>(w, lq + 16 * F::kUnitElems * g, F::kOffset ? lsum + 16 * g : nullptr, valid);
    } else {
      // Piece by piece across the tokens: T independent chains keep
      // vpdpbusd busy where one token's chain would wait on its latency.
      // Integer sums are exact, so the order changes no bit.
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        sums[t] = _mm512_setzero_si512();
        if constexpr (F::kOffset != 0)
          sums[t] = _mm512_sub_epi32(sums[t], _mm512_slli_epi32(_mm512_maskz_loadu_epi32(valid, lsum + t * ls_s + 16 * g), kShift<F>));
      }
#pragma GCC unroll 8
      for (int k = 0; k < F::kPieces; ++k)
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t)
          sums[t] = _mm512_dpbusd_epi32(sums[t], w.q[k], load512(lq + t * lq_s + 16 * F::kUnitElems * g + 64 * k));
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m512 scale = _mm512_mul_ps(w.ws, _mm512_maskz_loadu_ps(valid, du + t * du_s + 16 * g));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[t]), scale, acc[t]);
      if constexpr (F::kMins) acc[t] = _mm512_fmadd_ps(w.minc, _mm512_maskz_loadu_ps(valid, dsum + t * du_s + 16 * g), acc[t]);
    }
  };
  const int64_t whole = std::min(g1, units / 16);
  for (int64_t g = g0; g < whole; ++g) group.template operator()<true>(g, 16);
  if (whole < g1) group.template operator()<false>(whole, static_cast<int>(units - 16 * whole));
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) acc_io[t] = acc[t];
}

template <int T, class Acc>
void store_row(const KernelArgs& a, int64_t r, int t0, const Acc* acc) {
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.y_stride + r] = tree16(acc[t]);
}

// Tokens in blocks of 8, each block over all the rows: for rows up to a few
// thousand values the block's activations stay in L1 while the rows stream
// by, and a second block finds the chunk's rows in L2.
template <class F>
void gemm_lanes(const KernelArgs& a, int64_t r0, int64_t r1, int) {
  token_blocks<F, 8, __m512>(a, r0, r1);
}

}  // namespace

Kernel avx512_lane_kernel(TensorType type) {
  switch (type) {
    case TensorType::Q4_K:
      return {gemm_lanes<LQ4_K>, ActLayout::lanes32, avx512_packed_lane_kernel(type), ActLayout::packed_k};
    case TensorType::Q6_K:
      return {gemm_lanes<LQ6_K>, ActLayout::lanes16, avx512_packed_lane_kernel(type), ActLayout::packed_k};
    case TensorType::Q8_0:
      return {gemm_lanes<LQ_0<TensorType::Q8_0>>, ActLayout::lanes_b32, avx512_packed_lane_kernel(type), ActLayout::packed32};
    case TensorType::Q5_0:
      return {gemm_lanes<LQ_0<TensorType::Q5_0>>, ActLayout::lanes_b32, avx512_packed_lane_kernel(type), ActLayout::packed32};
    case TensorType::Q4_0:
      return {gemm_lanes<LQ_0<TensorType::Q4_0>>, ActLayout::lanes_b32, avx512_packed_lane_kernel(type), ActLayout::packed32};
    default: return {};
  }
}

}  // namespace troupe::cpu::detail

#else  // not x86-64

#include "engine/cpu/matmul.h"
namespace troupe::cpu::detail {
Kernel avx512_lane_kernel(TensorType) { return {}; }
}  // namespace troupe::cpu::detail
#endif
