#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "engine/cpu/half.h"
#include "engine/cpu/isa.h"
#include "engine/cpu/kv_kernels.h"
#include "tests/engine/random_data.h"

using namespace troupe::cpu;


TEST_CASE("the half-precision KV kernels give the scalar path's results on every instruction set") {
  for (size_t n : {1u, 7u, 64u, 128u, 133u}) {
    const auto x = troupe::test::gaussian(n, 1, 2.0f), y = troupe::test::gaussian(n, 2, 2.0f);
    std::vector<uint16_t> xs(n), ys(n);
    clear_isa_override();
    set_isa_override(Isa::scalar);
    to_f16(x.data(), xs.data(), static_cast<int64_t>(n));
    to_f16(y.data(), ys.data(), static_cast<int64_t>(n));
    const float dot_scalar = dot_f16(xs.data(), ys.data(), static_cast<int64_t>(n));
    std::vector<float> acc_scalar(y);
    axpy_f16(0.5f, xs.data(), acc_scalar.data(), static_cast<int64_t>(n));
    std::vector<float> rounded_scalar(x);
    round_through_f16(rounded_scalar.data(), static_cast<int64_t>(n));
    clear_isa_override();
    if (detect_isa() == Isa::scalar) continue;

    std::vector<uint16_t> xv(n);
    to_f16(x.data(), xv.data(), static_cast<int64_t>(n));
    CHECK(xv == xs);  // conversion is exact rounding: bitwise equal
    std::vector<float> rounded(x);
    round_through_f16(rounded.data(), static_cast<int64_t>(n));
    CHECK(rounded == rounded_scalar);
    for (size_t i = 0; i < n; ++i) CHECK(rounded[i] == fp16_to_fp32(xs[i]));
    CHECK(dot_f16(xs.data(), ys.data(), static_cast<int64_t>(n)) == Approx(dot_scalar).epsilon(1e-5));
    std::vector<float> acc(y);
    axpy_f16(0.5f, xs.data(), acc.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) CHECK(acc[i] == Approx(acc_scalar[i]).epsilon(1e-6));
  }
}
