#include "engine/grammar/utf8_ranges.h"

#include <algorithm>
#include <cstdio>

namespace troupe::grammar {
namespace {

constexpr uint32_t kMax = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int encoded_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }
uint32_t max_of_length(int n) { return n == 1 ? 0x7F : n == 2 ? 0x7FF : n == 3 ? 0xFFFF : kMax; }

std::string encode(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

// [lo, hi] of one encoded length.
void split(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  const int n = encoded_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = encode(lo), b = encode(hi);
  std::vector<ByteRange> seq;
  for (size_t k = 0; k < a.size(); ++k) seq.push_back({static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k])});
  out.push_back(std::move(seq));
}

}  // namespace

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

CodePointRanges normalize(CodePointRanges ranges) {
  CodePointRanges cut;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMax);
    if (lo > hi) continue;
    if (lo < kSurrogateLo && hi >= kSurrogateLo) cut.emplace_back(lo, kSurrogateLo - 1), lo = kSurrogateLo;
    if (lo >= kSurrogateLo && lo <= kSurrogateHi) lo = kSurrogateHi + 1;
    if (lo <= hi) cut.emplace_back(lo, hi);
  }
  std::sort(cut.begin(), cut.end());
  CodePointRanges out;
  for (const auto& [lo, hi] : cut) {
    if (!out.empty() && lo <= out.back().second + 1) out.back().second = std::max(out.back().second, hi);
    else out.emplace_back(lo, hi);
  }
  return out;
}

CodePointRanges complement(const CodePointRanges& ranges) {
  CodePointRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMax) out.emplace_back(next, kMax);
  return normalize(std::move(out));
}

std::vector<std::vector<ByteRange>> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<std::vector<ByteRange>> out;
  for (const auto& [a, b] : normalize({{lo, hi}})) {
    uint32_t start = a;
    while (start <= b) {
      const uint32_t end = std::min(b, max_of_length(encoded_length(start)));
      split(start, end, out);
      if (end == b) break;
      start = end + 1;
    }
  }
  return out;
}

std::string text_hash(std::string_view text) {
  // Two FNV-1a lanes with different bases: 128 bits, so a collision is not a
  // practical concern even before the caches compare the text.
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : text) {
    a = (a ^ c) * 0x100000001b3ull;
    b = (b ^ (c + 0x9e)) * 0x100000001b3ull;
  }
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace troupe::grammar
