#include "engine/cuda/weight_upload.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/cpu/half.h"
#include "engine/cpu/quants.h"
#include "engine/cuda/cuda_check.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace troupe::cuda {

const char* device_format_name(DeviceFormat f) {
  switch (f) {
    case DeviceFormat::bf16: return "bf16";
    case DeviceFormat::int8: return "int8";
    case DeviceFormat::int4: return "int4";
  }
  return "?";
}

namespace {

int64_t q_bytes(DeviceFormat f, int64_t rows, int64_t cols) {
  return f == DeviceFormat::bf16 ? rows * cols * 2 : (f == DeviceFormat::int8 ? rows * cols : rows * cols / 2);
}
int64_t scale_bytes(DeviceFormat f, int64_t rows, int64_t cols) {
  return f == DeviceFormat::bf16 ? 0 : rows * (cols / 32) * (f == DeviceFormat::int8 ? 2 : 4);
}
int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

// Widest of the formats: bf16 > int8 > int4 (a concatenation takes the widest part's).
DeviceFormat wider(DeviceFormat a, DeviceFormat b) {
  auto rank = [](DeviceFormat f) { return f == DeviceFormat::bf16 ? 2 : (f == DeviceFormat::int8 ? 1 : 0); };
  return rank(a) >= rank(b) ? a : b;
}

void encode_floats(const float* v, int64_t cols, DeviceFormat f, uint8_t* q, uint8_t* scales) {
  if (f == DeviceFormat::bf16) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint16_t b = cpu::fp32_to_bf16(v[c]);
      std::memcpy(q + 2 * c, &b, 2);
    }
    return;
  }
  for (int64_t g = 0; g < cols / 32; ++g) {
    const float* x = v + g * 32;
    if (f == DeviceFormat::int8) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      const uint16_t dh = cpu::fp32_to_fp16(amax / 127.0f);
      const float d = cpu::fp16_to_fp32(dh);
      for (int i = 0; i < 32; ++i)
        q[g * 32 + i] = static_cast<uint8_t>(static_cast<int8_t>(d > 0 ? std::clamp(std::lround(x[i] / d), -127l, 127l) : 0));
      std::memcpy(scales + g * 2, &dh, 2);
    } else {
      float lo = x[0], hi = x[0];
      for (int i = 1; i < 32; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
      const uint16_t sh = cpu::fp32_to_fp16((hi - lo) / 15.0f), mh = cpu::fp32_to_fp16(lo);
      const float s = cpu::fp16_to_fp32(sh), m = cpu::fp16_to_fp32(mh);
      uint8_t nib[32];
      for (int i = 0; i < 32; ++i) nib[i] = static_cast<uint8_t>(s > 0 ? std::clamp(std::lround((x[i] - m) / s), 0l, 15l) : 0);
      for (int i = 0; i < 16; ++i) q[g * 16 + i] = static_cast<uint8_t>(nib[i] | (nib[i + 16] << 4));
      std::memcpy(scales + g * 4, &sh, 2);
      std::memcpy(scales + g * 4 + 2, &mh, 2);
    }
  }
}

}  // namespace

DeviceFormat automatic_format(TensorType source) {
  switch (source) {
    case TensorType::Q4_0:
    case TensorType::Q4_K: return DeviceFormat::int4;
    case TensorType::Q8_0:
    case TensorType::Q5_0:
    case TensorType::Q5_K:
    case TensorType::Q6_K: return DeviceFormat::int8;
    default: return DeviceFormat::bf16;
  }
}

void encode_row(TensorType src_type, const void* src, int64_t cols, DeviceFormat f, uint8_t* q, uint8_t* scales) {
  const auto* s = static_cast<const uint8_t*>(src);
  // Exact re-layouts first: the device holds the file's own numbers.
  if (f == DeviceFormat::bf16 && src_type == TensorType::BF16) {
    std::memcpy(q, src, static_cast<size_t>(cols) * 2);
    return;
  }
  if (f == DeviceFormat::int8 && src_type == TensorType::Q8_0) {
    for (int64_t g = 0; g < cols / 32; ++g) {
      std::memcpy(scales + g * 2, s + g * 34, 2);
      std::memcpy(q + g * 32, s + g * 34 + 2, 32);
    }
    return;
  }
  if (f == DeviceFormat::int4 && src_type == TensorType::Q4_0) {
    for (int64_t g = 0; g < cols / 32; ++g) {
      uint16_t dh;
      std::memcpy(&dh, s + g * 18, 2);
      const uint16_t mh = cpu::fp32_to_fp16(-8.0f * cpu::fp16_to_fp32(dh));
      std::memcpy(scales + g * 4, &dh, 2);
      std::memcpy(scales + g * 4 + 2, &mh, 2);
      std::memcpy(q + g * 16, s + g * 18 + 2, 16);
    }
    return;
  }
  if (f == DeviceFormat::int4 && src_type == TensorType::Q4_K) {
    for (int64_t b = 0; b < cols / 256; ++b) {
      const uint8_t* blk = s + b * 144;
      const float d = cpu::load_fp16(blk), dmin = cpu::load_fp16(blk + 2);
      uint8_t sc[8], mn[8];
      cpu::unpack_k_scales(blk + 4, sc, mn);
      const uint8_t* qs = blk + 16;
      for (int sb = 0; sb < 8; ++sb) {
        const int64_t g = b * 8 + sb;
        uint8_t nib[32];
        for (int i = 0; i < 32; ++i) {
          const uint8_t byte = qs[32 * (sb / 2) + i];
          nib[i] = sb % 2 ? byte >> 4 : byte & 15;
        }
        for (int i = 0; i < 16; ++i) q[g * 16 + i] = static_cast<uint8_t>(nib[i] | (nib[i + 16] << 4));
        const uint16_t sh = cpu::fp32_to_fp16(d * sc[sb]), mh = cpu::fp32_to_fp16(-dmin * mn[sb]);
        std::memcpy(scales + g * 4, &sh, 2);
        std::memcpy(scales + g * 4 + 2, &mh, 2);
      }
    }
    return;
  }
  std::vector<float> v(static_cast<size_t>(cols));
  cpu::dequantize_row(src_type, src, v.data(), cols);
  encode_floats(v.data(), cols, f, q, scales);
}

namespace {

// Converts the parts (stacked by rows) into one device matrix.
DeviceMatrix upload(std::initializer_list<cpu::WeightMatrix> parts, DeviceFormat f, int threads,
                    UploadedWeights& out) {
  const int64_t cols = parts.begin()->cols;
  int64_t rows = 0;
  for (const auto& p : parts) {
    if (p.cols != cols) throw std::invalid_argument("concatenated matrices differ in width");
    rows += p.rows;
  }
  if (cols % 32 != 0)
    throw std::invalid_argument("the CUDA backend needs matrix widths that are multiples of 32, not " + std::to_string(cols));
  const int64_t qb = q_bytes(f, rows, cols), sb = scale_bytes(f, rows, cols);
  std::vector<uint8_t> host(static_cast<size_t>(align256(qb) + sb));
  const int64_t row_q = qb / rows, row_s = sb / rows;
  int64_t row0 = 0;
  for (const auto& p : parts) {
    const int64_t src_row = row_bytes(p.type, p.cols);
    auto work = [&, row0](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        encode_row(p.type, static_cast<const uint8_t*>(p.data) + r * src_row, cols, f,
                   host.data() + (row0 + r) * row_q, host.data() + align256(qb) + (row0 + r) * row_s);
    };
    const int n = std::max(1, std::min<int>(threads, static_cast<int>(p.rows / 64) + 1));
    std::vector<std::thread> pool;
    for (int t = 1; t < n; ++t) pool.emplace_back(work, p.rows * t / n, p.rows * (t + 1) / n);
    work(0, p.rows / n);
    for (auto& t : pool) t.join();
    row0 += p.rows;
  }
  DeviceBuffer buf(host.size());
  TROUPE_CUDA_CHECK(cudaMemcpy(buf.get(), host.data(), host.size(), cudaMemcpyHostToDevice));
  DeviceMatrix m{f, rows, cols, buf.get(), sb ? buf.as<uint8_t>() + align256(qb) : nullptr};
  out.bytes += static_cast<int64_t>(host.size());
  out.storage.push_back(std::move(buf));
  return m;
}

const float* upload_floats(std::initializer_list<const std::vector<float>*> parts, UploadedWeights& out) {
  std::vector<float> all;
  for (const auto* p : parts) all.insert(all.end(), p->begin(), p->end());
  DeviceBuffer buf(all.size() * sizeof(float));
  TROUPE_CUDA_CHECK(cudaMemcpy(buf.get(), all.data(), all.size() * sizeof(float), cudaMemcpyHostToDevice));
  out.bytes += static_cast<int64_t>(all.size() * sizeof(float));
  const float* p = buf.as<float>();
  out.storage.push_back(std::move(buf));
  return p;
}

}  // namespace

UploadedWeights upload_weights(const ModelWeights& w, const ModelConfig& c, DeviceWeights choice, int threads) {
  auto format_of = [&](std::initializer_list<cpu::WeightMatrix> parts) {
    switch (choice) {
      case DeviceWeights::bf16: return DeviceFormat::bf16;
      case DeviceWeights::int8: return DeviceFormat::int8;
      case DeviceWeights::int4: return DeviceFormat::int4;
      case DeviceWeights::automatic: break;
    }
    DeviceFormat f = DeviceFormat::int4;
    for (const auto& p : parts) f = wider(f, automatic_format(p.type));
    return f;
  };
  UploadedWeights out;
  out.token_embd = upload({w.token_embd}, format_of({w.token_embd}), threads, out);
  out.output = w.tied_output ? out.token_embd : upload({w.output}, format_of({w.output}), threads, out);
  out.output_norm = upload_floats({&w.output_norm}, out);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const LayerWeights& l = w.layers[i];
    DeviceLayer d;
    d.qkv = upload({l.wq, l.wk, l.wv}, format_of({l.wq, l.wk, l.wv}), threads, out);
    d.wo = upload({l.wo}, format_of({l.wo}), threads, out);
    d.gate_up = upload({l.w_gate, l.w_up}, format_of({l.w_gate, l.w_up}), threads, out);
    d.down = upload({l.w_down}, format_of({l.w_down}), threads, out);
    d.attn_norm = upload_floats({&l.attn_norm}, out);
    d.ffn_norm = upload_floats({&l.ffn_norm}, out);
    if (!l.bq.empty()) d.qkv_bias = upload_floats({&l.bq, &l.bk, &l.bv}, out);
    out.layers.push_back(d);
  }
  return out;
}

int64_t DeviceMatrix::bytes() const { return q_bytes(format, rows, cols) + scale_bytes(format, rows, cols); }

}  // namespace troupe::cuda
