#pragma once
// y = W x for every weight format, the hot path of the engine.
//
// Quantized weights meet activations quantized to 8 bits once per call (32-
// blocks for Q4_0/Q5_0/Q8_0, 256-blocks with sub-block sums for K-quants) and
// are dotted in integer SIMD; F32/F16/BF16 weights meet the floats as they
// are. Rows are handed out to the pool's threads in chunks, the caller among
// them. The instruction set is picked per call from active_isa() (isa.h).
#include <cstdint>
#include <memory>
#include <span>

#include "engine/cpu/thread_pool.h"
#include "engine/tensor_type.h"

namespace troupe::cpu {

// Row-major: row r is `cols` values of `type` at data + r * row_bytes(type, cols).
// `lanes`, where set, holds the same rows in the lane layout (repack.h); the
// AVX-512 kernels then read it instead of data, with bitwise the same results.
struct WeightMatrix {
  TensorType type = TensorType::F32;
  const void* data = nullptr;  // null: a matrix the architecture does not have
  int64_t rows = 0;
  int64_t cols = 0;
  const void* lanes = nullptr;
};

// Buffers for quantized activations and per-call bookkeeping. They grow to the
// largest call seen and are reused, so steady-state calls do not allocate.
// One scratch serves one call at a time.
class MatmulScratch {
 public:
  MatmulScratch();
  ~MatmulScratch();
  MatmulScratch(const MatmulScratch&) = delete;
  MatmulScratch& operator=(const MatmulScratch&) = delete;

  // Bytes held for activations and kernel work areas (tests, memory accounting).
  int64_t reserved_bytes() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// y[t * w.rows + r] = dot(row r of w, x[t * w.cols ...]) for t < n_tokens.
void matmul(const WeightMatrix& w, const float* x, int n_tokens, float* y, ThreadPool& pool, MatmulScratch& scratch);

// Several matrices (at most 16) with the same cols reading the same x
// (q/k/v, gate/up): x is quantized once per layout the formats need, and the
// rows of all matrices share one parallel region. ys[i] receives ws[i]'s output.
//
// A token's outputs are bitwise the same whatever else is in the batch (how
// many tokens, which): chunked prefill and batching do not change logits.
void matmul_many(std::span<const WeightMatrix> ws, const float* x, int n_tokens, std::span<float* const> ys,
                 ThreadPool& pool, MatmulScratch& scratch);

// One matrix of a matmul_jobs call, with its own input rows and output.
struct MatmulJob {
  WeightMatrix w;
  const float* x = nullptr;  // n_tokens rows of w.cols values
  int n_tokens = 0;
  float* y = nullptr;        // n_tokens rows of w.rows values
};

// Matrices that each read their own input (a step's experts, each over the
// tokens routed to it), all in one parallel region: their rows share one
// list of chunks, so many small matrices stream as one large one. Each
// distinct input (the same x, cols and token count) is quantized once. Every
// job's output is bitwise what matmul() alone gives it.
void matmul_jobs(std::span<const MatmulJob> jobs, ThreadPool& pool, MatmulScratch& scratch);

// Shared by matmul.cpp and the per-instruction-set kernel files; not an API.
namespace detail {

// How a kernel wants the activations. Q4_0/Q5_0 place the low and high
// 16 values of 4 blocks in separate 64-byte runs to match how their nibbles
// unpack; Q4_K/Q5_K order sub-blocks 0,2,1,3,4,6,5,7 for the same reason.
enum class ActLayout : uint8_t {
  f32,        // x as given
  q8,         // Q8_0: 32-blocks in order
  q8_biased,  // Q8_0 stored as q + 128, for unsigned x signed VNNI products
  nib8,       // Q4_0: 32-blocks, nibble order, correction -8 * block sum
  nib16,      // Q5_0: as nib8 with correction -16 * block sum
  k_sb32,     // Q4_K/Q5_K: 256-blocks, sub-block order 0,2,1,3,..., sums per 32
  k_sb16,     // Q6_K: 256-blocks in order, sums per 16
  // Many tokens (AVX-512): the q8 / k_sb16 codes, plus a copy with 16 tokens
  // interleaved per 4 values (+128) so one vpdpbusd serves 16 tokens.
  packed32,
  packed_k,
  // Lane-layout weights (repack.h): the k_sb32 / k_sb16 / q8 codes, plus a
  // copy with 16 units side by side per group, 32-bit lane j of vector k
  // holding values 4k..4k+3 of unit j, as the weights have them.
  lanes32,    // Q4_K
  lanes16,    // Q6_K
  lanes_b32,  // Q8_0, Q5_0, Q4_0
};
constexpr int kActLayouts = 12;
// Rows the packed kernels unpack at a time (sizes their per-thread work area).
constexpr int kPackedRows = 4;

// Strides count elements of the pointer's type, per token.
struct ActView {
  int64_t cols = 0;
  bool biased = false;
  const float* x = nullptr;          // f32
  int64_t x_stride = 0;
  const int8_t* q = nullptr;         // quantized values
  int64_t q_stride = 0;
  const float* d = nullptr;          // one scale per 32- or 256-block
  int64_t d_stride = 0;
  const float* dl = nullptr;         // 32-blocks: the scale repeated per SIMD lane (8 for q8, 4 for nib)
  int64_t dl_stride = 0;
  const int32_t* corr = nullptr;     // nib: per block {-offset * sum, 0, 0, 0}; k_sb16: per 16 {-32 * sum, 0, 0, 0}
  int64_t corr_stride = 0;
  const int16_t* sums = nullptr;     // K: sums per 32 (k_sb32) or 16 (k_sb16) values
  int64_t sums_stride = 0;
  const float* du = nullptr;         // K: the scale of each 32 (k_sb32) or 16 (k_sb16) values, in order
  const float* dsum = nullptr;       // k_sb32: du * sum of each 32 values
  int64_t du_stride = 0;
  // packed32 / packed_k, per group of 16 tokens (the last one padded with zeros):
  const uint8_t* pk = nullptr;       // code + 128 of value k of lane l at (k / 4) * 64 + l * 4 + k % 4
  int64_t pk_stride = 0;             // bytes per group
  const float* pk_d = nullptr;       // scale of 32-block b of lane l at b * 16 + l
  const float* pk_dsum = nullptr;    // packed_k: scale * sum of the 32-block's codes, same places
  int64_t pk_d_stride = 0;           // floats per group
  // Lane layouts, per token: 16 * unit size bytes per group of 16 units
  // (units past the row's end zero), and (lanes16, lanes_b32) the sum of each
  // unit's codes, one int32 per unit.
  const int8_t* lq = nullptr;
  int64_t lq_stride = 0;
  const int32_t* lsum = nullptr;
  int64_t lsum_stride = 0;
};

struct KernelArgs {
  TensorType type;
  const uint8_t* w;
  int64_t row_bytes;
  int64_t cols;
  const ActView* act;
  int n_tokens;
  float* y;
  int64_t y_stride;     // the matrix's rows
  uint8_t* work;        // per-thread areas for kernels that unpack rows (packed ones)
  int64_t work_stride;  // bytes per thread
};

// Computes rows [row_begin, row_end) for every token; `thread` picks the work area.
using GemmFn = void (*)(const KernelArgs& args, int64_t row_begin, int64_t row_end, int thread);

struct Kernel {
  GemmFn fn = nullptr;
  ActLayout layout = ActLayout::f32;
  GemmFn packed_fn = nullptr;  // for many tokens, where one exists
  ActLayout packed_layout = ActLayout::f32;
};

Kernel scalar_kernel(TensorType type);
Kernel avx2_kernel(TensorType type);    // fn == nullptr where none exists
Kernel avx512_kernel(TensorType type);  // fn == nullptr where none exists
GemmFn avx512_unit_kernel(TensorType type);    // quantized formats, few tokens; nullptr where none exists
GemmFn avx512_packed_kernel(TensorType type);  // quantized formats, many tokens; nullptr where none exists
// For lane-layout weights (repack.h): fn over a lane layout, packed_fn over
// packed_k / packed32; fn == nullptr where none exists.
Kernel avx512_lane_kernel(TensorType type);
// AVX2 kernels over the same lane layout, 8 units at a time (fn only).
Kernel avx2_lane_kernel(TensorType type);
GemmFn avx512_packed_lane_kernel(TensorType type);

// Quantizes one token's activations (x: its cols floats) into token slot t of
// v. Every version gives the same bytes: scale = amax / 127, values
// round-to-nearest-even of x * (1 / scale), so paths differ only in float
// summation order.
using QuantizeFn = void (*)(ActLayout layout, const float* x, const ActView& v, int t);
void quantize_scalar(ActLayout layout, const float* x, const ActView& v, int t);
void quantize_avx2(ActLayout layout, const float* x, const ActView& v, int t);
void quantize_avx512(ActLayout layout, const float* x, const ActView& v, int t);

// matmul_act.cpp. Bytes all n tokens of layout l take in the scratch; with
// base != nullptr also points v at them.
int64_t place_activations(ActLayout l, int64_t cols, int n_tokens, uint8_t* base, ActView& v);
// Quantizes token t of x (its floats at x + t * cols) into v, and packs it
// where l is a packed layout.
void prepare_token(ActLayout l, QuantizeFn quantize, const float* x, const ActView& v, int t, int n_tokens);

// Scalar dot of one row's blocks [first, end) with one token; SIMD kernels use
// it for the blocks after their last whole chunk.
float dot_blocks(TensorType type, const uint8_t* row, const ActView& act, int token, int64_t first, int64_t end);

}  // namespace detail
}  // namespace troupe::cpu
