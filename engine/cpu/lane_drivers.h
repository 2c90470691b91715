#pragma once
// How the lane kernels (matmul_lanes_avx2.cpp, matmul_lanes_avx512.cpp) walk
// a call: tokens in blocks of kT, each block over all the chunk's rows, a
// last partial block as one of exactly its size. Each including file defines
// row_tokens<F, T> (declared here): row r for tokens t0..t0+T-1 in weight
// format F. Include it from those files only: everything here has internal
// linkage, so each file keeps its own copy compiled with its own
// instruction set.
#include "engine/cpu/matmul.h"

namespace troupe::cpu::detail {
namespace {

template <class F, int T>
void row_tokens(const KernelArgs& a, int64_t r, int t0);

template <class F, int T>
void rows_tokens(const KernelArgs& a, int64_t r0, int64_t r1, int t0) {
  for (int64_t r = r0; r < r1; ++r) row_tokens<F, T>(a, r, t0);
}

template <class F, int T>
void tokens_tail(const KernelArgs& a, int64_t r0, int64_t r1, int t, int left) {
  if (left == T) return rows_tokens<F, T>(a, r0, r1, t);
  if constexpr (T > 1) tokens_tail<F, T - 1>(a, r0, r1, t, left);
}

template <class F, int kT>
void token_blocks(const KernelArgs& a, int64_t r0, int64_t r1) {
  for (int t = 0; t < a.n_tokens; t += kT) {
    const int n = a.n_tokens - t < kT ? a.n_tokens - t : kT;
    if (n == kT)
      rows_tokens<F, kT>(a, r0, r1, t);
    else
      tokens_tail<F, kT>(a, r0, r1, t, n);
  }
}

}  // namespace
}  // namespace troupe::cpu::detail
