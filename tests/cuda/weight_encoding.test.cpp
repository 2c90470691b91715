// Host side of the CUDA backend, run everywhere (no GPU needed): GGUF rows
// re-laid into the device formats decode to the file's own numbers (exactly
// for Q8_0 and Q4_0, to f16 rounding of the scales for Q4_K), and rows
// requantized from floats stay within half a quantization step.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu/half.h"
#include "engine/cpu/quants.h"
#include "engine/cuda/weight_upload.h"

using namespace troupe;
using troupe::cuda::DeviceFormat;

namespace {

// Mirror of the device's decoding (engine/cuda/device_math.cuh), in plain C++.
std::vector<float> decode(DeviceFormat f, const std::vector<uint8_t>& q, const std::vector<uint8_t>& s, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    if (f == DeviceFormat::bf16) {
      uint16_t b;
      std::memcpy(&b, &q[2 * c], 2);
      out[c] = cpu::bf16_to_fp32(b);
    } else if (f == DeviceFormat::int8) {
      out[c] = static_cast<float>(static_cast<int8_t>(q[c])) * cpu::load_fp16(&s[(c / 32) * 2]);
    } else {
      const int i = static_cast<int>(c % 32);
      const uint8_t byte = q[(c / 32) * 16 + (i & 15)];
      const int nib = i < 16 ? byte & 15 : byte >> 4;
      out[c] = cpu::load_fp16(&s[(c / 32) * 4]) * static_cast<float>(nib) + cpu::load_fp16(&s[(c / 32) * 4 + 2]);
    }
  }
  return out;
}

struct Encoded {
  std::vector<float> device;  // what the GPU will compute with
  std::vector<float> file;    // what the GGUF row decodes to on the CPU
  float amax = 0;
};

Encoded encode(TensorType type, DeviceFormat f, uint32_t seed, int64_t cols = 512) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  for (auto& v : x) v = g(rng);
  std::vector<uint8_t> row(static_cast<size_t>(row_bytes(type, cols)));
  cpu::quantize_row(type, x.data(), row.data(), cols);
  Encoded e;
  e.file.resize(static_cast<size_t>(cols));
  cpu::dequantize_row(type, row.data(), e.file.data(), cols);
  for (float v : e.file) e.amax = std::max(e.amax, std::fabs(v));
  std::vector<uint8_t> q(static_cast<size_t>(f == DeviceFormat::bf16 ? 2 * cols : (f == DeviceFormat::int8 ? cols : cols / 2)));
  std::vector<uint8_t> s(static_cast<size_t>(cols / 32 * 4));
  cuda::encode_row(type, row.data(), cols, f, q.data(), s.data());
  e.device = decode(f, q, s, cols);
  return e;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

}  // namespace

TEST_CASE("Q8_0 and Q4_0 rows keep their exact values in the device formats") {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const auto q8 = encode(TensorType::Q8_0, DeviceFormat::int8, seed);
    CHECK(q8.device == q8.file);
    const auto q4 = encode(TensorType::Q4_0, DeviceFormat::int4, seed);
    CHECK(q4.device == q4.file);
    const auto bf = encode(TensorType::BF16, DeviceFormat::bf16, seed);
    CHECK(bf.device == bf.file);
  }
}

TEST_CASE("Q4_K rows become int4 up to the f16 rounding of their combined scales") {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const auto e = encode(TensorType::Q4_K, DeviceFormat::int4, seed, 1024);
    // s = d*sc and m = dmin*min each round to f16 (relative 2^-11); q <= 15.
    CHECK(max_abs_diff(e.device, e.file) <= e.amax * 2 * 16 * 0x1p-11f);
  }
}

TEST_CASE("rows requantized from other formats stay within half a step") {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const auto i8 = encode(TensorType::Q6_K, DeviceFormat::int8, seed, 512);
    CHECK(max_abs_diff(i8.device, i8.file) <= i8.amax / 127.0f * 0.51f + 1e-6f);
    const auto i4 = encode(TensorType::F32, DeviceFormat::int4, seed, 512);
    // Half a step of (max - min) / 15, plus the f16 rounding of scale and min.
    CHECK(max_abs_diff(i4.device, i4.file) <= 2 * i4.amax / 15.0f * 0.5f + 4 * i4.amax * 0x1p-11f);
    const auto b16 = encode(TensorType::F32, DeviceFormat::bf16, seed, 512);
    CHECK(max_abs_diff(b16.device, b16.file) <= b16.amax * 0x1p-8f);
  }
}

TEST_CASE("automatic placement keeps 4-bit formats at 4 bits and widens the rest") {
  CHECK(cuda::automatic_format(TensorType::Q4_K) == DeviceFormat::int4);
  CHECK(cuda::automatic_format(TensorType::Q4_0) == DeviceFormat::int4);
  CHECK(cuda::automatic_format(TensorType::Q8_0) == DeviceFormat::int8);
  CHECK(cuda::automatic_format(TensorType::Q6_K) == DeviceFormat::int8);
  CHECK(cuda::automatic_format(TensorType::F16) == DeviceFormat::bf16);
}
