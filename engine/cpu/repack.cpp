#include "engine/cpu/repack.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace troupe::cpu {
namespace {

constexpr int64_t kQ4KBlock = 144, kQ4KGroup = 288;
constexpr int64_t kQ6KBlock = 210;

// The 256 codes (0..15) of a Q4_K super-block, value i of sub-block j at 32j + i.
void q4_k_codes(const uint8_t* block, uint8_t codes[256]) {
  const uint8_t* qs = block + 16;
  for (int g = 0; g < 4; ++g)
    for (int l = 0; l < 32; ++l) {
      codes[64 * g + l] = qs[32 * g + l] & 0x0F;
      codes[64 * g + 32 + l] = qs[32 * g + l] >> 4;
    }
}

// The 256 codes (0..63) of a Q6_K super-block in value order.
void q6_k_codes(const uint8_t* block, uint8_t codes[256]) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  for (int h = 0; h < 2; ++h)
    for (int e = 0; e < 128; ++e) {
      const int l = e & 31, quarter = e >> 5;
      const uint8_t low = ql[64 * h + (quarter & 1) * 32 + l];
      const int nib = quarter < 2 ? (low & 0x0F) : (low >> 4);
      codes[128 * h + e] = static_cast<uint8_t>(nib | (((qh[32 * h + l] >> (2 * quarter)) & 3) << 4));
    }
}

void repack_q4_k_row(const uint8_t* src, int64_t cols, uint8_t* dst) {
  const int64_t blocks = cols / 256;
  uint8_t codes[2][256];
  for (int64_t g = 0; g < (blocks + 1) / 2; ++g) {
    uint8_t* out = dst + kQ4KGroup * g;
    std::memset(out, 0, kQ4KGroup);
    const int halves = 2 * g + 1 < blocks ? 2 : 1;
    for (int s = 0; s < halves; ++s) {
      const uint8_t* block = src + kQ4KBlock * (2 * g + s);
      std::memcpy(out + 16 * s, block, 16);
      q4_k_codes(block, codes[s]);
    }
    for (int j = 0; j < 8 * halves; ++j) {
      const uint8_t* unit = codes[j / 8] + 32 * (j % 8);
      for (int m = 0; m < 4; ++m)
        for (int p = 0; p < 4; ++p)
          out[32 + 64 * m + 4 * j + p] = static_cast<uint8_t>(unit[8 * m + p] | unit[8 * m + 4 + p] << 4);
    }
  }
}

void repack_q6_k_row(const uint8_t* src, int64_t cols, uint8_t* dst) {
  uint8_t codes[256];
  for (int64_t g = 0; g < cols / 256; ++g) {
    const uint8_t* block = src + kQ6KBlock * g;
    uint8_t* out = dst + kQ6KBlock * g;
    q6_k_codes(block, codes);
    for (int j = 0; j < 16; ++j) {
      const uint8_t* unit = codes + 16 * j;
      for (int p = 0; p < 4; ++p) {
        for (int h = 0; h < 2; ++h)
          out[64 * h + 4 * j + p] = static_cast<uint8_t>((unit[8 * h + p] & 0x0F) | (unit[8 * h + 4 + p] & 0x0F) << 4);
        uint8_t high = 0;
        for (int k = 0; k < 4; ++k) high = static_cast<uint8_t>(high | (unit[4 * k + p] >> 4) << (2 * k));
        out[128 + 4 * j + p] = high;
      }
    }
    std::memcpy(out + 192, block + 192, 18);
  }
}

int64_t legacy_block_bytes(TensorType t) { return t == TensorType::Q8_0 ? 34 : t == TensorType::Q5_0 ? 22 : 18; }

// The 32 codes of a Q8_0 (+ 128), Q5_0 (0..31) or Q4_0 (0..15) block.
void legacy_codes(TensorType t, const uint8_t* block, uint8_t codes[32]) {
  if (t == TensorType::Q8_0) {
    for (int j = 0; j < 32; ++j) codes[j] = static_cast<uint8_t>(block[2 + j] ^ 0x80);
    return;
  }
  const uint8_t* qs = block + (t == TensorType::Q5_0 ? 6 : 2);
  uint32_t qh = 0;
  if (t == TensorType::Q5_0) std::memcpy(&qh, block + 2, 4);
  for (int j = 0; j < 16; ++j) {
    codes[j] = static_cast<uint8_t>((qs[j] & 0x0F) | ((qh >> j) & 1) << 4);
    codes[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
  }
}

void repack_legacy_row(TensorType t, const uint8_t* src, int64_t cols, uint8_t* dst) {
  const int64_t blocks = cols / 32, bb = legacy_block_bytes(t);
  uint8_t codes[16][32];
  for (int64_t g = 0; 16 * g < blocks; ++g) {
    const int n = static_cast<int>(blocks - 16 * g < 16 ? blocks - 16 * g : 16);
    const uint8_t* in = src + 16 * bb * g;
    uint8_t* out = dst + 16 * bb * g;
    std::memset(out, 0, static_cast<size_t>(bb * n));
    for (int j = 0; j < n; ++j) {
      std::memcpy(out + 2 * j, in + bb * j, 2);
      legacy_codes(t, in + bb * j, codes[j]);
    }
    if (t == TensorType::Q8_0) {
      for (int k = 0; k < 8; ++k)
        for (int j = 0; j < n; ++j) std::memcpy(out + 2 * n + 4 * n * k + 4 * j, codes[j] + 4 * k, 4);
      continue;
    }
    uint8_t* bits = out + 2 * n;
    uint8_t* nib = out + (t == TensorType::Q5_0 ? 6 : 2) * n;
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < 4; ++p) {
        for (int m = 0; m < 4; ++m)
          nib[4 * n * m + 4 * j + p] =
              static_cast<uint8_t>((codes[j][8 * m + p] & 0x0F) | (codes[j][8 * m + 4 + p] & 0x0F) << 4);
        if (t != TensorType::Q5_0) continue;
        for (int k = 0; k < 8; ++k) {
          const int bit = 4 * n * k + 4 * j + p;
          bits[bit / 8] = static_cast<uint8_t>(bits[bit / 8] | (codes[j][4 * k + p] >> 4) << (bit % 8));
        }
      }
  }
}

}  // namespace

bool has_lane_layout(TensorType type) {
  switch (type) {
    case TensorType::Q4_K:
    case TensorType::Q6_K:
    case TensorType::Q8_0:
    case TensorType::Q5_0:
    case TensorType::Q4_0: return true;
    default: return false;
  }
}

int64_t lane_row_bytes(TensorType type, int64_t cols) {
  const int64_t blocks = cols / 256;
  if (type == TensorType::Q4_K) return kQ4KGroup * ((blocks + 1) / 2);
  if (type == TensorType::Q6_K) return kQ6KBlock * blocks;
  if (has_lane_layout(type)) return row_bytes(type, cols);
  throw std::invalid_argument("no lane layout for " + std::string(tensor_type_name(type)));
}

void repack_lane_rows(const WeightMatrix& w, int64_t row_begin, int64_t row_end, uint8_t* dst) {
  if (!has_lane_layout(w.type) || w.cols % traits(w.type).block_elems != 0)
    throw std::invalid_argument("repack_lane_rows: no lane layout for this matrix");
  const int64_t src_bytes = row_bytes(w.type, w.cols), dst_bytes = lane_row_bytes(w.type, w.cols);
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; ++r) {
    if (w.type == TensorType::Q4_K)
      repack_q4_k_row(src + r * src_bytes, w.cols, dst + r * dst_bytes);
    else if (w.type == TensorType::Q6_K)
      repack_q6_k_row(src + r * src_bytes, w.cols, dst + r * dst_bytes);
    else
      repack_legacy_row(w.type, src + r * src_bytes, w.cols, dst + r * dst_bytes);
  }
}

void LaneBuffer::operator()(uint8_t* p) const { std::free(p); }

std::unique_ptr<uint8_t, LaneBuffer> repack_lanes(const WeightMatrix& w, ThreadPool& pool) {
  if (!has_lane_layout(w.type) || w.cols % traits(w.type).block_elems != 0 || w.rows <= 0) return nullptr;
  // 64 bytes spare (zeros): a partial group's pieces are read as whole 64-byte loads.
  const int64_t rows_bytes = lane_row_bytes(w.type, w.cols) * w.rows, bytes = rows_bytes + 64;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, static_cast<size_t>((bytes + 63) / 64 * 64)));
  if (!p) throw std::bad_alloc();
  std::memset(p + rows_bytes, 0, static_cast<size_t>((bytes + 63) / 64 * 64 - rows_bytes));
  std::unique_ptr<uint8_t, LaneBuffer> out(p);
  pool.parallel_for(w.rows, [&w, p](int64_t b, int64_t e) { repack_lane_rows(w, b, e, p); });
  return out;
}

}  // namespace troupe::cpu
