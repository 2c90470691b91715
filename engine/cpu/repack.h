#pragma once
// Weight rows rearranged for the lane kernels: AVX-512 (matmul_lanes_avx512.cpp,
// decoded by lanes_avx512.h) and AVX2 (matmul_lanes_avx2.cpp, which reads each
// group as two halves of 8 units).
//
// A GGUF row stores each unit (a 32-value block of Q8_0/Q5_0/Q4_0 or
// sub-block of Q4_K, a 16-value group of Q6_K) contiguously, so a vpdpbusd leaves one unit's sum
// spread over 8 or 4 lanes and every unit costs a horizontal reduction. The
// lane layout puts 16 consecutive units side by side instead: 32-bit lane j of
// vector k holds values 4k..4k+3 of unit j. One vpdpbusd then advances all 16
// units, each unit's exact sum ends in its own lane, and no shuffles remain.
// Scales stay in GGUF's encodings, so a row takes the same bytes (Q4_K: plus
// zero padding up to an even number of super-blocks).
//
// Q4_K, per group of 16 units (2 super-blocks, 288 bytes):
//   [0, 16)    super-block 2g's header as in GGUF: d, dmin, 12 scale bytes
//   [16, 32)   super-block 2g+1's header (zeros where the row has none)
//   [32, 288)  4 vectors of 64 bytes; byte 4j+p of vector m holds value 8m+p
//              of unit j in its low nibble and value 8m+4+p in its high one
// Q6_K, per group of 16 units (1 super-block, 210 bytes):
//   [0, 128)   2 vectors: byte 4j+p of vector h holds the low 4 bits of value
//              8h+p of unit j (low nibble) and of value 8h+4+p (high nibble)
//   [128, 192) byte 4j+p: the high 2 bits of value 4k+p of unit j at bits 2k
//   [192, 210) the 16 signed scales and d, as in GGUF
// Q8_0, Q5_0, Q4_0, per group of n = 16 blocks (the row's last group may
// hold fewer; the row keeps its GGUF size):
//   n f16 scales;
//   Q5_0: the fifth bits, 4n per piece k from bit 4n * k, bit 4j + p for
//         value 4k + p of unit j;
//   Q8_0: 8 pieces of 4n bytes, byte 4j + p of piece k = code + 128 of value
//         4k + p of unit j; Q5_0/Q4_0: 4 vectors of 4n bytes of nibbles,
//         low: piece 2m, high: piece 2m + 1 (the 4 low bits of the code).
#include <cstdint>
#include <memory>

#include "engine/cpu/matmul.h"
#include "engine/tensor_type.h"

namespace troupe::cpu {

// Formats with a lane layout.
bool has_lane_layout(TensorType type);

// Bytes of one row of `cols` values in the lane layout.
int64_t lane_row_bytes(TensorType type, int64_t cols);

// Rows [row_begin, row_end) of w (GGUF layout) into dst, which holds the whole
// matrix in the lane layout (lane_row_bytes per row).
void repack_lane_rows(const WeightMatrix& w, int64_t row_begin, int64_t row_end, uint8_t* dst);

// The whole matrix in the lane layout, in 64-byte aligned memory, repacked on
// the pool's threads; null for formats without one.
struct LaneBuffer {
  void operator()(uint8_t* p) const;
};
std::unique_ptr<uint8_t, LaneBuffer> repack_lanes(const WeightMatrix& w, ThreadPool& pool);

}  // namespace troupe::cpu
