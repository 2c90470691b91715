// Exact decimals for the JSON Schema converter (json_schema_numbers.h):
// digit strings, so that bounds and multiples past a double's precision are
// compared and stepped without rounding.
#include <algorithm>
#include <cmath>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/json_schema_numbers.h"

namespace troupe::grammar::schema {

int compare_magnitude(const Decimal& a, const Decimal& b) {
  if (a.whole.size() != b.whole.size()) return a.whole.size() < b.whole.size() ? -1 : 1;
  if (const int c = a.whole.compare(b.whole)) return c < 0 ? -1 : 1;
  if (const int c = a.frac.compare(b.frac)) return c < 0 ? -1 : 1;  // no trailing zeros: text order is value order
  return 0;
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.sign() != b.sign()) return a.sign() < b.sign() ? -1 : 1;
  const int m = compare_magnitude(a, b);
  return a.sign() < 0 ? -m : m;
}

Decimal decimal_of(const ojson& v) {
  const std::string t = v.dump();  // "-12", "1.5", "1e+30", "2.5e-07"
  Decimal d;
  std::string digits;
  int64_t point = -1, exp = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '-' && i == 0) d.negative = true;
    else if (c == '.') point = static_cast<int64_t>(digits.size());
    else if (c == 'e' || c == 'E') {
      exp = std::stoll(t.substr(i + 1));
      break;
    } else digits += c;
  }
  if (point < 0) point = static_cast<int64_t>(digits.size());
  point += exp;
  const auto n = static_cast<int64_t>(digits.size());
  if (point <= 0) d.whole = "0", d.frac = std::string(static_cast<size_t>(-point), '0') + digits;
  else if (point >= n) d.whole = digits + std::string(static_cast<size_t>(point - n), '0');
  else d.whole = digits.substr(0, static_cast<size_t>(point)), d.frac = digits.substr(static_cast<size_t>(point));
  d.whole.erase(0, std::min(d.whole.find_first_not_of('0'), d.whole.size() - 1));
  while (!d.frac.empty() && d.frac.back() == '0') d.frac.pop_back();
  return d;
}

Decimal step(const Decimal& d, int64_t exp10, bool up) {
  // As integers scaled by 10^scale: digit strings, then back.
  const int64_t scale = std::max<int64_t>(static_cast<int64_t>(d.frac.size()), -exp10);
  std::string a = d.whole + d.frac + std::string(static_cast<size_t>(scale - static_cast<int64_t>(d.frac.size())), '0');
  std::string u = "1" + std::string(static_cast<size_t>(exp10 + scale), '0');
  auto less = [](const std::string& x, const std::string& y) {
    const size_t i = x.find_first_not_of('0'), j = y.find_first_not_of('0');
    const std::string_view p = i == std::string::npos ? "" : std::string_view(x).substr(i);
    const std::string_view q = j == std::string::npos ? "" : std::string_view(y).substr(j);
    return p.size() != q.size() ? p.size() < q.size() : p < q;
  };
  auto add = [](std::string x, std::string y) {
    if (x.size() < y.size()) std::swap(x, y);
    y.insert(0, x.size() - y.size(), '0');
    int carry = 0;
    for (size_t i = x.size(); i-- > 0;) {
      const int v = (x[i] - '0') + (y[i] - '0') + carry;
      x[i] = static_cast<char>('0' + v % 10), carry = v / 10;
    }
    return carry ? "1" + x : x;
  };
  auto sub = [](std::string x, std::string y) {  // x >= y
    const size_t n = std::max(x.size(), y.size());
    x.insert(0, n - x.size(), '0');
    y.insert(0, n - y.size(), '0');
    int borrow = 0;
    for (size_t i = x.size(); i-- > 0;) {
      int v = (x[i] - '0') - (y[i] - '0') - borrow;
      borrow = v < 0;
      x[i] = static_cast<char>('0' + (v + 10) % 10);
    }
    return x;
  };
  // value = sign * a; result = value ± u.
  const bool neg = d.sign() < 0;
  std::string mag;
  bool rneg;
  if (neg == !up) {  // away from 0: the magnitude grows
    mag = add(a, u), rneg = neg;
  } else if (less(u, a)) {
    mag = sub(a, u), rneg = neg;
  } else {
    mag = sub(u, a), rneg = !neg;
  }
  if (mag.size() < static_cast<size_t>(scale) + 1) mag.insert(0, static_cast<size_t>(scale) + 1 - mag.size(), '0');
  Decimal r;
  r.negative = rneg;
  r.whole = mag.substr(0, mag.size() - static_cast<size_t>(scale));
  r.frac = mag.substr(mag.size() - static_cast<size_t>(scale));
  r.whole.erase(0, std::min(r.whole.find_first_not_of('0'), r.whole.size() - 1));
  while (!r.frac.empty() && r.frac.back() == '0') r.frac.pop_back();
  return r;
}

int64_t sixteenth_digit(const Decimal& d) {
  if (d.whole != "0") return static_cast<int64_t>(d.whole.size()) - 16;
  return -static_cast<int64_t>(d.frac.find_first_not_of('0')) - 16;
}

bool multiple_of(const Decimal& x, const Decimal& m, const std::string& ptr) {
  const size_t scale = std::max(x.frac.size(), m.frac.size());
  const std::string xs = x.whole + x.frac + std::string(scale - x.frac.size(), '0');
  std::string ms = m.whole + m.frac + std::string(scale - m.frac.size(), '0');
  ms.erase(0, std::min(ms.find_first_not_of('0'), ms.size() - 1));
  if (ms.size() > 18) throw SchemaError("multipleOf", ptr, "past 18 digits");
  const uint64_t mod = std::stoull(ms);
  uint64_t r = 0;
  for (char c : xs) r = (r * 10 + static_cast<uint64_t>(c - '0')) % mod;
  return r == 0;
}

std::string number_text(const ojson& v) {
  if (v.is_number_integer()) return v.dump();
  const double d = v.get<double>();
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) return std::to_string(static_cast<int64_t>(d));
  return v.dump();
}

}  // namespace troupe::grammar::schema
