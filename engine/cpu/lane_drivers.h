#pragma once
// How the lane kernels (matmul_lanes_avx2.cpp, matmul_lanes_avx512.cpp) walk
// a call: tokens in blocks of kT, each block over all the chunk's rows, a
// last partial block as one of exactly its size. Each including file defines,
// for its accumulator vector Acc (declared here):
//   row_groups<F, T>(a, r, t0, g0, g1, acc): adds groups [g0, g1) of row r
//     in weight format F, tokens t0..t0+T-1, into acc[0..T);
//   store_row<T>(a, r, t0, acc): reduces acc[t] into token t0+t's output.
// Include it from those files only: everything here has internal linkage,
// so each file keeps its own copy compiled with its own instruction set.
#include <algorithm>

#include "engine/cpu/isa.h"
#include "engine/cpu/matmul.h"

namespace troupe::cpu::detail {
namespace {

template <class F, int T, class Acc>
inline void row_groups(const KernelArgs& a, int64_t r, int t0, int64_t g0, int64_t g1, Acc* acc);
template <int T, class Acc>
void store_row(const KernelArgs& a, int64_t r, int t0, const Acc* acc);

template <class F>
constexpr int64_t groups_of(int64_t cols) {
  return (cols / F::kUnitElems + 15) / 16;
}

// Rows a column segment is taken over before the next segment: their
// accumulators (T vectors each) stay in L1.
constexpr int64_t kSegmentRows = 16;
// A row's share of a segment: long enough for the weight stream to keep
// going at each jump to the next row's segment.
constexpr int64_t kSegmentWeightBytes = 1536;

template <class F>
constexpr int64_t activation_bytes_per_group() {
  return 16 * F::kUnitElems + 16 * 4 * (F::kMins ? 2 : 1) + (F::kOffset ? 16 * 4 : 0);
}

// Rows r0..r1 for tokens t0..t0+T-1. Where the block's activations
// (codes and their per-unit scales) pass two thirds of L1, they crowd the
// weights out and the stream stalls: 8 tokens of 8,960-value rows (~90 KB)
// ran the 1.5B's ffn_down at 40-60 % of the rate of its 1,536-value rows.
// There each run of kSegmentRows rows is taken a column segment at a time,
// the segment's activations within 5/12 of L1, so they are read from L2 once
// per run rather than once per row. Every row still adds its groups in
// order into the same accumulators, so the bits are those of the
// unsegmented walk. Measured on a Zen 5 EPYC (48 KiB L1, 2 threads, weights
// streamed from memory): Q4_K 1536x8960 at 8 tokens 153 -> 355 GMAC/s,
// Q6_K 127 -> 217, and at 4 tokens (46-54 KB) 157 -> 255 and 100 -> 140;
// blocks of 2 tokens (23-27 KB) gain nothing and stay whole.
template <class F, int T, class Acc>
void rows_tokens(const KernelArgs& a, int64_t r0, int64_t r1, int t0) {
  const int64_t groups = groups_of<F>(a.cols);
  const int64_t per_group = T * activation_bytes_per_group<F>();
  const int64_t l1 = l1_data_bytes();
  if (T == 1 || 3 * groups * per_group <= 2 * l1) {
    for (int64_t r = r0; r < r1; ++r) {
      Acc acc[T];
      row_groups<F, T>(a, r, t0, 0, groups, acc);
      store_row<T>(a, r, t0, acc);
    }
    return;
  }
  const int64_t segment =
      std::max<int64_t>(1, std::min(kSegmentWeightBytes / F::kGroupStride, 5 * l1 / 12 / per_group));
  for (int64_t rb = r0; rb < r1; rb += kSegmentRows) {
    const int64_t n = std::min(kSegmentRows, r1 - rb);
    Acc acc[kSegmentRows][T];
    for (int64_t g0 = 0; g0 < groups; g0 += segment)
      for (int64_t i = 0; i < n; ++i)
        row_groups<F, T>(a, rb + i, t0, g0, std::min(groups, g0 + segment), acc[i]);
    for (int64_t i = 0; i < n; ++i) store_row<T>(a, rb + i, t0, acc[i]);
  }
}

template <class F, int T, class Acc>
void tokens_tail(const KernelArgs& a, int64_t r0, int64_t r1, int t, int left) {
  if (left == T) return rows_tokens<F, T, Acc>(a, r0, r1, t);
  if constexpr (T > 1) tokens_tail<F, T - 1, Acc>(a, r0, r1, t, left);
}

template <class F, int kT, class Acc>
void token_blocks(const KernelArgs& a, int64_t r0, int64_t r1) {
  for (int t = 0; t < a.n_tokens; t += kT) {
    const int n = a.n_tokens - t < kT ? a.n_tokens - t : kT;
    if (n == kT)
      rows_tokens<F, kT, Acc>(a, r0, r1, t);
    else
      tokens_tail<F, kT, Acc>(a, r0, r1, t, n);
  }
}

}  // namespace
}  // namespace troupe::cpu::detail
