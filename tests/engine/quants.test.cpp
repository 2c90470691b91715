// GGML block formats: decoding against gguf-py and hand-built blocks, and the
// error of a quantize/dequantize round trip per format.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/half.h"
#include "engine/cpu/quants.h"

using troupe::TensorType;
using namespace troupe::cpu;

namespace {

#ifndef TROUPE_SOURCE_DIR
#define TROUPE_SOURCE_DIR "."
#endif

struct Fixture {
  uint32_t type = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

// Reads tests/fixtures/quants/<name>.bin (written by
// tests/reference/make_quant_fixtures.py).
Fixture read_fixture(const std::string& name) {
  const std::string path = std::string(TROUPE_SOURCE_DIR) + "/tests/fixtures/quants/" + name + ".bin";
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  char magic[4];
  uint32_t head[3];
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(head), sizeof head);
  REQUIRE(std::string(magic, 4) == "TQF1");
  Fixture f;
  f.type = head[0];
  f.values.resize(head[1]);
  f.bytes.resize(head[2]);
  in.read(reinterpret_cast<char*>(f.bytes.data()), static_cast<std::streamsize>(f.bytes.size()));
  in.read(reinterpret_cast<char*>(f.values.data()), static_cast<std::streamsize>(f.values.size() * 4));
  REQUIRE(in.good());
  return f;
}

std::vector<float> decode(TensorType type, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(type, bytes.data(), out.data(), n);
  return out;
}

void put_f16(std::vector<uint8_t>& b, size_t at, float v) { store_fp16(b.data() + at, v); }

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

}  // namespace

TEST_CASE("dequantize_row decodes gguf-py's fixture blocks to exactly its floats", "[quants]") {
  for (const char* name : {"F16", "BF16", "Q4_0", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}) {
    INFO(name);
    const Fixture f = read_fixture(name);
    const auto type = static_cast<TensorType>(f.type);
    REQUIRE(troupe::tensor_type_name(type) == name);
    REQUIRE(row_bytes(type, static_cast<int64_t>(f.values.size())) == static_cast<int64_t>(f.bytes.size()));
    const auto got = decode(type, f.bytes, static_cast<int64_t>(f.values.size()));
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("value " << i);
      REQUIRE(float_bits(got[i]) == float_bits(f.values[i]));
    }
  }
}

TEST_CASE("half and bfloat16 conversions round to nearest even and keep edge values", "[quants]") {
  CHECK(fp16_to_fp32(0x3C00) == 1.0f);
  CHECK(fp16_to_fp32(0xC000) == -2.0f);
  CHECK(fp16_to_fp32(0x7BFF) == 65504.0f);
  CHECK(fp16_to_fp32(0x0001) == 0x1p-24f);
  CHECK(fp16_to_fp32(0x03FF) == 1023 * 0x1p-24f);
  CHECK(std::isinf(fp16_to_fp32(0x7C00)));
  CHECK(std::isnan(fp16_to_fp32(0x7E00)));
  CHECK(fp32_to_fp16(1.0f) == 0x3C00);
  CHECK(fp32_to_fp16(65519.0f) == 0x7BFF);
  CHECK(fp32_to_fp16(65520.0f) == 0x7C00);      // halfway to the next step rounds up to infinity
  CHECK(fp32_to_fp16(1.0f + 0x1p-11f) == 0x3C00);  // tie goes to the even mantissa
  CHECK(fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3C02);
  CHECK(fp32_to_fp16(0x1p-25f) == 0x0000);  // tie between 0 and the smallest subnormal: even is 0
  CHECK(fp32_to_fp16(0x1.8p-24f) == 0x0002);
  CHECK(fp32_to_fp16(-0.0f) == 0x8000);
  CHECK((fp32_to_fp16(std::nanf("")) & 0x7E00) == 0x7E00);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;  // NaN payloads need not survive
    REQUIRE(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))) == h);
  }
  CHECK(bf16_to_fp32(0x3F80) == 1.0f);
  CHECK(fp32_to_bf16(1.0f + 0x1p-8f) == 0x3F80);  // tie to even
  CHECK(fp32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);
  CHECK(fp32_to_bf16(std::nanf("")) != 0x7F80);
}

TEST_CASE("hand-built Q4_0, Q5_0 and Q8_0 blocks decode to known values", "[quants]") {
  std::vector<uint8_t> q4(18);
  put_f16(q4, 0, 0.5f);
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto v = decode(TensorType::Q4_0, q4, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(v[j] == 0.5f * static_cast<float>(j - 8));
    CHECK(v[16 + j] == 0.5f * static_cast<float>(7 - j));
  }

  std::vector<uint8_t> q5(22);
  put_f16(q5, 0, -0.25f);
  const uint32_t qh = 0x8001'0003u;  // fifth bit on for values 0, 1, 16 and 31
  std::memcpy(q5.data() + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) q5[6 + j] = static_cast<uint8_t>(0x0F | (0x02 << 4));
  v = decode(TensorType::Q5_0, q5, 32);
  CHECK(v[0] == -0.25f * (31 - 16));
  CHECK(v[1] == -0.25f * (31 - 16));
  CHECK(v[2] == -0.25f * (15 - 16));
  CHECK(v[16] == -0.25f * (18 - 16));
  CHECK(v[17] == -0.25f * (2 - 16));
  CHECK(v[31] == -0.25f * (18 - 16));

  std::vector<uint8_t> q8(34);
  put_f16(q8, 0, 2.0f);
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  v = decode(TensorType::Q8_0, q8, 32);
  for (int j = 0; j < 32; ++j) CHECK(v[j] == 2.0f * static_cast<float>(j * 8 - 128));
}

// Scales 1,2,3,4,17,33,48,63 and mins 5,6,7,8,20,36,49,62 packed by hand: the
// last four of each need their two high bits from the top of bytes 0..7.
const uint8_t kPackedScales[12] = {0x41, 0x82, 0xC3, 0xC4, 0x45, 0x86, 0xC7, 0xC8, 0x41, 0x41, 0x10, 0xEF};
const uint8_t kScales[8] = {1, 2, 3, 4, 17, 33, 48, 63};
const uint8_t kMins[8] = {5, 6, 7, 8, 20, 36, 49, 62};

TEST_CASE("K-quant 6-bit scales and mins unpack from and pack to their 12 bytes", "[quants]") {
  uint8_t sc[8], mn[8], packed[12];
  unpack_k_scales(kPackedScales, sc, mn);
  for (int j = 0; j < 8; ++j) {
    CHECK(sc[j] == kScales[j]);
    CHECK(mn[j] == kMins[j]);
  }
  pack_k_scales(kScales, kMins, packed);
  CHECK(std::memcmp(packed, kPackedScales, 12) == 0);
}

TEST_CASE("hand-built Q4_K and Q5_K blocks decode with their sub-block scales and mins", "[quants]") {
  std::vector<uint8_t> q4(144);
  put_f16(q4, 0, 1.0f);
  put_f16(q4, 2, 0.5f);
  std::memcpy(q4.data() + 4, kPackedScales, 12);
  for (int i = 0; i < 128; ++i) q4[16 + i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  auto v = decode(TensorType::Q4_K, q4, 256);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, l = e % 32;
    const int q = sub % 2 == 0 ? l % 16 : 15 - l % 16;
    INFO("element " << e);
    CHECK(v[e] == static_cast<float>(kScales[sub] * q) - 0.5f * kMins[sub]);
  }

  std::vector<uint8_t> q5(176);
  put_f16(q5, 0, 0.25f);
  put_f16(q5, 2, 1.0f);
  std::memcpy(q5.data() + 4, kPackedScales, 12);
  for (int l = 0; l < 32; ++l) q5[16 + l] = static_cast<uint8_t>(1u << (l % 8));  // fifth bit for sub-block l % 8
  for (int i = 0; i < 128; ++i) q5[48 + i] = 0x93;  // low nibble 3, high nibble 9
  v = decode(TensorType::Q5_K, q5, 256);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, l = e % 32;
    const int q = (sub % 2 == 0 ? 3 : 9) + (l % 8 == sub ? 16 : 0);
    INFO("element " << e);
    CHECK(v[e] == 0.25f * kScales[sub] * static_cast<float>(q) - 1.0f * kMins[sub]);
  }
}

TEST_CASE("a hand-built Q6_K block decodes with signed scales and its 2 high bits", "[quants]") {
  std::vector<uint8_t> b(210);
  for (int i = 0; i < 128; ++i) b[i] = static_cast<uint8_t>((i % 16) | (((i + 5) % 16) << 4));
  for (int i = 0; i < 64; ++i) b[128 + i] = static_cast<uint8_t>(0b11'10'01'00 ^ (i % 4));
  const int8_t scales[16] = {-128, 127, -1, 1, 2, -3, 40, -40, 5, 6, 7, 8, -9, -10, -11, 12};
  std::memcpy(b.data() + 192, scales, 16);
  put_f16(b, 208, 0.125f);
  const auto v = decode(TensorType::Q6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128, l = r % 32, quarter = r / 32;
    const int ql_index = 64 * h + 32 * (quarter % 2) + l;
    const int nib = quarter < 2 ? ql_index % 16 : (ql_index + 5) % 16;
    const int qh_byte = 0b11'10'01'00 ^ ((32 * h + l) % 4);
    const int q = nib | (((qh_byte >> (2 * quarter)) & 3) << 4);
    INFO("element " << e);
    CHECK(v[e] == 0.125f * scales[e / 16] * static_cast<float>(q - 32));
  }
}

TEST_CASE("Q8_K blocks keep a float scale and the sums of each 16 values", "[quants]") {
  const auto x = gaussian(512, 7);
  std::vector<uint8_t> b(2 * 292);
  quantize_row(TensorType::Q8_K, x.data(), b.data(), 512);
  for (int blk = 0; blk < 2; ++blk) {
    const uint8_t* p = b.data() + 292 * blk;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += static_cast<int8_t>(p[4 + 16 * g + l]);
      int16_t stored;
      std::memcpy(&stored, p + 260 + 2 * g, 2);
      CHECK(stored == sum);
    }
  }
  const auto v = decode(TensorType::Q8_K, b, 512);
  for (size_t i = 0; i < x.size(); ++i) CHECK(std::fabs(v[i] - x[i]) <= 4.5f / 254);  // amax < 4.5 sigma here
}

// Bounds follow from each format's step: the legacy formats put the block's
// largest magnitude on the most negative code, so the other side may clip by
// one step (amax/8 for Q4_0, amax/16 for Q5_0) and otherwise rounds by half a
// step; Q8_0 rounds by half of amax/127. The f16 scale adds 2^-11 relative.
// K-quants are checked by RMS on Gaussian data: uniform rounding error of a
// step (sub-block range / levels) is step / sqrt(12), about 0.09 sigma for 4
// bits, 0.045 for 5 and 0.02 for 6 (Q6_K's 16-value groups have a narrower
// range); the bounds leave room for 6-bit scale rounding.
TEST_CASE("quantize then dequantize stays within each format's error bound", "[quants]") {
  const int64_t n = 4096;
  const auto x = gaussian(n, 42);
  struct Case {
    TensorType type;
    double rms_bound;
  };
  for (const Case c : {Case{TensorType::F16, 4e-4}, Case{TensorType::BF16, 3e-3}, Case{TensorType::Q8_0, 0.01},
                       Case{TensorType::Q4_0, 0.12}, Case{TensorType::Q5_0, 0.06}, Case{TensorType::Q4_K, 0.11},
                       Case{TensorType::Q5_K, 0.055}, Case{TensorType::Q6_K, 0.03}}) {
    INFO(troupe::tensor_type_name(c.type));
    std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes(c.type, n)));
    quantize_row(c.type, x.data(), bytes.data(), n);
    const auto y = decode(c.type, bytes, n);
    std::vector<float> err(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) err[i] = y[i] - x[i];
    CHECK(rms(err) <= c.rms_bound * rms(x));

    const int block = c.type == TensorType::Q4_0 || c.type == TensorType::Q5_0 || c.type == TensorType::Q8_0 ? 32 : 0;
    if (block == 0) continue;
    const double step = c.type == TensorType::Q4_0 ? 1.0 / 8 : c.type == TensorType::Q5_0 ? 1.0 / 16 : 1.0 / 254;
    for (int64_t b = 0; b < n / block; ++b) {
      double amax = 0;
      for (int j = 0; j < block; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[b * block + j])));
      for (int j = 0; j < block; ++j) REQUIRE(std::fabs(err[b * block + j]) <= amax * (step + 1.0 / 1024));
    }
  }
  SECTION("relative error of the float formats is one rounding") {
    std::vector<uint8_t> bytes(static_cast<size_t>(n * 2));
    for (TensorType t : {TensorType::F16, TensorType::BF16}) {
      quantize_row(t, x.data(), bytes.data(), n);
      const auto y = decode(t, bytes, n);
      const double ulp = t == TensorType::F16 ? 0x1p-11 : 0x1p-8;
      for (int64_t i = 0; i < n; ++i)
        if (std::fabs(x[i]) > 1e-4) REQUIRE(std::fabs(y[i] - x[i]) <= std::fabs(x[i]) * ulp);
    }
  }
}

TEST_CASE("quantizing zeros and constant rows gives valid blocks that decode exactly", "[quants]") {
  for (TensorType t : {TensorType::Q4_0, TensorType::Q5_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K,
                       TensorType::Q6_K, TensorType::Q8_K}) {
    INFO(troupe::tensor_type_name(t));
    const std::vector<float> zeros(512, 0.0f);
    std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes(t, 512)));
    quantize_row(t, zeros.data(), bytes.data(), 512);
    for (float v : decode(t, bytes, 512)) CHECK(v == 0.0f);
    const std::vector<float> minus(512, -1.5f);
    quantize_row(t, minus.data(), bytes.data(), 512);
    for (float v : decode(t, bytes, 512)) CHECK(std::fabs(v + 1.5f) <= 1.5f / 64);
  }
}

TEST_CASE("rows that are not whole blocks are refused", "[quants]") {
  std::vector<float> x(300);
  std::vector<uint8_t> bytes(1024);
  CHECK_THROWS_AS(quantize_row(TensorType::Q4_K, x.data(), bytes.data(), 300), std::invalid_argument);
  CHECK_THROWS_AS(dequantize_row(TensorType::Q8_0, bytes.data(), x.data(), 33), std::invalid_argument);
}
