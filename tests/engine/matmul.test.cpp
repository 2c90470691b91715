// matmul / matmul_many: against a double-precision reference, every
// instruction set against the scalar path, odd shapes, and scratch reuse.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu/isa.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/quants.h"
#include "engine/cpu/repack.h"
#include "tests/engine/random_data.h"

using troupe::TensorType;
using namespace troupe::cpu;

namespace {

const TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0,
                                TensorType::Q5_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

bool is_k(TensorType t) { return t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K; }
bool is_float(TensorType t) { return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16; }

using troupe::test::gaussian;

// A random matrix stored in `type`, and its decoded floats.
struct Matrix {
  TensorType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  WeightMatrix view() const { return {type, bytes.data(), rows, cols}; }
};

Matrix make_matrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  Matrix m{type, rows, cols, {}, {}};
  const auto src = gaussian(static_cast<size_t>(rows * cols), seed);
  const int64_t rb = row_bytes(type, cols);
  m.bytes.resize(static_cast<size_t>(rows * rb));
  m.values.resize(src.size());
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(type, &src[r * cols], &m.bytes[r * rb], cols);
    dequantize_row(type, &m.bytes[r * rb], &m.values[r * cols], cols);
  }
  return m;
}

std::vector<float> run(const Matrix& m, const std::vector<float>& x, int n_tokens, ThreadPool& pool,
                       MatmulScratch& scratch) {
  std::vector<float> y(static_cast<size_t>(m.rows * n_tokens), NAN);
  matmul(m.view(), x.data(), n_tokens, y.data(), pool, scratch);
  return y;
}

// Activations are quantized to 8 bits per 32 values (per 256 for K-quants)
// with scale amax/127, so each differs from x by at most half a scale (plus
// float rounding of x/scale); the product's error is then at most
// sum |w_i| * scale_i / 2. Float accumulation adds at most about
// n_adds * 2^-23 of sum |w_i x_i| (n_adds: float additions on the way).
double activation_bound(const Matrix& m, const float* x, int64_t r) {
  if (is_float(m.type)) return 0;
  const int64_t block = is_k(m.type) ? 256 : 32;
  double bound = 0;
  for (int64_t b = 0; b < m.cols / block; ++b) {
    double amax = 0, wsum = 0;
    for (int64_t j = b * block; j < (b + 1) * block; ++j) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[j])));
      wsum += std::fabs(m.values[r * m.cols + j]);
    }
    bound += wsum * (amax / 127) * 0.50003;
  }
  return bound;
}

double float_slack(const Matrix& m, const float* x, int64_t r) {
  double abs_dot = 0;
  for (int64_t j = 0; j < m.cols; ++j) abs_dot += std::fabs(static_cast<double>(m.values[r * m.cols + j]) * x[j]);
  const double n_adds = is_float(m.type) ? static_cast<double>(m.cols) : static_cast<double>(m.cols) / 16 + 64;
  return abs_dot * n_adds * 0x1p-23 + 1e-6;
}

struct IsaGuard {
  explicit IsaGuard(Isa isa) { set_isa_override(isa); }
  ~IsaGuard() { clear_isa_override(); }
  IsaGuard(const IsaGuard&) = delete;
  IsaGuard& operator=(const IsaGuard&) = delete;
};

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (isa <= detect_isa()) out.push_back(isa);
  return out;
}

std::vector<int64_t> cols_for(TensorType t) {
  if (is_k(t)) return {1536, 4864, 8960, 256};
  if (is_float(t)) return {896, 4864, 1536, 8960, 100, 7};
  return {896, 4864, 1536, 8960, 96, 160, 32};  // 96 and 160: blocks after the last 4-block chunk
}

// Every format with a lane layout, on shapes whose rows end in partial
// groups of 1..15 blocks (the legacy formats) and odd super-block counts
// (Q4_K pads its last group), 1 to 71 rows; fn(matrix, its view with the
// lane copy). 8,960-value rows (the 1.5B's ffn_down) take the few-token
// kernels' column segments from 4 tokens and fewer tokens a packed pass.
template <class Fn>
void for_each_laned_matrix(ThreadPool& pool, uint32_t& seed, Fn fn) {
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::Q5_0, TensorType::Q4_0}) {
    const std::vector<int64_t> shapes = is_k(type) ? std::vector<int64_t>{256, 1280, 1536, 4864, 8960}
                                                   : std::vector<int64_t>{32, 96, 160, 288, 896, 960, 1536, 4864, 8960};
    for (int64_t cols : shapes)
      for (int64_t rows : {1, 7, 71}) {
        const Matrix m = make_matrix(type, rows, cols, ++seed);
        const auto lanes = repack_lanes(m.view(), pool);
        REQUIRE(lanes != nullptr);
        WeightMatrix laned = m.view();
        laned.lanes = lanes.get();
        fn(m, laned);
      }
  }
}

}  // namespace

TEST_CASE("matmul matches a double-precision dot of the dequantized weights within the activation-rounding bound",
          "[matmul]") {
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (TensorType type : kAllTypes) {
    for (int n_tokens : {1, 3, 7, 20}) {
      const int64_t cols = is_k(type) ? 1536 : 896, rows = 37;
      INFO(troupe::tensor_type_name(type) << " tokens " << n_tokens << " on " << isa_name(active_isa()));
      const Matrix m = make_matrix(type, rows, cols, 11);
      const auto x = gaussian(static_cast<size_t>(cols * n_tokens), 12);
      const auto y = run(m, x, n_tokens, pool, scratch);
      for (int t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double ref = 0;
          for (int64_t j = 0; j < cols; ++j) ref += static_cast<double>(m.values[r * cols + j]) * x[t * cols + j];
          const float* xt = &x[t * cols];
          const double tol = activation_bound(m, xt, r) + float_slack(m, xt, r);
          INFO("row " << r << " token " << t << " ref " << ref << " got " << y[t * rows + r] << " tol " << tol);
          REQUIRE(std::fabs(y[t * rows + r] - ref) <= tol);
        }
    }
  }
}

TEST_CASE("every instruction set computes what the scalar path computes, on odd shapes with 2 threads", "[matmul]") {
  ThreadPool pool(2);
  MatmulScratch scratch;
  uint32_t seed = 100;
  for (TensorType type : kAllTypes) {
    for (int64_t cols : cols_for(type)) {
      for (int64_t rows : {1, 6, 37}) {
        const Matrix m = make_matrix(type, rows, cols, ++seed);
        for (int n_tokens : {1, 2, 3, 4, 5, 7}) {
          const auto x = gaussian(static_cast<size_t>(cols * n_tokens), ++seed);
          std::vector<float> want;
          {
            IsaGuard g(Isa::scalar);
            want = run(m, x, n_tokens, pool, scratch);
          }
          for (Isa isa : available_isas()) {
            IsaGuard g(isa);
            const auto got = run(m, x, n_tokens, pool, scratch);
            for (int t = 0; t < n_tokens; ++t)
              for (int64_t r = 0; r < rows; ++r) {
                const double tol = 2 * float_slack(m, &x[t * cols], r);
                INFO(troupe::tensor_type_name(type) << " " << isa_name(isa) << " rows " << rows << " cols " << cols
                                                    << " tokens " << n_tokens << " row " << r << " token " << t);
                REQUIRE(std::fabs(got[t * rows + r] - want[t * rows + r]) <= tol);
              }
          }
        }
      }
    }
  }
}

// From 12 tokens the AVX-512 path switches to kernels with 16 tokens per
// vector (8 rows unpacked at a time, 8 groups of 16 tokens per pass): these
// shapes leave partial groups, passes and row blocks.
TEST_CASE("prefill-sized batches cross token groups, passes and row blocks and agree with the scalar path",
          "[matmul]") {
  ThreadPool pool(2);
  MatmulScratch scratch;
  uint32_t seed = 500;
  for (TensorType type : kAllTypes) {
    for (int64_t cols : is_k(type) ? std::vector<int64_t>{1536, 256} : std::vector<int64_t>{1536, 96}) {
      const int64_t rows = 71;  // 8 blocks of 8, then 4, 2 and 1
      const Matrix m = make_matrix(type, rows, cols, ++seed);
      for (int n_tokens : {12, 16, 29, 67, 130}) {
        const auto x = gaussian(static_cast<size_t>(cols * n_tokens), ++seed);
        std::vector<float> want;
        {
          IsaGuard g(Isa::scalar);
          want = run(m, x, n_tokens, pool, scratch);
        }
        for (Isa isa : available_isas()) {
          if (isa == Isa::scalar) continue;
          IsaGuard g(isa);
          const auto got = run(m, x, n_tokens, pool, scratch);
          for (int t = 0; t < n_tokens; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              INFO(troupe::tensor_type_name(type) << " " << isa_name(isa) << " cols " << cols << " tokens " << n_tokens
                                                  << " row " << r << " token " << t);
              REQUIRE(std::fabs(got[t * rows + r] - want[t * rows + r]) <= 2 * float_slack(m, &x[t * cols], r));
            }
        }
      }
    }
  }
}

// Chunked prefill and batching must not change a sequence's logits, and with
// 8-bit activations the smallest difference could flip a rounding later on.
TEST_CASE("a token's outputs are bitwise the same alone and anywhere in batches of any size", "[matmul]") {
  ThreadPool pool(2);
  MatmulScratch scratch;
  uint32_t seed = 900;
  for (Isa isa : available_isas()) {
    IsaGuard g(isa);
    for (TensorType type : kAllTypes) {
      const int64_t cols = is_k(type) ? 4864 : 896 + 64, rows = 45;  // 896 + 64: blocks after the last 4-block chunk
      const Matrix m = make_matrix(type, rows, cols, ++seed);
      const auto probe = gaussian(static_cast<size_t>(cols), ++seed);
      const auto alone = run(m, probe, 1, pool, scratch);
      for (int n_tokens : {2, 5, 11, 12, 16, 37, 130}) {
        auto x = gaussian(static_cast<size_t>(cols * n_tokens), ++seed);
        for (int at : {0, n_tokens / 2, n_tokens - 1}) {
          std::copy(probe.begin(), probe.end(), x.begin() + at * cols);
          const auto y = run(m, x, n_tokens, pool, scratch);
          for (int64_t r = 0; r < rows; ++r) {
            INFO(troupe::tensor_type_name(type) << " " << isa_name(isa) << " tokens " << n_tokens << " at " << at
                                                << " row " << r);
            REQUIRE(y[at * rows + r] == alone[r]);
          }
        }
      }
    }
  }
}

TEST_CASE("matmul_many gives each matrix exactly what matmul gives it alone", "[matmul]") {
  ThreadPool pool(2);
  MatmulScratch scratch;
  const int64_t cols = 1536;
  const Matrix q = make_matrix(TensorType::Q8_0, 96, cols, 1);
  const Matrix k = make_matrix(TensorType::Q4_K, 20, cols, 2);
  const Matrix v = make_matrix(TensorType::F16, 33, cols, 3);
  const Matrix u = make_matrix(TensorType::Q5_0, 0, cols, 4);  // an empty matrix is allowed
  for (int n_tokens : {1, 5}) {
    const auto x = gaussian(static_cast<size_t>(cols * n_tokens), 9);
    std::vector<float> yq(96 * n_tokens), yk(20 * n_tokens), yv(33 * n_tokens);
    const WeightMatrix ws[] = {q.view(), k.view(), v.view(), u.view()};
    float* const ys[] = {yq.data(), yk.data(), yv.data(), nullptr};
    matmul_many(ws, x.data(), n_tokens, ys, pool, scratch);
    CHECK(yq == run(q, x, n_tokens, pool, scratch));
    CHECK(yk == run(k, x, n_tokens, pool, scratch));
    CHECK(yv == run(v, x, n_tokens, pool, scratch));
  }
}

TEST_CASE("matmul_jobs gives each matrix, over its own input and token count, exactly what matmul gives it",
          "[matmul]") {
  ThreadPool pool(2);
  MatmulScratch scratch;
  // A step's experts: per expert, gate and up reading one input and a down of another width
  // reading its own; token counts from 1 to 17 (few-token and 16-lane kernels in one call),
  // lane layouts where the CPU has them, and more than 16 jobs.
  const int counts[] = {1, 2, 3, 17, 5, 1, 16, 8, 9, 1};
  uint32_t seed = 4000;
  std::vector<Matrix> mats;
  for (int e = 0; e < 10; ++e) {
    const TensorType type = e % 3 == 0 ? TensorType::Q4_K : e % 3 == 1 ? TensorType::Q8_0 : TensorType::Q6_K;
    mats.push_back(make_matrix(type, 96, 512, ++seed));  // gate
    mats.push_back(make_matrix(type, 96, 512, ++seed));  // up
    mats.push_back(make_matrix(type, 64, 256, ++seed));  // down
  }
  std::vector<decltype(repack_lanes(mats[0].view(), pool))> lanes;
  std::vector<std::vector<float>> xs, ys;
  std::vector<MatmulJob> jobs;
  xs.reserve(20);
  for (size_t i = 0; i < mats.size(); ++i) {
    const int n = counts[i / 3];
    WeightMatrix w = mats[i].view();
    lanes.push_back(repack_lanes(w, pool));
    w.lanes = lanes.back().get();
    if (i % 3 != 1) xs.push_back(gaussian(static_cast<size_t>(w.cols * n), ++seed));  // up reads gate's input
    ys.emplace_back(static_cast<size_t>(w.rows * n), NAN);
    jobs.push_back({w, xs.back().data(), n, nullptr});
  }
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].y = ys[i].data();
  REQUIRE(jobs.size() > 16);
  matmul_jobs(jobs, pool, scratch);
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::vector<float> want(ys[i].size(), NAN);
    matmul(jobs[i].w, jobs[i].x, jobs[i].n_tokens, want.data(), pool, scratch);
    INFO("job " << i << ", " << jobs[i].n_tokens << " tokens");
    CHECK(ys[i] == want);
  }
}

TEST_CASE("the scratch stops growing once it has seen the largest call", "[matmul]") {
  ThreadPool pool(2);
  MatmulScratch scratch;
  const Matrix m = make_matrix(TensorType::Q4_0, 64, 4864, 5);
  const auto x = gaussian(4864 * 8, 6);
  std::vector<float> y(64 * 8);
  matmul(m.view(), x.data(), 8, y.data(), pool, scratch);
  const int64_t reserved = scratch.reserved_bytes();
  CHECK(reserved > 0);
  for (int n : {8, 1, 3, 8}) {
    matmul(m.view(), x.data(), n, y.data(), pool, scratch);
    CHECK(scratch.reserved_bytes() == reserved);
  }
}

TEST_CASE("one thread and many threads give identical results", "[matmul]") {
  ThreadPool one(1), three(3);
  MatmulScratch scratch;
  const Matrix m = make_matrix(TensorType::Q6_K, 301, 1536, 15);
  const auto x = gaussian(1536 * 4, 16);
  for (int n : {1, 4}) CHECK(run(m, x, n, one, scratch) == run(m, x, n, three, scratch));
}

TEST_CASE("matmul refuses mismatched shapes and unsupported types", "[matmul]") {
  ThreadPool pool(1);
  MatmulScratch scratch;
  std::vector<float> x(1000), y(1000);
  std::vector<uint8_t> w(100000);
  CHECK_THROWS_AS(matmul({TensorType::Q8_0, w.data(), 2, 100}, x.data(), 1, y.data(), pool, scratch),
                  std::invalid_argument);
  CHECK_THROWS_AS(matmul({TensorType::Q8_K, w.data(), 2, 256}, x.data(), 1, y.data(), pool, scratch),
                  std::invalid_argument);
  const WeightMatrix ws[] = {{TensorType::Q8_0, w.data(), 2, 64}, {TensorType::Q8_0, w.data(), 2, 96}};
  float* const ys[] = {y.data(), y.data()};
  CHECK_THROWS_AS(matmul_many(ws, x.data(), 1, ys, pool, scratch), std::invalid_argument);
  CHECK_THROWS_AS(matmul_many(ws, x.data(), 1, std::span<float* const>(ys, 1), pool, scratch), std::invalid_argument);
  CHECK_NOTHROW(matmul({TensorType::Q8_0, w.data(), 2, 64}, x.data(), 0, y.data(), pool, scratch));
}

TEST_CASE("an instruction set the CPU lacks cannot be forced", "[matmul]") {
  if (detect_isa() == Isa::avx512) {
    SUCCEED("this CPU has every instruction set");
    return;
  }
  CHECK_THROWS_AS(set_isa_override(Isa::avx512), std::invalid_argument);
  CHECK(active_isa() == detect_isa());
}

// The lane layout (repack.h) changes where the kernels find each weight, not
// what they compute: every token count, both the few-token and the packed
// kernels (from 32 tokens, see matmul.cpp), odd super-block counts (Q4_K pads
// its last group), rows that end in a partial group of 1..15 blocks (the
// legacy formats), several threads.
TEST_CASE("lane-layout weights give bitwise what the GGUF layout gives", "[matmul]") {
  if (detect_isa() != Isa::avx512) {
    SUCCEED("no AVX-512 here: the lane kernels are not used on this CPU");
    return;
  }
  ThreadPool pool(2);
  MatmulScratch scratch;
  uint32_t seed = 1300;
  for_each_laned_matrix(pool, seed, [&](const Matrix& m, const WeightMatrix& laned) {
    for (int n_tokens : {1, 2, 3, 5, 8, 9, 12, 16, 17, 29, 32, 33, 48, 130, 144}) {
      const auto x = gaussian(static_cast<size_t>(m.cols * n_tokens), ++seed);
      const auto want = run(m, x, n_tokens, pool, scratch);
      std::vector<float> got(want.size(), NAN);
      matmul(laned, x.data(), n_tokens, got.data(), pool, scratch);
      INFO(troupe::tensor_type_name(m.type) << " cols " << m.cols << " rows " << m.rows << " tokens " << n_tokens);
      REQUIRE(got == want);
    }
  });
}

// The AVX2 lane kernels (matmul_lanes_avx2.cpp) read the same layout 8 units
// at a time in their own float order: within the scalar path's rounding of
// it, and a token's outputs bitwise the same alone and in any batch. Shapes
// end in partial groups of 1..15 blocks (legacy formats) and odd super-block
// counts (Q4_K's last group holds one).
TEST_CASE("AVX2 lane kernels agree with the scalar path and do not depend on the batch", "[matmul]") {
  if (detect_isa() < Isa::avx2) {
    SUCCEED("no AVX2 here: the AVX2 lane kernels are not used on this CPU");
    return;
  }
  ThreadPool pool(2);
  MatmulScratch scratch;
  uint32_t seed = 1700;
  for_each_laned_matrix(pool, seed, [&](const Matrix& m, const WeightMatrix& laned) {
    const int64_t rows = m.rows, cols = m.cols;
    const auto probe = gaussian(static_cast<size_t>(cols), ++seed);
    std::vector<float> alone(static_cast<size_t>(rows));
    {
      IsaGuard g(Isa::avx2);
      matmul(laned, probe.data(), 1, alone.data(), pool, scratch);
    }
    for (int n_tokens : {1, 2, 3, 5, 8, 9, 17, 33, 130}) {
      auto x = gaussian(static_cast<size_t>(cols * n_tokens), ++seed);
      const int at = n_tokens / 2;
      std::copy(probe.begin(), probe.end(), x.begin() + at * cols);
      std::vector<float> want;
      {
        IsaGuard g(Isa::scalar);
        want = run(m, x, n_tokens, pool, scratch);
      }
      IsaGuard g(Isa::avx2);
      std::vector<float> got(want.size(), NAN);
      matmul(laned, x.data(), n_tokens, got.data(), pool, scratch);
      for (int t = 0; t < n_tokens; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          INFO(troupe::tensor_type_name(m.type) << " cols " << cols << " rows " << rows << " tokens " << n_tokens
                                                << " row " << r << " token " << t);
          REQUIRE(std::fabs(got[t * rows + r] - want[t * rows + r]) <= 2 * float_slack(m, &x[t * cols], r));
          if (t == at) REQUIRE(got[t * rows + r] == alone[r]);
        }
    }
  });
}

TEST_CASE("lane layouts exist for the formats that have lane kernels, and the scalar path ignores them",
          "[matmul]") {
  ThreadPool pool(1);
  MatmulScratch scratch;
  CHECK(repack_lanes(make_matrix(TensorType::Q5_K, 4, 256, 1).view(), pool) == nullptr);
  CHECK(repack_lanes(make_matrix(TensorType::F16, 4, 256, 1).view(), pool) == nullptr);
  CHECK(lane_row_bytes(TensorType::Q4_K, 1280) == 3 * 288);  // 5 super-blocks: 3 groups, the last half empty
  CHECK(lane_row_bytes(TensorType::Q6_K, 1280) == 5 * 210);
  CHECK(lane_row_bytes(TensorType::Q5_0, 896) == row_bytes(TensorType::Q5_0, 896));
  CHECK_THROWS_AS(lane_row_bytes(TensorType::Q5_K, 256), std::invalid_argument);
  // The scalar path reads data, never the lane copy: a lane copy of other
  // weights must not change its results.
  const Matrix m = make_matrix(TensorType::Q4_K, 9, 512, 2), other = make_matrix(TensorType::Q4_K, 9, 512, 3);
  const auto wrong = repack_lanes(other.view(), pool);
  WeightMatrix w = m.view();
  w.lanes = wrong.get();
  const auto x = gaussian(512 * 3, 4);
  {
    IsaGuard g(Isa::scalar);
    std::vector<float> y(9 * 3);
    matmul(w, x.data(), 3, y.data(), pool, scratch);
    CHECK(y == run(m, x, 3, pool, scratch));
  }
}

// matmul.h promises every quantizer the scalar one's bytes. The AVX2 and
// AVX-512 ones share their layouts (matmul_skeleton.h) but round and sum with
// their own instructions; token 0 starts with a zero block (scale 0), token 1
// is all ties (scale 1, halves), token 2 spans 40 binades.
TEST_CASE("every instruction set's activation quantizer writes the scalar quantizer's bytes", "[matmul]") {
  using namespace troupe::cpu::detail;
  const std::pair<Isa, QuantizeFn> quantizers[] = {{Isa::avx2, quantize_avx2}, {Isa::avx512, quantize_avx512}};
  const int n_tokens = 3;
  for (ActLayout l : {ActLayout::q8, ActLayout::q8_biased, ActLayout::nib8, ActLayout::nib16, ActLayout::k_sb32,
                      ActLayout::k_sb16}) {
    const bool k = l == ActLayout::k_sb32 || l == ActLayout::k_sb16;
    for (int64_t cols : k ? std::vector<int64_t>{256, 512, 1280} : std::vector<int64_t>{32, 96, 160, 896}) {
      auto x = gaussian(static_cast<size_t>(cols * n_tokens), static_cast<uint32_t>(cols));
      for (int64_t i = 0; i < 32; ++i) x[i] = 0;
      for (int64_t i = 0; i < cols; ++i)
        x[cols + i] = i % 32 == 0 ? 127.0f : static_cast<float>((i * 37) % 254 - 127) / 2;
      for (int64_t i = 0; i < cols; ++i) x[2 * cols + i] *= std::exp2(static_cast<float>((i / 32) % 40 - 20));
      const auto quantized = [&](QuantizeFn fn) {
        ActView v;
        const int64_t bytes = place_activations(l, cols, n_tokens, nullptr, v);
        std::vector<uint8_t> buf(static_cast<size_t>(bytes + 64), 0x5A);  // bytes no quantizer writes stay 0x5A
        uint8_t* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
        place_activations(l, cols, n_tokens, base, v);
        for (int t = 0; t < n_tokens; ++t) fn(l, &x[t * cols], v, t);
        return std::vector<uint8_t>(base, base + bytes);
      };
      const auto want = quantized(quantize_scalar);
      for (const auto& [isa, fn] : quantizers) {
        if (isa > detect_isa()) continue;
        INFO(isa_name(isa) << " layout " << static_cast<int>(l) << " cols " << cols);
        CHECK(quantized(fn) == want);
      }
    }
  }
}
