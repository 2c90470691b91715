// The CUDA backend: weights and KV pages in device memory, a forward pass of
// kernel launches on one stream (captured as CUDA graphs for decode steps),
// logits or chosen token ids back to the host.
//
// Per layer (n rows):
//   qkv = W_qkv · rmsnorm(x)          gemv (fused norm) or rmsnorm→bf16 + cuBLAS
//   qkv_finish: bias, RoPE, K/V → paged cache
//   attn = paged attention (split-K for long contexts)
//   x += W_o · attn                   residual fused (GEMV accumulate / cuBLAS beta = 1)
//   g|u = W_gate_up · rmsnorm(x)
//   x += W_down · (silu(g) * u)       SwiGLU fused into the GEMV's load
#include "engine/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/weight_upload.h"
#include "engine/gguf_file.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/page_pool.h"

namespace troupe::cuda {
namespace {

void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error in ") + what + ": " + cublasGetStatusString(st));
}

int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// Decode steps are captured as graphs for batches padded up to these sizes.
constexpr int kGraphBuckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
constexpr int kMaxGraphRows = 256;

int graph_bucket(int n) {
  for (int b : kGraphBuckets)
    if (n <= b) return b;
  return 0;
}

bool graphs_enabled() {
  const char* e = std::getenv("TROUPE_CUDA_GRAPHS");
  return !(e && std::string(e) == "0");
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const std::string& path, const BackendOptions& o);
  ~CudaBackend() override;

  const ModelConfig& config() const override { return config_; }
  const GgufFile& file() const override { return file_; }
  PagePool& pages() override { return pages_; }
  int32_t page_size() const override { return page_size_; }
  std::string describe() const override { return description_; }
  void forward(const Batch& batch, Logits& out) override;
  void forward_choose(const Batch& batch, std::span<const TokenChoice> choices, std::vector<int32_t>& tokens) override;

 private:
  // Where each input array lives inside the staging and device input buffers.
  struct InputLayout {
    int64_t token, pos, kv_slot, table_off, logit_rows, temperature, top_k, top_p, seed, step, mask_row, tables, total;
  };
  struct Step {
    int rows = 0;         // rows run (padded to a graph bucket when graphed)
    int real_rows = 0;    // rows of the batch
    int wanted = 0;       // rows whose logits are computed (padded likewise)
    int real_wanted = 0;
    int splits = 1;
    bool graphed = false;
  };

  // The constructor's steps, in order.
  void refuse_unsupported(const BackendOptions& o) const;
  void open_stream();
  void upload_model(const BackendOptions& o);
  int64_t largest_quantized() const;
  void allocate_activations(const BackendOptions& o);
  void allocate_kv_cache(const BackendOptions& o);
  std::string describe_device() const;
  void allocate_inputs(int64_t table_entries);
  Step stage(const Batch& batch, std::span<const TokenChoice> choices, bool choose);
  void stage_choices(const Step& st, std::span<const TokenChoice> choices);
  void size_partials(Step& st, int32_t max_len);
  void upload(const Step& st, int32_t table_entries, bool choose);
  void run(const Step& step, bool choose);
  void enqueue(const Step& step, bool choose);
  void enqueue_output(int first, int count, bool choose);
  void linear(const DeviceMatrix& w, const float* x, int n, const GemvInput& in, float* y, bool accumulate);
  void drop_graphs();
  RowInputs row_inputs() const;

  GgufFile file_;
  ModelConfig config_;
  UploadedWeights w_;
  int32_t page_size_;
  int32_t kv_pages_ = 0;  // usable pages; one more (the last) takes padding rows' K/V
  PagePool pages_{1};
  std::string description_;

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceBuffer cublas_workspace_;
  DeviceBuffer k_cache_, v_cache_, inv_freq_;
  int64_t layer_cache_values_ = 0;  // halves per layer in k_cache_ / v_cache_

  int64_t cap_rows_ = 0, cap_logits_ = 0, cap_tables_ = 0;
  DeviceBuffer x_, qkv_, attn_, ff_, xb_, wtmp_, gathered_, logits_, partial_acc_, partial_ml_, out_tokens_;
  DeviceBuffer inputs_;
  PinnedBuffer staging_, host_tokens_;
  // Constrained decoding's token masks, one row of mask_words_ per choosing
  // row that has one (ChoiceInputs::masks).
  DeviceBuffer masks_;
  PinnedBuffer host_masks_;
  int64_t mask_words_ = 0;
  int masked_rows_ = 0;  // staged this step
  InputLayout layout_{};
  int64_t cap_partials_ = 0;  // (row, head, split) entries the partial buffers hold

  std::map<std::tuple<int, int, bool>, cudaGraphExec_t> graphs_;
};

CudaBackend::CudaBackend(const std::string& path, const BackendOptions& o)
    : file_(GgufFile::open(path)), config_(read_model_config(file_, o.overrides)), page_size_(o.page_size) {
  refuse_unsupported(o);
  open_stream();
  upload_model(o);
  allocate_activations(o);
  allocate_kv_cache(o);
  // Uploads and memsets ran on the legacy stream, which stream_ (non-blocking)
  // does not wait for: finish them before the first step.
  TROUPE_CUDA_CHECK(cudaDeviceSynchronize());
  description_ = describe_device();
}

// What this backend does not run yet, each pointed at the CPU backend.
void CudaBackend::refuse_unsupported(const BackendOptions& o) const {
  if (o.kv_type != KvType::f16)
    throw std::runtime_error(std::string("the CUDA backend keeps its KV cache in f16; --kv-type ") + kv_type_name(o.kv_type) +
                             " runs on the CPU backend");
  if (o.attention_precision != AttentionPrecision::fp32)
    throw std::runtime_error(std::string("the CUDA backend's attention is fp32 over its f16 cache; --attention-precision ") +
                             attention_precision_name(o.attention_precision) + " runs on the CPU backend");
  if (rope_magnitude(config_.rope_scaling) != 1.0f)
    throw std::runtime_error(std::string("the CUDA backend does not run RoPE scaling ") +
                             rope_scaling_name(config_.rope_scaling.type) + " yet (its magnitude correction); use the CPU backend");
  if (config_.architecture != "qwen2" && config_.architecture != "llama")
    throw std::runtime_error("the CUDA backend runs qwen2 and llama; " + config_.architecture +
                             " (sliding windows or ALiBi, its norms, GELU, experts) runs on the CPU backend");
  if (config_.moe())
    throw std::runtime_error("the CUDA backend runs dense models; this mixture of experts (" +
                             std::to_string(config_.n_expert) + " experts) runs on the CPU backend");
  std::string why;
  if (!device_available(&why)) throw std::runtime_error("CUDA backend: " + why);
  if (config_.head_dim != 64 && config_.head_dim != 128)
    throw std::runtime_error("CUDA backend: head_dim " + std::to_string(config_.head_dim) + " is not supported (64 or 128)");
  if (page_size_ <= 0) throw std::invalid_argument("KV page size must be positive");
}

void CudaBackend::open_stream() {
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  check_cublas(cublasCreate(&cublas_), "cublasCreate");
  check_cublas(cublasSetStream(cublas_, stream_), "cublasSetStream");
  // A fixed workspace keeps cuBLAS from allocating, which graph capture forbids.
  cublas_workspace_.ensure(64 << 20);
  check_cublas(cublasSetWorkspace(cublas_, cublas_workspace_.get(), cublas_workspace_.bytes()), "cublasSetWorkspace");
}

// The weights, and RoPE's frequencies (as cpu::Rope's).
void CudaBackend::upload_model(const BackendOptions& o) {
  {
    const ModelWeights host = bind_weights(file_, config_);
    w_ = upload_weights(host, config_, o.weights, std::max(1, o.threads));
  }
  const ModelConfig& c = config_;
  const std::vector<float> inv = rope_frequencies(c.head_dim, c.rope_freq_base, c.rope_scaling);
  inv_freq_.ensure(inv.size() * sizeof(float));
  TROUPE_CUDA_CHECK(cudaMemcpy(inv_freq_.get(), inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));
}

// Values in the largest matrix not kept in bf16 (dequantized into wtmp_ for cuBLAS).
int64_t CudaBackend::largest_quantized() const {
  int64_t largest = 0;
  auto note = [&](const DeviceMatrix& m) {
    if (m.format != DeviceFormat::bf16) largest = std::max(largest, m.rows * m.cols);
  };
  note(w_.output);
  for (const auto& l : w_.layers) note(l.qkv), note(l.wo), note(l.gate_up), note(l.down);
  return largest;
}

// Activations for the largest batch, before the KV pages take what is left.
void CudaBackend::allocate_activations(const BackendOptions& o) {
  const ModelConfig& c = config_;
  cap_rows_ = std::max<int64_t>(o.max_batch_tokens, kMaxGraphRows);
  if (cap_rows_ > 65535)  // rows are gridDim.y of the attention kernel
    throw std::invalid_argument("max_batch_tokens above 65535 is not supported by the CUDA backend");
  cap_logits_ = std::min<int64_t>(cap_rows_, 512);
  const int64_t qkv_w = c.q_dim() + 2 * c.kv_dim();
  x_.ensure(cap_rows_ * c.n_embd * 4);
  qkv_.ensure(cap_rows_ * qkv_w * 4);
  attn_.ensure(cap_rows_ * c.q_dim() * 4);
  ff_.ensure(cap_rows_ * 2 * c.n_ff * 4);
  xb_.ensure(cap_rows_ * std::max({c.n_embd, c.q_dim(), c.n_ff}) * 2);
  if (const int64_t largest = largest_quantized()) wtmp_.ensure(largest * 2);
  gathered_.ensure(cap_logits_ * c.n_embd * 4);
  logits_.ensure(cap_logits_ * c.n_vocab * 4);
  out_tokens_.ensure(cap_logits_ * 4);
  host_tokens_.ensure(cap_logits_ * 4);
  mask_words_ = (static_cast<int64_t>(c.n_vocab) + 63) / 64;
}

// The pages asked for, or as many as the free memory's fraction holds.
void CudaBackend::allocate_kv_cache(const BackendOptions& o) {
  const ModelConfig& c = config_;
  layer_cache_values_ = 0;
  const int64_t page_bytes = c.n_layer * page_size_ * c.kv_dim() * 2 * 2;
  if (o.kv_pages > 0) {
    kv_pages_ = o.kv_pages;
  } else {
    size_t free_b = 0, total_b = 0;
    TROUPE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const double budget = static_cast<double>(free_b) * std::clamp(o.memory_fraction, 0.01, 0.98) - (256 << 20);
    kv_pages_ = static_cast<int32_t>(std::clamp(budget / static_cast<double>(page_bytes), 1.0, 4.0e6));
  }
  layer_cache_values_ = static_cast<int64_t>(kv_pages_ + 1) * page_size_ * c.kv_dim();
  k_cache_.ensure(c.n_layer * layer_cache_values_ * 2);
  v_cache_.ensure(c.n_layer * layer_cache_values_ * 2);
  // Never-written K/V must not be NaN bits: padding rows read the spare page.
  TROUPE_CUDA_CHECK(cudaMemset(k_cache_.get(), 0, k_cache_.bytes()));
  TROUPE_CUDA_CHECK(cudaMemset(v_cache_.get(), 0, v_cache_.bytes()));
  pages_ = PagePool(kv_pages_);
  allocate_inputs(static_cast<int64_t>(kv_pages_) + 1024);
}

std::string CudaBackend::describe_device() const {
  cudaDeviceProp prop{};
  int dev = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&dev));
  TROUPE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  return std::string("cuda: ") + prop.name + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
         "), weights " + device_format_name(w_.layers.empty() ? w_.output.format : w_.layers[0].gate_up.format) + " " +
         std::to_string(w_.bytes >> 20) + " MiB, KV " + std::to_string(kv_pages_) + " pages x " +
         std::to_string(page_size_) + " tokens (" + std::to_string((k_cache_.bytes() + v_cache_.bytes()) >> 20) +
         " MiB)";
}

CudaBackend::~CudaBackend() {
  drop_graphs();
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::drop_graphs() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

void CudaBackend::allocate_inputs(int64_t table_entries) {
  InputLayout& l = layout_;
  int64_t off = 0;
  auto take = [&](int64_t count, int64_t size) {
    const int64_t at = off;
    off = align_up(off + count * size, 256);
    return at;
  };
  l.token = take(cap_rows_, 4);
  l.pos = take(cap_rows_, 4);
  l.kv_slot = take(cap_rows_, 4);
  l.table_off = take(cap_rows_, 4);
  l.logit_rows = take(cap_rows_, 4);
  l.temperature = take(cap_rows_, 4);
  l.top_k = take(cap_rows_, 4);
  l.top_p = take(cap_rows_, 4);
  l.seed = take(cap_rows_, 8);
  l.step = take(cap_rows_, 8);
  l.mask_row = take(cap_rows_, 4);
  l.tables = take(table_entries, 4);
  l.total = off;
  cap_tables_ = table_entries;
  if (inputs_.ensure(static_cast<size_t>(l.total))) drop_graphs();
  staging_.ensure(static_cast<size_t>(l.total));
}

RowInputs CudaBackend::row_inputs() const {
  const auto* base = inputs_.as<uint8_t>();
  return {reinterpret_cast<const int32_t*>(base + layout_.token), reinterpret_cast<const int32_t*>(base + layout_.pos),
          reinterpret_cast<const int32_t*>(base + layout_.kv_slot),
          reinterpret_cast<const int32_t*>(base + layout_.table_off),
          reinterpret_cast<const int32_t*>(base + layout_.tables)};
}

CudaBackend::Step CudaBackend::stage(const Batch& batch, std::span<const TokenChoice> choices, bool choose) {
  Step st;
  const int64_t n_tokens = batch.token_count();
  if (n_tokens > cap_rows_)
    throw std::invalid_argument("batch of " + std::to_string(n_tokens) + " tokens exceeds the CUDA backend's limit of " +
                                std::to_string(cap_rows_) + " (max_batch_tokens)");
  int64_t table_entries = 1;  // the spare page's one-entry table, for padding rows
  bool decode_like = true;
  for (const auto& s : batch.sequences) {
    table_entries += static_cast<int64_t>(s.block_table.size());
    decode_like = decode_like && s.tokens.size() == 1 && s.logits == LogitsWanted::last;
  }
  if (table_entries > cap_tables_) allocate_inputs(table_entries * 2);
  st.real_rows = static_cast<int>(n_tokens);
  st.graphed = decode_like && graphs_enabled() && n_tokens > 0 && n_tokens <= kMaxGraphRows;
  st.rows = st.graphed ? graph_bucket(st.real_rows) : st.real_rows;

  uint8_t* h = staging_.as<uint8_t>();
  auto* token = reinterpret_cast<int32_t*>(h + layout_.token);
  auto* pos = reinterpret_cast<int32_t*>(h + layout_.pos);
  auto* kv_slot = reinterpret_cast<int32_t*>(h + layout_.kv_slot);
  auto* table_off = reinterpret_cast<int32_t*>(h + layout_.table_off);
  auto* logit_rows = reinterpret_cast<int32_t*>(h + layout_.logit_rows);
  auto* tables = reinterpret_cast<int32_t*>(h + layout_.tables);
  int32_t r = 0, t_off = 0, wanted = 0, max_len = 1;
  for (size_t si = 0; si < batch.sequences.size(); ++si) {
    const BatchSequence& seq = batch.sequences[si];
    const int64_t end = seq.start_pos + static_cast<int64_t>(seq.tokens.size());
    if (seq.start_pos < 0) throw std::invalid_argument("negative start position");
    if (seq.rope_offset != 0 || seq.queries) throw std::invalid_argument("the CUDA backend does not evict KV (--kv-budget)");
    if (end > static_cast<int64_t>(seq.block_table.size()) * page_size_)
      throw std::invalid_argument("block table of sequence " + std::to_string(si) + " does not cover position " +
                                  std::to_string(end - 1));
    for (int32_t p : seq.block_table)
      if (p < 0 || p >= kv_pages_) throw std::out_of_range("KV page " + std::to_string(p) + " out of range");
    std::copy(seq.block_table.begin(), seq.block_table.end(), tables + t_off);
    const int32_t len = static_cast<int32_t>(seq.tokens.size());
    for (int32_t i = 0; i < len; ++i, ++r) {
      const int32_t tok = seq.tokens[i];
      if (tok < 0 || tok >= config_.n_vocab) throw std::out_of_range("token id " + std::to_string(tok) + " out of range");
      const int32_t p = seq.start_pos + i;
      token[r] = tok;
      pos[r] = p;
      kv_slot[r] = seq.block_table[p / page_size_] * page_size_ + p % page_size_;
      table_off[r] = t_off;
      if (seq.logits == LogitsWanted::all || (seq.logits == LogitsWanted::last && i == len - 1)) logit_rows[wanted++] = r;
    }
    max_len = std::max<int32_t>(max_len, static_cast<int32_t>(end));
    t_off += static_cast<int32_t>(seq.block_table.size());
  }
  tables[t_off] = kv_pages_;  // the spare page
  st.real_wanted = wanted;
  for (; r < st.rows; ++r) {  // padding rows: token 0 at position 0 of the spare page
    token[r] = 0;
    pos[r] = 0;
    kv_slot[r] = kv_pages_ * page_size_;
    table_off[r] = t_off;
    logit_rows[wanted++] = r;
  }
  st.wanted = wanted;
  if (choose) stage_choices(st, choices);
  size_partials(st, max_len);
  upload(st, t_off + 1, choose);
  return st;
}

// Each wanting row's sampling settings (padding rows: greedy).
void CudaBackend::stage_choices(const Step& st, std::span<const TokenChoice> choices) {
  if (static_cast<int64_t>(choices.size()) < st.real_wanted)
    throw std::invalid_argument("forward_choose: fewer choices than rows wanting logits");
  uint8_t* h = staging_.as<uint8_t>();
  auto* temp = reinterpret_cast<float*>(h + layout_.temperature);
  auto* top_k = reinterpret_cast<int32_t*>(h + layout_.top_k);
  auto* top_p = reinterpret_cast<float*>(h + layout_.top_p);
  auto* seed = reinterpret_cast<uint64_t*>(h + layout_.seed);
  auto* stepv = reinterpret_cast<uint64_t*>(h + layout_.step);
  auto* mask_row = reinterpret_cast<int32_t*>(h + layout_.mask_row);
  masked_rows_ = 0;
  for (int i = 0; i < st.real_wanted; ++i) masked_rows_ += choices[i].allowed != nullptr;
  if (masked_rows_ > 0) {
    const auto bytes = static_cast<size_t>(masked_rows_ * mask_words_ * 8);
    if (masks_.ensure(bytes)) drop_graphs();  // graphs hold the buffer's address
    host_masks_.ensure(bytes);
  }
  int next_mask = 0;
  for (int i = 0; i < st.wanted; ++i) {
    const TokenChoice c = i < st.real_wanted ? choices[i] : TokenChoice{};
    temp[i] = c.temperature;
    top_k[i] = c.top_k;
    top_p[i] = c.top_p;
    seed[i] = c.seed;
    stepv[i] = c.step;
    mask_row[i] = c.allowed ? next_mask : -1;
    if (c.allowed)
      std::memcpy(host_masks_.as<uint64_t>() + next_mask++ * mask_words_, c.allowed, static_cast<size_t>(mask_words_ * 8));
  }
}

// Split-K attention: how many splits the longest sequence needs, and room for their partials.
void CudaBackend::size_partials(Step& st, int32_t max_len) {
  st.splits = (max_len + kAttentionSplit - 1) / kAttentionSplit;
  if (st.graphed) st.splits = 1 << static_cast<int>(std::ceil(std::log2(st.splits)));  // fewer distinct graphs
  const int64_t partials = st.splits > 1 ? static_cast<int64_t>(st.rows) * config_.n_head * st.splits : 0;
  if (partials > cap_partials_) {
    partial_acc_.ensure(partials * config_.head_dim * 4);
    partial_ml_.ensure(partials * 2 * 4);
    cap_partials_ = partials;
    drop_graphs();
  }
}

// Copies the used part of each staged array to the device.
void CudaBackend::upload(const Step& st, int32_t table_entries, bool choose) {
  const uint8_t* h = staging_.as<uint8_t>();
  auto copy = [&](int64_t off, int64_t bytes) {
    if (bytes > 0)
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(inputs_.as<uint8_t>() + off, h + off, bytes, cudaMemcpyHostToDevice, stream_));
  };
  for (int64_t off : {layout_.token, layout_.pos, layout_.kv_slot, layout_.table_off}) copy(off, st.rows * 4);
  copy(layout_.logit_rows, st.wanted * 4);
  copy(layout_.tables, int64_t{table_entries} * 4);
  if (choose) {
    for (int64_t off : {layout_.temperature, layout_.top_k, layout_.top_p}) copy(off, st.wanted * 4);
    copy(layout_.seed, st.wanted * 8);
    copy(layout_.step, st.wanted * 8);
    copy(layout_.mask_row, st.wanted * 4);
    if (masked_rows_ > 0)
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(masks_.as<uint64_t>(), host_masks_.as<uint64_t>(),
                                        static_cast<size_t>(masked_rows_ * mask_words_ * 8), cudaMemcpyHostToDevice, stream_));
  }
}

void CudaBackend::linear(const DeviceMatrix& w, const float* x, int n, const GemvInput& in, float* y, bool accumulate) {
  const bool small = n <= kGemvTokens || (w.format != DeviceFormat::bf16 && n <= 4 * kGemvTokens);
  if (small) {
    gemv(w, x, n, in, y, accumulate, stream_);
    return;
  }
  auto* xb = xb_.as<uint16_t>();
  switch (in.kind) {
    case GemvInput::plain: float_to_bf16(x, static_cast<int64_t>(n) * w.cols, xb, stream_); break;
    case GemvInput::rmsnorm: rmsnorm_to_bf16(x, in.gain, n, w.cols, in.eps, xb, stream_); break;
    case GemvInput::swiglu: swiglu_to_bf16(x, n, w.cols, xb, stream_); break;
  }
  const void* wb = w.q;
  if (w.format != DeviceFormat::bf16) {
    dequantize_to_bf16(w, wtmp_.as<uint16_t>(), stream_);
    wb = wtmp_.get();
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  check_cublas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), n, static_cast<int>(w.cols),
                            &alpha, wb, CUDA_R_16BF, static_cast<int>(w.cols), xb, CUDA_R_16BF,
                            static_cast<int>(w.cols), &beta, y, CUDA_R_32F, static_cast<int>(w.rows),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

void CudaBackend::enqueue(const Step& st, bool choose) {
  const auto& c = config_;
  const int n = st.rows;
  const RowInputs rows = row_inputs();
  const AttentionDims dims{static_cast<int>(c.n_head), static_cast<int>(c.n_head_kv), static_cast<int>(c.head_dim),
                           page_size_};
  const int64_t qkv_w = c.q_dim() + 2 * c.kv_dim();
  embed_rows(w_.token_embd, rows.token, n, x_.as<float>(), stream_);
  for (size_t li = 0; li < w_.layers.size(); ++li) {
    const DeviceLayer& l = w_.layers[li];
    auto* k = k_cache_.as<uint16_t>() + li * layer_cache_values_;
    auto* v = v_cache_.as<uint16_t>() + li * layer_cache_values_;
    linear(l.qkv, x_.as<float>(), n, {GemvInput::rmsnorm, l.attn_norm, c.rms_eps, c.n_embd}, qkv_.as<float>(), false);
    qkv_finish(qkv_.as<float>(), l.qkv_bias, n, dims, inv_freq_.as<float>(), 1.0f,
               c.rope_order == RopeOrder::halves, rows, k, v, stream_);
    attention(qkv_.as<float>(), qkv_w, n, dims, rows, k, v, st.splits, partial_acc_.as<float>(), partial_ml_.as<float>(),
              attn_.as<float>(), stream_);
    linear(l.wo, attn_.as<float>(), n, {GemvInput::plain, nullptr, 0, c.q_dim()}, x_.as<float>(), true);
    linear(l.gate_up, x_.as<float>(), n, {GemvInput::rmsnorm, l.ffn_norm, c.rms_eps, c.n_embd}, ff_.as<float>(), false);
    linear(l.down, ff_.as<float>(), n, {GemvInput::swiglu, nullptr, 0, 2 * c.n_ff}, x_.as<float>(), true);
  }
  for (int first = 0; first < st.wanted; first += static_cast<int>(cap_logits_))
    enqueue_output(first, std::min<int>(st.wanted - first, static_cast<int>(cap_logits_)), choose);
}

void CudaBackend::enqueue_output(int first, int count, bool choose) {
  const auto& c = config_;
  const auto* base = inputs_.as<uint8_t>();
  gather_rows(x_.as<float>(), reinterpret_cast<const int32_t*>(base + layout_.logit_rows) + first, count, c.n_embd,
              gathered_.as<float>(), stream_);
  linear(w_.output, gathered_.as<float>(), count, {GemvInput::rmsnorm, w_.output_norm, c.rms_eps, c.n_embd},
         logits_.as<float>(), false);
  if (choose) {
    const ChoiceInputs ci{reinterpret_cast<const float*>(base + layout_.temperature) + first,
                          reinterpret_cast<const int32_t*>(base + layout_.top_k) + first,
                          reinterpret_cast<const float*>(base + layout_.top_p) + first,
                          reinterpret_cast<const uint64_t*>(base + layout_.seed) + first,
                          reinterpret_cast<const uint64_t*>(base + layout_.step) + first,
                          reinterpret_cast<const int32_t*>(base + layout_.mask_row) + first,
                          masks_.as<uint64_t>(), mask_words_};
    choose_tokens(logits_.as<float>(), count, c.n_vocab, ci, out_tokens_.as<int32_t>() + first, stream_);
  }
}

void CudaBackend::run(const Step& st, bool choose) {
  if (!st.graphed) {
    enqueue(st, choose);
    return;
  }
  const auto key = std::make_tuple(st.rows, st.splits, choose);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    cudaGraph_t graph = nullptr;
    TROUPE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue(st, choose);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    TROUPE_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    TROUPE_CUDA_CHECK(e);
    it = graphs_.emplace(key, exec).first;
  }
  TROUPE_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
}

void CudaBackend::forward(const Batch& batch, Logits& out) {
  const Step st = stage(batch, {}, false);
  out.n_vocab = config_.n_vocab;
  out.values.resize(static_cast<size_t>(st.real_wanted) * config_.n_vocab);
  if (st.wanted <= cap_logits_) {
    run(st, false);
    if (st.real_wanted)
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(out.values.data(), logits_.get(), out.values.size() * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream_));
  } else {  // more logit rows than the buffer holds: layers once, output in chunks
    Step body = st;
    body.wanted = 0;
    enqueue(body, false);
    for (int first = 0; first < st.real_wanted; first += static_cast<int>(cap_logits_)) {
      const int count = std::min<int>(st.real_wanted - first, static_cast<int>(cap_logits_));
      enqueue_output(first, count, false);
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(out.values.data() + static_cast<int64_t>(first) * config_.n_vocab,
                                        logits_.get(), static_cast<size_t>(count) * config_.n_vocab * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream_));
    }
  }
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::forward_choose(const Batch& batch, std::span<const TokenChoice> choices, std::vector<int32_t>& tokens) {
  const Step st = stage(batch, choices, true);
  if (st.wanted > cap_logits_) throw std::invalid_argument("forward_choose: more rows want tokens than one step returns");
  run(st, true);
  tokens.resize(static_cast<size_t>(st.real_wanted));
  if (st.real_wanted)
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(host_tokens_.get(), out_tokens_.get(), st.real_wanted * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, stream_));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::memcpy(tokens.data(), host_tokens_.get(), tokens.size() * sizeof(int32_t));
}

}  // namespace

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 8) {
    if (why) *why = std::string("CUDA device ") + prop.name + " is older than compute capability 8.0 (bf16)";
    return false;
  }
  return true;
}

std::unique_ptr<Backend> open_cuda_backend(const std::string& model_path, const BackendOptions& options) {
  return std::make_unique<CudaBackend>(model_path, options);
}

}  // namespace troupe::cuda
