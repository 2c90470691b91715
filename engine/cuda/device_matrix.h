#pragma once
// A weight matrix in device memory, row-major [rows][cols], in one of the
// formats the kernels read:
//
//   bf16  q: bfloat16 [rows][cols]
//   int8  q: int8 [rows][cols]        scales: half [rows][cols/32]        x = s*q
//   int4  q: uint8 [rows][cols/2]     scales: half2 (s, m) [rows][cols/32] x = s*q + m
//         within a 32-group, byte i holds element i (low nibble) and i+16 (high)
//
// int8 is Q8_0 with the scales moved out of the blocks (aligned 16-byte
// loads); int4 holds Q4_0 exactly (s = d, m = -8d) and Q4_K up to the f16
// rounding of d*scale and dmin*min.
#include <cstdint>

namespace troupe::cuda {

enum class DeviceFormat : uint8_t { bf16, int8, int4 };
const char* device_format_name(DeviceFormat f);

struct DeviceMatrix {
  DeviceFormat format = DeviceFormat::bf16;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* q = nullptr;
  const void* scales = nullptr;

  int64_t bytes() const;  // weights + scales
};

}  // namespace troupe::cuda
