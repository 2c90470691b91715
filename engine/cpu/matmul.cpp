#include "engine/cpu/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cpu/isa.h"

namespace troupe::cpu {

using detail::ActLayout;
using detail::ActView;
using detail::GemmFn;
using detail::Kernel;
using detail::KernelArgs;

struct MatmulScratch::Impl {
  std::unique_ptr<uint8_t[]> storage;
  int64_t capacity = 0;  // usable bytes from the 64-aligned start
  uint8_t* base = nullptr;

  std::array<ActView, detail::kActLayouts> views{};

  struct Task {
    KernelArgs args;
    GemmFn fn;
    int64_t chunk_rows;
    int64_t first_chunk;
  };
  std::vector<Task> tasks;
  int64_t total_chunks = 0;
  std::atomic<int64_t> next_chunk{0};

  void reserve(int64_t bytes) {
    if (bytes <= capacity) return;
    const int64_t grown = std::max(bytes, capacity + capacity / 2);
    storage = std::make_unique<uint8_t[]>(static_cast<size_t>(grown + 64));
    const auto addr = reinterpret_cast<uintptr_t>(storage.get());
    base = storage.get() + ((64 - addr % 64) % 64);
    capacity = grown;
  }
};

MatmulScratch::MatmulScratch() : impl_(std::make_unique<Impl>()) {}
MatmulScratch::~MatmulScratch() = default;
int64_t MatmulScratch::reserved_bytes() const { return impl_->capacity; }

namespace {

constexpr int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Nearest integer, ties to even, identically in every build: adding 1.5 * 2^23
// leaves the rounded value in the low mantissa bits (|v| <= 127 here).
inline int round_even(float v) { return static_cast<int>((v + 12582912.0f) - 12582912.0f); }

bool is_32_block(ActLayout l) {
  return l == ActLayout::q8 || l == ActLayout::q8_biased || l == ActLayout::nib8 || l == ActLayout::nib16;
}
bool is_k(ActLayout l) { return l == ActLayout::k_sb32 || l == ActLayout::k_sb16; }

// Per-token byte sizes of a layout's arrays, each a multiple of 64.
struct ActSizes {
  int64_t q = 0, d = 0, dl = 0, corr = 0, sums = 0;
  int64_t total() const { return q + d + dl + corr + sums; }
};

ActSizes act_sizes(ActLayout l, int64_t cols) {
  ActSizes s;
  if (l == ActLayout::f32) return s;
  s.q = round_up(cols, 64);
  if (is_32_block(l)) {
    const int64_t nb = cols / 32;
    const int64_t lanes = (l == ActLayout::q8 || l == ActLayout::q8_biased) ? 8 : 4;
    s.d = round_up(nb * 4, 64);
    s.dl = round_up(nb * lanes * 4, 64);
    if (l == ActLayout::nib8 || l == ActLayout::nib16) s.corr = round_up(nb * 16, 64);
  } else {
    const int64_t nsb = cols / 256;
    s.d = round_up(nsb * 4, 64);
    s.sums = round_up(nsb * (l == ActLayout::k_sb32 ? 8 : 16) * 2, 64);
  }
  return s;
}

// Points `v` at its arrays in `base` (all tokens of q, then of d, ...).
void place_view(ActLayout l, int64_t cols, int n_tokens, uint8_t* base, ActView& v) {
  const ActSizes s = act_sizes(l, cols);
  v = ActView{};
  v.cols = cols;
  v.biased = l == ActLayout::q8_biased;
  uint8_t* p = base;
  auto take = [&](int64_t per_token) {
    uint8_t* r = p;
    p += per_token * n_tokens;
    return r;
  };
  v.q = reinterpret_cast<int8_t*>(take(s.q));
  v.q_stride = s.q;
  v.d = reinterpret_cast<float*>(take(s.d));
  v.d_stride = s.d / 4;
  v.dl = reinterpret_cast<float*>(take(s.dl));
  v.dl_stride = s.dl / 4;
  v.corr = reinterpret_cast<int32_t*>(take(s.corr));
  v.corr_stride = s.corr / 4;
  v.sums = reinterpret_cast<int16_t*>(take(s.sums));
  v.sums_stride = s.sums / 2;
}

float absmax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// One token's x into 32-blocks: scale amax/127, values round(x / scale).
void quantize_32(const float* x, ActLayout l, const ActView& v, int t) {
  const int64_t nb = v.cols / 32;
  auto* q = const_cast<int8_t*>(v.q + t * v.q_stride);
  auto* d = const_cast<float*>(v.d + t * v.d_stride);
  auto* dl = const_cast<float*>(v.dl + t * v.dl_stride);
  auto* corr = const_cast<int32_t*>(v.corr + t * v.corr_stride);
  const bool nib = l == ActLayout::nib8 || l == ActLayout::nib16;
  const int offset = l == ActLayout::nib16 ? 16 : 8;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + 32 * b;
    const float scale = absmax(xb, 32) / 127;
    const float inv = scale != 0 ? 1 / scale : 0;
    int8_t qb[32];
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += qb[j] = static_cast<int8_t>(round_even(xb[j] * inv));
    d[b] = scale;
    if (nib) {
      const int64_t c = b / 4, k = b % 4, n = std::min<int64_t>(4, nb - 4 * c);
      std::copy(qb, qb + 16, q + 128 * c + 16 * k);
      std::copy(qb + 16, qb + 32, q + 128 * c + 16 * n + 16 * k);
      std::fill(dl + 4 * b, dl + 4 * b + 4, scale);
      corr[4 * b] = -offset * sum;
      std::fill(corr + 4 * b + 1, corr + 4 * b + 4, 0);
    } else {
      for (int j = 0; j < 32; ++j)
        q[32 * b + j] = l == ActLayout::q8_biased ? static_cast<int8_t>(static_cast<uint8_t>(qb[j] + 128)) : qb[j];
      std::fill(dl + 8 * b, dl + 8 * b + 8, scale);
    }
  }
}

// One token's x into 256-blocks with sums per 32 (sub-blocks reordered
// 0,2,1,3,...) or per 16.
void quantize_256(const float* x, ActLayout l, const ActView& v, int t) {
  static constexpr int kSlot[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  const int64_t nsb = v.cols / 256;
  auto* q = const_cast<int8_t*>(v.q + t * v.q_stride);
  auto* d = const_cast<float*>(v.d + t * v.d_stride);
  auto* sums = const_cast<int16_t*>(v.sums + t * v.sums_stride);
  const bool sb32 = l == ActLayout::k_sb32;
  for (int64_t s = 0; s < nsb; ++s) {
    const float* xs = x + 256 * s;
    const float scale = absmax(xs, 256) / 127;
    const float inv = scale != 0 ? 1 / scale : 0;
    d[s] = scale;
    const int group = sb32 ? 32 : 16;
    for (int g = 0; g < 256 / group; ++g) {
      int8_t* dst = q + 256 * s + (sb32 ? 32 * kSlot[g] : 16 * g);
      int sum = 0;
      for (int j = 0; j < group; ++j) sum += dst[j] = static_cast<int8_t>(round_even(xs[group * g + j] * inv));
      sums[(sb32 ? 8 : 16) * s + g] = static_cast<int16_t>(sum);
    }
  }
}

void quantize_token(const float* x, ActLayout l, const ActView& v, int t) {
  if (is_32_block(l))
    quantize_32(x + t * v.cols, l, v, t);
  else if (is_k(l))
    quantize_256(x + t * v.cols, l, v, t);
}

Kernel kernel_for(TensorType type) {
  const Isa isa = active_isa();
#if defined(__x86_64__)
  if (isa == Isa::avx512)
    if (Kernel k = detail::avx512_kernel(type); k.fn) return k;
  if (isa >= Isa::avx2)
    if (Kernel k = detail::avx2_kernel(type); k.fn) return k;
#else
  (void)isa;
#endif
  Kernel k = detail::scalar_kernel(type);
  if (!k.fn) throw std::invalid_argument("matmul: unsupported weight type " + std::string(tensor_type_name(type)));
  return k;
}

void validate(std::span<const WeightMatrix> ws, const float* x, int n_tokens, std::span<float* const> ys) {
  if (ws.size() != ys.size()) throw std::invalid_argument("matmul_many: one output per matrix is needed");
  if (n_tokens < 0) throw std::invalid_argument("matmul: negative token count");
  for (size_t i = 0; i < ws.size(); ++i) {
    const WeightMatrix& w = ws[i];
    if (w.cols != ws[0].cols) throw std::invalid_argument("matmul_many: matrices differ in cols");
    if (w.rows < 0 || w.cols < 0) throw std::invalid_argument("matmul: negative shape");
    const auto t = traits(w.type);
    if (w.cols % t.block_elems != 0)
      throw std::invalid_argument("matmul: cols " + std::to_string(w.cols) + " is not a multiple of " +
                                  std::string(t.name) + "'s block");
    if (n_tokens > 0 && w.rows > 0 && (w.data == nullptr || ys[i] == nullptr || x == nullptr))
      throw std::invalid_argument("matmul: null pointer");
  }
}

// Quantizes x into every layout the kernels need; splits tokens across the
// pool when there is enough of it to pay for waking the workers.
void prepare_activations(MatmulScratch::Impl& s, const std::array<bool, detail::kActLayouts>& needed,
                         const float* x, int64_t cols, int n_tokens, ThreadPool& pool) {
  int64_t bytes = 0;
  for (int l = 0; l < detail::kActLayouts; ++l)
    if (needed[l]) bytes += act_sizes(static_cast<ActLayout>(l), cols).total() * n_tokens;
  s.reserve(bytes);
  uint8_t* p = s.base;
  for (int l = 0; l < detail::kActLayouts; ++l) {
    if (!needed[l]) continue;
    const auto layout = static_cast<ActLayout>(l);
    place_view(layout, cols, n_tokens, p, s.views[l]);
    p += act_sizes(layout, cols).total() * n_tokens;
    if (layout == ActLayout::f32) {
      s.views[l].x = x;
      s.views[l].x_stride = cols;
    }
  }
  struct Ctx {
    MatmulScratch::Impl* s;
    const std::array<bool, detail::kActLayouts>* needed;
    const float* x;
  } ctx{&s, &needed, x};
  auto one = [&ctx](int64_t t) {
    for (int l = 0; l < detail::kActLayouts; ++l)
      if ((*ctx.needed)[l]) quantize_token(ctx.x, static_cast<ActLayout>(l), ctx.s->views[l], static_cast<int>(t));
  };
  if (n_tokens >= 2 && pool.size() > 1 && n_tokens * cols >= 16384) {
    pool.parallel_for(n_tokens, [&one](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) one(t);
    });
  } else {
    for (int t = 0; t < n_tokens; ++t) one(t);
  }
}

// Chunks of rows small enough to balance threads that run at different speeds
// (the machine may be shared) and large enough that taking one is cheap.
void plan_chunks(MatmulScratch::Impl& s, int threads) {
  int64_t total_bytes = 0;
  for (const auto& task : s.tasks) total_bytes += task.args.y_stride * task.args.row_bytes;
  const int64_t target = std::clamp<int64_t>(total_bytes / (threads * 8), 16 << 10, 256 << 10);
  s.total_chunks = 0;
  for (auto& task : s.tasks) {
    const int64_t rows = task.args.y_stride;
    task.chunk_rows = std::max<int64_t>(16, target / std::max<int64_t>(1, task.args.row_bytes) / 16 * 16);
    task.first_chunk = s.total_chunks;
    s.total_chunks += (rows + task.chunk_rows - 1) / task.chunk_rows;
  }
}

void run_chunks(MatmulScratch::Impl& s) {
  size_t i = 0;
  for (;;) {
    const int64_t c = s.next_chunk.fetch_add(1, std::memory_order_relaxed);
    if (c >= s.total_chunks) return;
    while (i + 1 < s.tasks.size() && s.tasks[i + 1].first_chunk <= c) ++i;
    while (s.tasks[i].first_chunk > c) --i;
    const auto& task = s.tasks[i];
    const int64_t r0 = (c - task.first_chunk) * task.chunk_rows;
    task.fn(task.args, r0, std::min(task.args.y_stride, r0 + task.chunk_rows));
  }
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int n_tokens, float* y, ThreadPool& pool, MatmulScratch& scratch) {
  float* const ys[] = {y};
  matmul_many(std::span<const WeightMatrix>(&w, 1), x, n_tokens, ys, pool, scratch);
}

void matmul_many(std::span<const WeightMatrix> ws, const float* x, int n_tokens, std::span<float* const> ys,
                 ThreadPool& pool, MatmulScratch& scratch) {
  validate(ws, x, n_tokens, ys);
  if (ws.empty() || n_tokens == 0) return;
  MatmulScratch::Impl& s = scratch.impl();
  std::array<Kernel, 16> kernels_small;
  std::array<bool, detail::kActLayouts> needed{};
  if (ws.size() > kernels_small.size()) throw std::invalid_argument("matmul_many: at most 16 matrices");
  for (size_t i = 0; i < ws.size(); ++i) {
    kernels_small[i] = kernel_for(ws[i].type);
    needed[static_cast<int>(kernels_small[i].layout)] = true;
  }
  const int64_t cols = ws[0].cols;
  prepare_activations(s, needed, x, cols, n_tokens, pool);

  s.tasks.clear();
  int64_t total_bytes = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (ws[i].rows == 0) continue;
    const KernelArgs args{ws[i].type, static_cast<const uint8_t*>(ws[i].data), row_bytes(ws[i].type, cols), cols,
                          &s.views[static_cast<int>(kernels_small[i].layout)], n_tokens, ys[i], ws[i].rows};
    s.tasks.push_back({args, kernels_small[i].fn, 0, 0});
    total_bytes += args.row_bytes * ws[i].rows;
  }
  if (s.tasks.empty()) return;
  // Below this much weight data a second thread costs more to wake than it saves.
  const bool parallel = pool.size() > 1 && total_bytes * n_tokens >= (64 << 10);
  plan_chunks(s, parallel ? pool.size() : 1);
  s.next_chunk.store(0, std::memory_order_relaxed);
  if (!parallel || s.total_chunks == 1) {
    run_chunks(s);
    return;
  }
  MatmulScratch::Impl* sp = &s;
  pool.run([sp](int) { run_chunks(*sp); });
}

}  // namespace troupe::cpu
