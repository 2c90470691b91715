// Sets of code points (CharSet, regex_to_gbnf.h), and UTF-8 read into code
// points and written back.
#include <algorithm>
#include <stdexcept>

#include "engine/grammar/regex_to_gbnf.h"
#include "engine/grammar/utf8_ranges.h"

namespace troupe::grammar::detail {

namespace {

void normalize(std::vector<CharSet::Range>& r) {
  std::sort(r.begin(), r.end());
  std::vector<CharSet::Range> out;
  for (const auto& x : r) {
    if (!out.empty() && x.lo <= out.back().hi + 1) out.back().hi = std::max(out.back().hi, x.hi);
    else out.push_back(x);
  }
  r = std::move(out);
}

}  // namespace

CharSet& CharSet::add(char32_t lo, char32_t hi) {
  hi = std::min(hi, kMax);
  if (lo > hi) return *this;
  // Surrogates are no scalar values: no UTF-8 text holds them.
  if (lo < kSurrogateLo) r_.push_back({lo, std::min<char32_t>(hi, kSurrogateLo - 1)});
  if (hi > kSurrogateHi) r_.push_back({std::max<char32_t>(lo, kSurrogateHi + 1), hi});
  normalize(r_);
  return *this;
}

CharSet& CharSet::add(const CharSet& other) {
  r_.insert(r_.end(), other.r_.begin(), other.r_.end());
  normalize(r_);
  return *this;
}

CharSet CharSet::complement() const {
  CharSet out;
  char32_t next = 0;
  for (const auto& x : r_) {
    if (x.lo > next) out.add(next, x.lo - 1);
    next = x.hi + 1;
  }
  if (next <= kMax) out.add(next, kMax);
  return out;
}

CharSet CharSet::operator&(const CharSet& other) const {
  CharSet out;
  size_t i = 0, j = 0;
  while (i < r_.size() && j < other.r_.size()) {
    const char32_t lo = std::max(r_[i].lo, other.r_[j].lo), hi = std::min(r_[i].hi, other.r_[j].hi);
    if (lo <= hi) out.r_.push_back({lo, hi});
    if (r_[i].hi < other.r_[j].hi) ++i;
    else ++j;
  }
  return out;
}

bool CharSet::contains(char32_t c) const {
  auto it = std::upper_bound(r_.begin(), r_.end(), c, [](char32_t v, const Range& x) { return v < x.lo; });
  return it != r_.begin() && std::prev(it)->hi >= c;
}

// ---- UTF-8 ------------------------------------------------------------------

void put_utf8(std::string& out, char32_t c) { append_utf8(out, static_cast<uint32_t>(c)); }

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + static_cast<size_t>(len) > s.size()) throw std::invalid_argument("not valid UTF-8");
    uint32_t c = len == 1 ? b : b & (0x7Fu >> len);
    for (int k = 1; k < len; ++k) {
      const auto n = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((n & 0xC0) != 0x80) throw std::invalid_argument("not valid UTF-8");
      c = (c << 6) | (n & 0x3F);
    }
    static constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kMinOfLength[len] || c > CharSet::kMax || (c >= CharSet::kSurrogateLo && c <= CharSet::kSurrogateHi))
      throw std::invalid_argument("not valid UTF-8");
    out.push_back(c);
    i += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace troupe::grammar::detail
