#include "engine/cpu/matmul.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "engine/cpu/isa.h"
#include "engine/cpu/repack.h"

namespace troupe::cpu {

using detail::ActLayout;
using detail::ActView;
using detail::GemmFn;
using detail::Kernel;
using detail::KernelArgs;

namespace {

// A 64-byte aligned byte buffer that only grows.
struct AlignedBuffer {
  std::unique_ptr<uint8_t[]> storage;
  int64_t capacity = 0;
  uint8_t* base = nullptr;

  uint8_t* reserve(int64_t bytes) {
    if (bytes > capacity) {
      const int64_t grown = std::max(bytes, capacity + capacity / 2);
      storage = std::make_unique<uint8_t[]>(static_cast<size_t>(grown + 64));
      const auto addr = reinterpret_cast<uintptr_t>(storage.get());
      base = storage.get() + ((64 - addr % 64) % 64);
      capacity = grown;
    }
    return base;
  }
};

}  // namespace

// A matrix's kernel for a call: which function, the activation layout it
// reads, and the weights in the form it reads them.
struct Choice {
  GemmFn fn;
  ActLayout layout;
  bool packed;
  const void* data;
  int64_t row_bytes;
};

struct MatmulScratch::Impl {
  AlignedBuffer activations;
  AlignedBuffer work;  // per-thread areas of the packed kernels
  // Per distinct input of a call: its views in every layout, and which it needs.
  using Views = std::array<ActView, detail::kActLayouts>;
  using Needed = std::array<bool, detail::kActLayouts>;
  struct Input {
    const float* x;
    int64_t cols;
    int n_tokens;
  };
  std::vector<Input> inputs;
  std::vector<Views> views;
  std::vector<Needed> needed;
  std::vector<size_t> input_of;  // per job
  std::vector<Choice> choices;   // per job

  struct Task {
    KernelArgs args;
    GemmFn fn;
    int64_t chunk_rows;
    int64_t first_chunk;
  };
  std::vector<Task> tasks;
  int64_t total_chunks = 0;
  std::atomic<int64_t> next_chunk{0};
  // Inputs quantized inside the call's parallel region: (input, token) items,
  // and the threads that are done with their share of them.
  struct Prep {
    uint32_t input;
    int32_t token;
  };
  std::vector<Prep> preps;
  std::atomic<int> prepared{0};
};

MatmulScratch::MatmulScratch() : impl_(std::make_unique<Impl>()) {}
MatmulScratch::~MatmulScratch() = default;
int64_t MatmulScratch::reserved_bytes() const { return impl_->activations.capacity + impl_->work.capacity; }

namespace {

detail::QuantizeFn quantizer_for(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::avx512) return detail::quantize_avx512;
  if (isa == Isa::avx2) return detail::quantize_avx2;
#else
  (void)isa;
#endif
  return detail::quantize_scalar;
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

// From this many tokens the 16-token-lane kernels win over the per-row tiles.
constexpr int kPackedMinTokens = 12;

// Over lane-layout weights the 16-token-lane kernels pay for whole groups of
// 16, so they run only where at most a tenth of their lanes would be padding,
// and from 16 tokens only where a group of 16 costs less than the few-token
// kernels' two passes of 8. That holds (2 threads, both models' shapes, see
// docs/DECISIONS.md) for Q5_0 and Q4_0, whose fifth bits and nibbles the
// few-token kernels decode once per 8 tokens; Q4_K/Q6_K rows run 10-50 %
// faster on the few-token kernels at 16 tokens and break even at 32. Rows
// wider than 4,096 values joined them once the few-token kernels took such
// rows in column segments (lane_drivers.h; Zen 5 EPYC, 2 threads, 16
// tokens: Q4_K 1536x8960 388 GMAC/s against the 16-lane kernels' 293, Q6_K
// 314 against 253, Q4_K 896x4864 369 against 248). Q8_0 joined the first
// group on a Zen 5 EPYC (family 26, 2 vCPU, 2026-12-04): at 16 tokens the
// 16-lane kernels decoded gemma3-270m (its 262,144-row Q8_0 output) 13 %
// faster and qwen2.5-coder-0.5b 5 % faster.
bool lane_batch_pays(TensorType type, int n_tokens) {
  const int lanes = (n_tokens + 15) / 16 * 16;
  const bool from16 = type == TensorType::Q5_0 || type == TensorType::Q4_0 || type == TensorType::Q8_0;
  return n_tokens >= (from16 ? 16 : 32) && 10 * lanes <= 11 * n_tokens;
}

Choice choose(const WeightMatrix& w, int n_tokens) {
  Kernel k{};
#if defined(__x86_64__)
  if (w.lanes && active_isa() == Isa::avx512) k = detail::avx512_lane_kernel(w.type);
  if (w.lanes && active_isa() == Isa::avx2) k = detail::avx2_lane_kernel(w.type);
#endif
  const bool lanes = k.fn != nullptr;
  if (!lanes) k = kernel_for(w.type);
  const void* data = lanes ? w.lanes : w.data;
  const int64_t bytes = lanes ? lane_row_bytes(w.type, w.cols) : row_bytes(w.type, w.cols);
  const bool packed = k.packed_fn && (lanes ? lane_batch_pays(w.type, n_tokens) : n_tokens >= kPackedMinTokens);
  if (packed) return {k.packed_fn, k.packed_layout, true, data, bytes};
  return {k.fn, k.layout, false, data, bytes};
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

// Bytes of an input's layouts (placed at p, or only counted when p is null).
int64_t place_input(MatmulScratch::Impl::Views& views, const MatmulScratch::Impl::Needed& needed, const float* x,
                    int64_t cols, int n_tokens, uint8_t* p) {
  int64_t bytes = 0;
  for (int l = 0; l < detail::kActLayouts; ++l) {
    if (!needed[l]) continue;
    bytes += detail::place_activations(static_cast<ActLayout>(l), cols, n_tokens, p ? p + bytes : nullptr, views[l]);
    if (static_cast<ActLayout>(l) == ActLayout::f32) {
      views[l].x = x;
      views[l].x_stride = cols;
    }
  }
  return bytes;
}

// Quantizes token t of an input into every layout its kernels need.
void prepare_token_layouts(const MatmulScratch::Impl& s, size_t input, int t, detail::QuantizeFn quantize) {
  const MatmulScratch::Impl::Input& in = s.inputs[input];
  for (int l = 0; l < detail::kActLayouts; ++l)
    if (s.needed[input][l])
      detail::prepare_token(static_cast<ActLayout>(l), quantize, in.x, s.views[input][l], t, in.n_tokens);
}

// Inside the parallel region, before any chunk: each thread quantizes the
// (input, token) items it takes, then waits until every thread is through,
// since a chunk reads every token of its input. One region instead of a
// serial pass (or a region of its own per input) in front of it: a step of
// 16 streams quantizes the inputs of some 30 experts a layer, a few tokens
// each, and the second thread used to wait through all of them.
void prepare_in_region(MatmulScratch::Impl& s, int thread, int threads) {
  const detail::QuantizeFn quantize = quantizer_for(active_isa());
  // Contiguous shares: neighbouring tokens' scales share cache lines.
  const auto n = static_cast<int64_t>(s.preps.size());
  for (int64_t i = n * thread / threads; i < n * (thread + 1) / threads; ++i)
    prepare_token_layouts(s, s.preps[static_cast<size_t>(i)].input, s.preps[static_cast<size_t>(i)].token, quantize);
  s.prepared.fetch_add(1, std::memory_order_acq_rel);
  // A thread descheduled by another process can take a time slice to arrive:
  // after a short spin, yield the core.
  for (int spin = 0; s.prepared.load(std::memory_order_acquire) < threads; ++spin) {
    if (spin < 4000) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

// Chunks of rows: two per thread, up to 1 MB of weights. Enough of them that
// a thread slowed by a neighbour (the machine may be shared) hands work to
// the others, and as few as that allows: a thread that moves on to a chunk
// elsewhere in the matrix starts a new stream, which the hardware
// prefetchers pick up only after a few misses. At 8 chunks per thread (up
// to 256 KB) single-token decode ran 12-20 % slower (docs/DECISIONS.md).
void plan_chunks(MatmulScratch::Impl& s, int threads) {
  int64_t total_bytes = 0;
  for (const auto& task : s.tasks) total_bytes += task.args.y_stride * task.args.row_bytes;
  const int64_t target = std::clamp<int64_t>(total_bytes / (threads * 2), 16 << 10, 1 << 20);
  s.total_chunks = 0;
  for (auto& task : s.tasks) {
    const int64_t rows = task.args.y_stride;
    task.chunk_rows = std::max<int64_t>(16, target / std::max<int64_t>(1, task.args.row_bytes) / 16 * 16);
    task.first_chunk = s.total_chunks;
    s.total_chunks += (rows + task.chunk_rows - 1) / task.chunk_rows;
  }
}

void run_chunks(MatmulScratch::Impl& s, int thread) {
  size_t i = 0;
  for (;;) {
    const int64_t c = s.next_chunk.fetch_add(1, std::memory_order_relaxed);
    if (c >= s.total_chunks) return;
    while (i + 1 < s.tasks.size() && s.tasks[i + 1].first_chunk <= c) ++i;
    while (s.tasks[i].first_chunk > c) --i;
    const auto& task = s.tasks[i];
    const int64_t r0 = (c - task.first_chunk) * task.chunk_rows;
    task.fn(task.args, r0, std::min(task.args.y_stride, r0 + task.chunk_rows), thread);
  }
}

// The distinct input (pointer, width, tokens) a job reads, added when new.
size_t input_index(MatmulScratch::Impl& s, const MatmulJob& j) {
  size_t in = 0;
  while (in < s.inputs.size() &&
         !(s.inputs[in].x == j.x && s.inputs[in].cols == j.w.cols && s.inputs[in].n_tokens == j.n_tokens))
    ++in;
  if (in == s.inputs.size()) {
    s.inputs.push_back({j.x, j.w.cols, j.n_tokens});
    s.needed.emplace_back().fill(false);
  }
  return in;
}

// Kernel choices, and the distinct inputs with the layouts they need. The
// packed kernels' scratch rows are as wide as their widest input, padded
// to whole groups of 512: 0 when no job runs one.
int64_t choose_kernels(MatmulScratch::Impl& s, std::span<const MatmulJob> jobs) {
  s.choices.clear();
  bool any_packed = false;
  int64_t padded = 0;
  for (const MatmulJob& j : jobs) {
    validate(std::span<const WeightMatrix>(&j.w, 1), j.x, j.n_tokens, std::span<float* const>(&j.y, 1));
    s.choices.push_back(choose(j.w, j.n_tokens));
    const size_t in = input_index(s, j);
    s.input_of.push_back(in);
    if (j.n_tokens == 0 || j.w.rows == 0) continue;
    s.needed[in][static_cast<int>(s.choices.back().layout)] = true;
    if (s.choices.back().packed) {
      any_packed = true;
      padded = std::max(padded, (j.w.cols + 511) / 512 * 512);
    }
  }
  // Codes of kPackedRows rows, then per 16 values of each: scale, bias, min
  // (rows from lane-layout weights take whole groups of 512 values).
  return any_packed ? (detail::kPackedRows * (padded + 12 * (padded / 16)) + 63) / 64 * 64 : 0;
}

// Every input's layouts placed in one buffer, and the (input, token) items
// that quantize them.
void place_inputs(MatmulScratch::Impl& s) {
  if (s.views.size() < s.inputs.size()) s.views.resize(s.inputs.size());
  int64_t bytes = 0;
  for (size_t i = 0; i < s.inputs.size(); ++i)
    bytes += place_input(s.views[i], s.needed[i], s.inputs[i].x, s.inputs[i].cols, s.inputs[i].n_tokens, nullptr);
  uint8_t* p = s.activations.reserve(bytes);
  s.preps.clear();
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    p += place_input(s.views[i], s.needed[i], s.inputs[i].x, s.inputs[i].cols, s.inputs[i].n_tokens, p);
    if (std::find(s.needed[i].begin(), s.needed[i].end(), true) == s.needed[i].end()) continue;
    for (int t = 0; t < s.inputs[i].n_tokens; ++t) s.preps.push_back({static_cast<uint32_t>(i), t});
  }
}

// A task per job with work to do; returns the bytes of weights times tokens
// they read in all.
int64_t plan_tasks(MatmulScratch::Impl& s, std::span<const MatmulJob> jobs, uint8_t* work, int64_t work_stride) {
  int64_t total_work = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const MatmulJob& j = jobs[i];
    if (j.w.rows == 0 || j.n_tokens == 0) continue;
    const Choice& choice = s.choices[i];
    KernelArgs args{};
    args.type = j.w.type;
    args.w = static_cast<const uint8_t*>(choice.data);
    args.row_bytes = choice.row_bytes;
    args.cols = j.w.cols;
    args.act = &s.views[s.input_of[i]][static_cast<int>(choice.layout)];
    args.n_tokens = j.n_tokens;
    args.y = j.y;
    args.y_stride = j.w.rows;
    args.work = work;
    args.work_stride = work_stride;
    s.tasks.push_back({args, choice.fn, 0, 0});
    total_work += args.row_bytes * j.w.rows * j.n_tokens;
  }
  return total_work;
}

void run_tasks(MatmulScratch::Impl& s, ThreadPool& pool, int64_t total_work) {
  // Below this much weight data a second thread costs more to wake than it saves.
  const bool parallel = pool.size() > 1 && total_work >= (64 << 10);
  plan_chunks(s, parallel ? pool.size() : 1);
  s.next_chunk.store(0, std::memory_order_relaxed);
  // A small matrix can still have a long input (a prefill's tokens): from
  // 16K values, quantizing it is worth a region of its own.
  int64_t prep_values = 0;
  for (const auto& prep : s.preps) prep_values += s.inputs[prep.input].cols;
  if (pool.size() == 1 || (!(parallel && s.total_chunks > 1) && prep_values < 16384)) {
    const detail::QuantizeFn quantize = quantizer_for(active_isa());
    for (const auto& prep : s.preps) prepare_token_layouts(s, prep.input, prep.token, quantize);
    run_chunks(s, 0);
    return;
  }
  s.prepared.store(0, std::memory_order_relaxed);
  MatmulScratch::Impl* sp = &s;
  const int threads = pool.size();
  pool.run([sp, threads](int thread) {
    prepare_in_region(*sp, thread, threads);
    run_chunks(*sp, thread);
  });
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int n_tokens, float* y, ThreadPool& pool, MatmulScratch& scratch) {
  float* const ys[] = {y};
  matmul_many(std::span<const WeightMatrix>(&w, 1), x, n_tokens, ys, pool, scratch);
}

void matmul_many(std::span<const WeightMatrix> ws, const float* x, int n_tokens, std::span<float* const> ys,
                 ThreadPool& pool, MatmulScratch& scratch) {
  validate(ws, x, n_tokens, ys);
  if (ws.size() > 16) throw std::invalid_argument("matmul_many: at most 16 matrices");
  std::array<MatmulJob, 16> jobs;
  for (size_t i = 0; i < ws.size(); ++i) jobs[i] = {ws[i], x, n_tokens, ys[i]};
  matmul_jobs(std::span<const MatmulJob>(jobs.data(), ws.size()), pool, scratch);
}

void matmul_jobs(std::span<const MatmulJob> jobs, ThreadPool& pool, MatmulScratch& scratch) {
  MatmulScratch::Impl& s = scratch.impl();
  s.inputs.clear();
  s.needed.clear();
  s.input_of.clear();
  s.tasks.clear();
  const int64_t work_stride = choose_kernels(s, jobs);
  place_inputs(s);
  uint8_t* work = s.work.reserve(work_stride * pool.size());
  const int64_t total_work = plan_tasks(s, jobs, work, work_stride);
  if (s.tasks.empty()) return;
  run_tasks(s, pool, total_work);
}

}  // namespace troupe::cpu
