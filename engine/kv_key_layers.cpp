#include "engine/kv_key_layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "engine/gguf_file.h"
#include "engine/model_config.h"
#include "engine/rope_scaling.h"

namespace troupe {

std::vector<int32_t> wide_key_layers(const GgufFile& f, const ModelConfig& c) {
  const std::vector<float> omega = rope_frequencies(c.head_dim, c.rope_freq_base, c.rope_scaling);
  const int64_t half = c.head_dim / 2;
  std::vector<std::pair<double, int32_t>> rms;  // (bias rms over the turning pairs, layer)
  for (int64_t layer = 0; layer < c.n_layer; ++layer) {
    const GgufTensorInfo* t = f.find_tensor("blk." + std::to_string(layer) + ".attn_k.bias");
    if (!t || t->type != TensorType::F32 || t->n_elements != c.kv_dim()) return {};
    std::vector<float> bias(static_cast<size_t>(c.kv_dim()));
    std::memcpy(bias.data(), f.tensor_data(*t), bias.size() * sizeof(float));
    double sum = 0;
    int64_t n = 0;
    for (int64_t h = 0; h < c.n_head_kv; ++h)
      for (int64_t i = 0; i < half; ++i) {
        if (static_cast<double>(omega[i]) * static_cast<double>(c.n_ctx_train) <= kKeyOffsetTurn) continue;
        for (int64_t d : {c.rope_order == RopeOrder::halves ? i : 2 * i, c.rope_order == RopeOrder::halves ? i + half : 2 * i + 1}) {
          const double b = bias[static_cast<size_t>(h * c.head_dim + d)];
          sum += b * b;
          ++n;
        }
      }
    rms.emplace_back(n ? std::sqrt(sum / static_cast<double>(n)) : 0.0, static_cast<int32_t>(layer));
  }
  if (rms.empty()) return {};
  std::vector<double> sorted;
  for (const auto& r : rms) sorted.push_back(r.first);
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<int64_t>(sorted.size() / 2), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::sort(rms.begin(), rms.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<int32_t> out;
  const size_t most = std::max<size_t>(1, static_cast<size_t>(c.n_layer / 16));
  for (const auto& [r, layer] : rms)
    if (out.size() < most && r > 4 * median && r > 2.0) out.push_back(layer);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace troupe
