#pragma once
// Launchers of the CUDA kernels, callable from host C++ (no CUDA syntax
// here). Every launcher enqueues on `stream` and returns at once; bf16
// buffers are passed as uint16_t so host code needs no cuda_bf16.h.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/cuda/device_matrix.h"

namespace troupe::cuda {

// Per-row inputs of a forward pass, in device memory (see cuda_backend.cpp).
struct RowInputs {
  const int32_t* token;      // [n]
  const int32_t* pos;        // [n] position of the row's token
  const int32_t* kv_slot;    // [n] page * page_size + slot receiving its K/V
  const int32_t* table_off;  // [n] offset of its sequence's block table in `tables`
  const int32_t* tables;     // concatenated block tables
};

struct AttentionDims {
  int n_head;
  int n_head_kv;
  int head_dim;
  int page_size;
};

// What the GEMV does to x before the dot products.
struct GemvInput {
  enum Kind { plain, rmsnorm, swiglu } kind = plain;
  const float* gain = nullptr;  // rmsnorm: weight vector of length cols
  float eps = 0;
  // Row stride of x in floats (plain/rmsnorm: >= cols; swiglu: x holds
  // [gate | up] of 2*cols per row and the input is silu(gate) * up).
  int64_t x_stride = 0;
};

// Largest token count the fused GEMV serves in one pass over the weights.
constexpr int kGemvTokens = 8;

void embed_rows(const DeviceMatrix& table, const int32_t* tokens, int n, float* x, cudaStream_t s);
void gather_rows(const float* x, const int32_t* rows, int n, int64_t width, float* out, cudaStream_t s);
void rmsnorm_to_bf16(const float* x, const float* gain, int n, int64_t width, float eps, uint16_t* out, cudaStream_t s);
void swiglu_to_bf16(const float* gate_up, int n, int64_t ff, uint16_t* out, cudaStream_t s);
void float_to_bf16(const float* in, int64_t count, uint16_t* out, cudaStream_t s);
void dequantize_to_bf16(const DeviceMatrix& w, uint16_t* out, cudaStream_t s);

// y[t][r] (=, or += when accumulate) dot(row r of w, input(x[t])) for t < n.
void gemv(const DeviceMatrix& w, const float* x, int n, const GemvInput& in, float* y, bool accumulate, cudaStream_t s);

// Adds the bias, applies RoPE to Q and K in place, and stores K and V (half)
// at each row's kv_slot of this layer's caches ([slots][n_head_kv * head_dim]).
void qkv_finish(float* qkv, const float* bias, int n, const AttentionDims& d, const float* inv_freq, float freq_scale,
                bool rope_halves, const RowInputs& rows, uint16_t* k_cache, uint16_t* v_cache, cudaStream_t s);

// Positions a block of the attention kernel covers; a row whose context is
// longer is split into ceil(len / kAttentionSplit) partial blocks, combined after.
constexpr int kAttentionSplit = 256;

// out[row][head][:] = softmax(q k^T / sqrt(d)) v over the row's positions
// [0, pos]. partial_* hold n * n_head * n_splits entries when n_splits > 1.
void attention(const float* qkv, int64_t qkv_stride, int n, const AttentionDims& d, const RowInputs& rows,
               const uint16_t* k_cache, const uint16_t* v_cache, int n_splits, float* partial_acc, float* partial_ml,
               float* out, cudaStream_t s);

// Per-row token choice (engine/backend.h TokenChoice) over logits [n][vocab].
struct ChoiceInputs {
  const float* temperature;
  const int32_t* top_k;
  const float* top_p;
  const uint64_t* seed;
  const uint64_t* step;
  // Constrained decoding: row r may choose token t iff mask_row[r] < 0 or
  // bit t of masks[mask_row[r] * mask_words + t / 64] is set.
  const int32_t* mask_row;
  const uint64_t* masks;
  int64_t mask_words;
};
void choose_tokens(const float* logits, int n, int64_t vocab, const ChoiceInputs& c, int32_t* out, cudaStream_t s);

}  // namespace troupe::cuda
