#include "engine/backend.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>

#include "engine/cpu/ops.h"
#include "engine/cpu_backend.h"
#include "engine/model_config.h"
#if TROUPE_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace troupe {

Device device_from_name(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  throw std::invalid_argument("unknown device '" + name + "' (cpu or cuda)");
}

DeviceWeights device_weights_from_name(const std::string& name) {
  if (name == "auto") return DeviceWeights::automatic;
  if (name == "bf16") return DeviceWeights::bf16;
  if (name == "int8") return DeviceWeights::int8;
  if (name == "int4") return DeviceWeights::int4;
  throw std::invalid_argument("unknown device weight format '" + name + "' (auto, bf16, int8 or int4)");
}

void Backend::copy_pages(std::span<const PageCopy> copies) {
  if (!copies.empty()) throw std::runtime_error(describe() + ": copying KV pages (parallel samples) is not supported");
}

void Backend::read_page(int32_t, std::span<uint16_t>, std::span<uint16_t>) const {
  throw std::runtime_error(describe() + ": moving KV pages to another tier is not supported");
}

void Backend::write_page(int32_t, std::span<const uint16_t>, std::span<const uint16_t>) {
  throw std::runtime_error(describe() + ": moving KV pages to another tier is not supported");
}

std::string Backend::read_page_bytes(int32_t page) const {
  const ModelConfig& c = config();
  const size_t n = static_cast<size_t>(c.n_layer * page_size() * c.kv_dim());
  std::vector<uint16_t> k(n), v(n);
  read_page(page, k, v);
  // KvCache's order: per layer, its K slots then its V slots.
  std::string out;
  out.reserve(4 * n);
  const size_t per_layer = n / static_cast<size_t>(c.n_layer);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    out.append(reinterpret_cast<const char*>(k.data() + l * per_layer), per_layer * 2);
    out.append(reinterpret_cast<const char*>(v.data() + l * per_layer), per_layer * 2);
  }
  return out;
}

void Backend::write_page_bytes(int32_t page, std::string_view bytes) {
  const ModelConfig& c = config();
  const size_t n = static_cast<size_t>(c.n_layer * page_size() * c.kv_dim());
  if (bytes.size() != 4 * n) throw std::invalid_argument("KV page of " + std::to_string(bytes.size()) + " bytes for this layout");
  std::vector<uint16_t> k(n), v(n);
  const size_t per_layer = n / static_cast<size_t>(c.n_layer);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    std::memcpy(k.data() + l * per_layer, bytes.data() + l * per_layer * 4, per_layer * 2);
    std::memcpy(v.data() + l * per_layer, bytes.data() + l * per_layer * 4 + per_layer * 2, per_layer * 2);
  }
  write_page(page, k, v);
}

void Backend::shift_kv(std::span<const KvShift> shifts) {
  if (!shifts.empty()) throw std::runtime_error(describe() + ": shifting KV (context shift) is not supported");
}

void Backend::evict_kv(const KvEviction&) {
  throw std::runtime_error(describe() + ": KV eviction (--kv-budget) is not supported");
}

void Backend::forward_choose(const Batch& batch, std::span<const TokenChoice> choices, std::vector<int32_t>& tokens) {
  Logits logits;
  forward(batch, logits);
  if (static_cast<int64_t>(choices.size()) < logits.rows())
    throw std::invalid_argument("forward_choose: fewer choices than rows wanting logits");
  tokens.resize(static_cast<size_t>(logits.rows()));
  for (int64_t r = 0; r < logits.rows(); ++r) tokens[r] = choose_token(logits.row(r), choices[r]);
}

std::unique_ptr<Backend> open_backend(const std::string& model_path, const BackendOptions& options) {
  if (options.device == Device::cuda) {
#if TROUPE_HAVE_CUDA
    return cuda::open_cuda_backend(model_path, options);
#else
    throw std::runtime_error("this build of troupe has no CUDA backend (configure with -DTROUPE_CUDA=ON)");
#endif
  }
  auto model = Model::load(model_path, std::max(1, options.threads), options.overrides);
  model->set_attention_precision(options.attention_precision);
  const int32_t pages = options.kv_pages > 0
                            ? options.kv_pages
                            : static_cast<int32_t>((options.context_tokens + options.page_size - 1) / options.page_size);
  const int32_t local = options.window_sequences > 0
                            ? std::min(pages, local_pages_for(options.window_sequences, static_cast<int32_t>(model->config().sliding_window),
                                                              options.window_chunk, options.page_size))
                            : 0;
  return std::make_unique<CpuBackend>(std::move(model), pages, options.page_size, options.kv_type, local);
}

bool cuda_available(std::string* why) {
#if TROUPE_HAVE_CUDA
  return cuda::device_available(why);
#else
  if (why) *why = "this build has no CUDA backend (TROUPE_CUDA=OFF)";
  return false;
#endif
}

int32_t choose_token(std::span<const float> logits, const TokenChoice& choice) {
  const int32_t n = static_cast<int32_t>(logits.size());
  if (n == 0) throw std::invalid_argument("choose_token: empty logits");
  if (choice.allowed) {
    std::vector<float> masked(logits.begin(), logits.end());
    for (int32_t t = 0; t < n; ++t)
      if (!((choice.allowed[t >> 6] >> (t & 63)) & 1)) masked[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
    TokenChoice plain = choice;
    plain.allowed = nullptr;
    return choose_token(masked, plain);
  }
  if (choice.temperature <= 0.0f)
    return static_cast<int32_t>(cpu::argmax(logits.data(), n));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  // Highest first; ties by lower id, as the device kernel orders them.
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  const int32_t k = choice.top_k > 0 ? std::min(choice.top_k, n) : n;
  const float mx = logits[ids[0]];
  std::vector<double> p(static_cast<size_t>(k));
  double total = 0;
  for (int32_t i = 0; i < k; ++i) total += p[i] = std::exp((logits[ids[i]] - mx) / choice.temperature);
  int32_t keep = k;
  if (choice.top_p < 1.0f) {
    double cum = 0;
    for (int32_t i = 0; i < k; ++i) {
      cum += p[i] / total;
      if (cum >= choice.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::mt19937_64 rng(choice.seed * 0x9E3779B97F4A7C15ull + choice.step);
  double kept = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  double u = std::uniform_real_distribution<double>(0.0, kept)(rng);
  for (int32_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u < 0) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace troupe
