// JSON number texts in a range, or of a sign, as grammar expressions
// (json_schema_numbers.h): one digit position at a time.
#include <algorithm>

#include "engine/grammar/json_schema_numbers.h"
#include "engine/grammar/json_schema_text.h"

namespace troupe::grammar::schema {

Expr dec_digit(int lo, int hi) {
  if (lo == hi) return text(std::string(1, static_cast<char>('0' + lo)));
  return chars(CharSet(static_cast<char32_t>('0' + lo), static_cast<char32_t>('0' + hi)));
}

namespace {

// Digit strings, as naturals: one more, one less (s > 0).
std::string increment(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '9') {
      ++s[i];
      return s;
    }
    s[i] = '0';
  }
  return "1" + s;
}

std::string decrement(std::string s) {
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] != '0') {
      --s[i];
      break;
    }
    s[i] = '9';
  }
  if (s.size() > 1 && s[0] == '0') s.erase(0, 1);
  return s;
}

bool less_natural(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

// Strings of as many digits as `a` and `b` whose value lies in [a, b].
Expr digits_between(std::string_view a, std::string_view b) {
  if (a.empty()) return empty();
  const size_t rest = a.size() - 1;
  if (a[0] == b[0]) return seq({text(std::string(1, a[0])), digits_between(a.substr(1), b.substr(1))});
  const bool lo_full = a.find_first_not_of('0', 1) == std::string_view::npos;
  const bool hi_full = b.find_first_not_of('9', 1) == std::string_view::npos;
  int lo = a[0] - '0', hi = b[0] - '0';
  std::vector<Expr> alts;
  if (!lo_full) alts.push_back(seq({text(std::string(1, a[0])), digits_between(a.substr(1), std::string(rest, '9'))})), ++lo;
  if (!hi_full) --hi;
  if (lo <= hi) alts.push_back(seq({dec_digit(lo, hi), rep(dec_digit(0, 9), static_cast<int32_t>(rest), static_cast<int32_t>(rest))}));
  if (!hi_full) alts.push_back(seq({text(std::string(1, b[0])), digits_between(std::string(rest, '0'), b.substr(1))}));
  return alt(std::move(alts));
}

// Decimal naturals without leading zeros in [lo, hi]; no hi: unbounded.
Expr natural_range(const std::string& lo, const std::optional<std::string>& hi) {
  if (hi && less_natural(*hi, lo)) return nothing();
  std::vector<Expr> alts;
  const size_t w_lo = lo.size(), w_hi = hi ? hi->size() : w_lo;
  for (size_t w = w_lo; w <= w_hi; ++w) {
    std::string a = lo;
    if (w != w_lo) a.assign(1, '1').append(w - 1, '0');  // not "1" + string: GCC 12 reports a false -Wrestrict
    const std::string b = hi && w == w_hi ? *hi : std::string(w, '9');
    alts.push_back(digits_between(a, b));
  }
  if (!hi) alts.push_back(seq({dec_digit(1, 9), rep(dec_digit(0, 9), static_cast<int32_t>(w_lo), -1)}));
  return alt(std::move(alts));
}

// Fraction digit strings s, read as 0.s (the empty string, no fraction, is
// 0), with 0.s at least 0.lo (above it if lo_x) and, given hi, at most 0.hi
// (below it if hi_x). lo and hi have no trailing zeros; lo <= hi.
struct FracSet {
  bool empty_ok;
  Expr nonempty;
};

FracSet fractions(std::string_view lo, bool lo_x, std::optional<std::string_view> hi, bool hi_x) {
  const Expr digit = dec_digit(0, 9);
  if (hi && hi->empty()) {  // 0.s <= 0: zeros only, where 0 meets lo
    if (hi_x || !lo.empty() || lo_x) return {false, nothing()};
    return {true, rep(text("0"), 1, -1)};
  }
  const bool lo_free = lo.empty() && !lo_x;
  if (!hi) {
    if (lo_free) return {true, rep(digit, 1, -1)};
    if (lo.empty()) return {false, seq({star(text("0")), dec_digit(1, 9), star(digit)})};
  }
  const int a0 = lo.empty() ? 0 : lo[0] - '0';
  const int b0 = hi ? (*hi)[0] - '0' : 10;
  std::vector<Expr> alts;
  const int free_lo = lo_free ? a0 : a0 + 1, free_hi = b0 - 1;
  if (free_lo <= free_hi) alts.push_back(seq({dec_digit(free_lo, std::min(free_hi, 9)), star(digit)}));
  auto first = [&](int d) {
    const bool at_lo = !lo_free && d == a0, at_hi = hi && d == b0;
    std::optional<std::string_view> th;
    if (at_hi) th = hi->substr(1);
    const FracSet t = fractions(at_lo && !lo.empty() ? lo.substr(1) : std::string_view{}, at_lo && lo_x, th, at_hi && hi_x);
    return seq({text(std::string(1, static_cast<char>('0' + d))), t.empty_ok ? opt(t.nonempty) : t.nonempty});
  };
  if (!lo_free) alts.push_back(first(a0));
  if (hi && (lo_free || b0 != a0)) alts.push_back(first(b0));
  return {lo_free, alt(std::move(alts))};
}

// Unsigned decimal texts (no exponent) whose value lies between lo and hi
// (none: unbounded).
Expr magnitudes(const Decimal& lo, bool lo_x, const std::optional<Decimal>& hi, bool hi_x, Numbers kind) {
  if (hi) {
    const int c = compare_magnitude(lo, *hi);
    if (c > 0 || (c == 0 && (lo_x || hi_x))) return nothing();
  }
  // Non-integers: the fraction is above 0 where the bound leaves it free.
  const bool above_zero = kind == Numbers::non_integers;
  auto with = [&](const std::string& whole, const FracSet& f) -> Expr {
    if (kind == Numbers::integers) return f.empty_ok ? text(whole) : nothing();
    const Expr dot = seq({text("."), f.nonempty});
    return seq({text(whole), f.empty_ok && !above_zero ? opt(dot) : dot});
  };
  const Expr digits = star(dec_digit(0, 9));
  const Expr any_fraction = kind == Numbers::all ? opt(seq({text("."), rep(dec_digit(0, 9), 1, -1)}))
                            : kind == Numbers::non_integers ? seq({text("."), digits, dec_digit(1, 9), digits})
                                                            : empty();
  std::vector<Expr> alts;
  if (hi && hi->whole == lo.whole) {
    alts.push_back(with(lo.whole, fractions(lo.frac, lo_x || (above_zero && lo.frac.empty()), std::string_view(hi->frac), hi_x)));
  } else {
    alts.push_back(with(lo.whole, fractions(lo.frac, lo_x || (above_zero && lo.frac.empty()), std::nullopt, false)));
    const std::optional<std::string> below = hi ? std::optional<std::string>(decrement(hi->whole)) : std::nullopt;
    alts.push_back(seq({natural_range(increment(lo.whole), below), any_fraction}));
    if (hi) alts.push_back(with(hi->whole, fractions("", above_zero, std::string_view(hi->frac), hi_x)));
  }
  return alt(std::move(alts));
}

}  // namespace

Expr number_range(const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi, Numbers kind) {
  if (lo && hi) {
    const int c = compare(lo->value, hi->value);
    if (c > 0 || (c == 0 && (lo->exclusive || hi->exclusive))) return nothing();
  }
  std::vector<Expr> alts;
  const Decimal zero;
  // Unsigned: the value is the magnitude.
  if (!hi || hi->value.sign() >= 0) {
    Decimal p = zero;
    bool px = false;
    if (lo && lo->value.sign() >= 0) p = lo->value, px = lo->exclusive;
    std::optional<Decimal> q;
    if (hi) q = hi->value.abs();
    alts.push_back(magnitudes(p, px, q, hi && hi->exclusive, kind));
  }
  // "-": the value is minus the magnitude.
  if (!lo || lo->value.sign() <= 0) {
    Decimal p = zero;
    bool px = false;
    if (hi && hi->value.sign() <= 0) p = hi->value.abs(), px = hi->exclusive;
    std::optional<Decimal> q;
    if (lo) q = lo->value.abs();
    alts.push_back(seq({text("-"), magnitudes(p, px, q, lo && lo->exclusive, kind)}));
  }
  return alt(std::move(alts));
}

Expr number_by_sign(bool negative, bool zero, bool positive) {
  const Expr digit = chars(CharSet('0', '9'));
  const Expr exp = opt(seq({chars(set_of(U"eE")), opt(chars(set_of(U"+-"))), rep(digit, 1, -1)}));
  const Expr nonzero =
      seq({alt({seq({chars(CharSet('1', '9')), star(digit), opt(seq({text("."), rep(digit, 1, -1)}))}),
                seq({text("0."), star(text("0")), chars(CharSet('1', '9')), star(digit)})}),
           exp});
  const Expr zeros = seq({text("0"), opt(seq({text("."), rep(text("0"), 1, -1)})), exp});
  std::vector<Expr> alts;
  if (negative) alts.push_back(seq({text("-"), nonzero}));
  if (zero) alts.push_back(seq({opt(text("-")), zeros}));
  if (positive) alts.push_back(nonzero);
  return alt(std::move(alts));
}

}  // namespace troupe::grammar::schema
