// Numbers lowered: ranges on plain decimal text, bounds at zero on any
// spelling, multipleOf as digits modulo the step (json_schema_converter.h).
#include <algorithm>
#include <map>
#include <tuple>

#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar::schema {

namespace {

// Whether r, followed by `zeros` implicit zeros, is a multiple of mod.
bool ends_multiple(int r, size_t zeros, int mod) {
  int64_t v = r;
  for (size_t i = 0; i < zeros; ++i) v = v * 10 % mod;
  return v % mod == 0;
}

// Multiples of mod / 10^places, sign aside, digit by digit: in state r the
// digits so far are r modulo mod; the integer part, then (for places > 0)
// up to `places` fraction digits and zeros.
class MultipleDigits {
 public:
  MultipleDigits(RuleBuilder& b, int mod, size_t places, const std::string& ptr)
      : b_(b), mod_(mod), places_(places), ptr_(ptr) {}

  // The multiples of the signs allowed.
  Expr by_sign(bool negative, bool zero, bool positive) {
    const std::vector<int32_t> whole = whole_rules();
    // A first digit 1-9; a sign where allowed.
    std::vector<Expr> nonzero;
    for (int d = 1; d < 10; ++d) nonzero.push_back(seq({dec_digit(d, d), ref(whole[static_cast<size_t>(d % mod_)])}));
    const Expr above_zero = alt(std::move(nonzero));
    // Zero itself ("0", "0.00") is a multiple; numbers below 1 with a
    // fraction ("0.05") are above zero.
    const Expr fraction_below_one = places_ > 0 ? seq({text("0."), fraction_nonzero(0, 0, false)}) : nothing();
    std::vector<Expr> alts;
    const Expr magnitude_above = alt({above_zero, fraction_below_one});
    if (positive) alts.push_back(magnitude_above);
    if (negative) alts.push_back(seq({text("-"), magnitude_above}));
    if (zero) alts.push_back(places_ > 0 ? seq({text("0"), opt(seq({text("."), rep(text("0"), 1, -1)}))}) : text("0"));
    return alt(std::move(alts));
  }

 private:
  // whole[r]: the rest of a number whose integer digits so far are r
  // modulo mod. All are reserved before any is defined: each refers to others.
  std::vector<int32_t> whole_rules() {
    std::vector<int32_t> whole(static_cast<size_t>(mod_));
    for (int r = 0; r < mod_; ++r) whole[static_cast<size_t>(r)] = b_.reserve("multiple", ptr_);
    for (int r = 0; r < mod_; ++r) {
      std::vector<Expr> alts{after_whole(r)};
      for (int d = 0; d < 10; ++d) alts.push_back(seq({dec_digit(d, d), ref(whole[static_cast<size_t>((r * 10 + d) % mod_)])}));
      b_.define(whole[static_cast<size_t>(r)], alt(std::move(alts)));
    }
    return whole;
  }

  // After the integer part, with value r: its fraction (scaled: r * 10^places so far).
  Expr after_whole(int r) {
    if (places_ == 0) return r == 0 ? empty() : nothing();
    std::vector<Expr> alts;
    if (ends_multiple(r, places_, mod_)) alts.push_back(empty());  // an integral multiple, written as an integer
    alts.push_back(seq({text("."), fraction(0, r)}));
    return alt(std::move(alts));
  }

  // k fraction digits written, value so far r.
  Expr fraction(size_t k, int r) {
    if (k == places_) return r == 0 ? star(text("0")) : nothing();
    if (auto it = fractions_.find({k, r}); it != fractions_.end()) return ref(it->second);
    const int32_t id = b_.reserve("multiple-fraction", ptr_);
    fractions_.emplace(std::pair{k, r}, id);
    std::vector<Expr> alts;
    if (k > 0 && ends_multiple(r, places_ - k, mod_)) alts.push_back(empty());
    for (int d = 0; d < 10; ++d) alts.push_back(seq({dec_digit(d, d), fraction(k + 1, (r * 10 + d) % mod_)}));
    b_.define(id, alt(std::move(alts)));
    return ref(id);
  }

  // Fractions (digits after "0.") of nonzero multiples: up to `places`
  // digits making a nonzero multiple of `mod`, then zeros.
  Expr fraction_nonzero(size_t k, int r, bool nonzero) {
    if (k == places_) return r == 0 && nonzero ? star(text("0")) : nothing();
    if (auto it = nonzero_fractions_.find({k, r, nonzero}); it != nonzero_fractions_.end()) return ref(it->second);
    const int32_t id = b_.reserve("multiple-fraction", ptr_);
    nonzero_fractions_.emplace(std::tuple{k, r, nonzero}, id);
    std::vector<Expr> alts;
    if (nonzero && ends_multiple(r, places_ - k, mod_)) alts.push_back(empty());
    for (int d = 0; d < 10; ++d)
      alts.push_back(seq({dec_digit(d, d), fraction_nonzero(k + 1, (r * 10 + d) % mod_, nonzero || d > 0)}));
    b_.define(id, alt(std::move(alts)));
    return ref(id);
  }

  RuleBuilder& b_;
  const int mod_;
  const size_t places_;
  const std::string& ptr_;
  std::map<std::pair<size_t, int>, int32_t> fractions_;
  std::map<std::tuple<size_t, int, bool>, int32_t> nonzero_fractions_;
};

}  // namespace

Expr Converter::lower_number(const Simple& s) {
  if (!s.multiples.empty()) return lower_multiples(s);
  const bool fractions = s.types & kFraction;
  // Numbers that are not integers (what `not: {type: integer}` leaves), in
  // plain decimal: a fraction with a digit other than 0.
  const Numbers kind = !fractions ? Numbers::integers : (s.types & kInteger) ? Numbers::all : Numbers::non_integers;
  if (kind == Numbers::non_integers && !s.lo.set && !s.hi.set) {
    const Expr digits = star(dec_digit(0, 9));
    return seq({opt(text("-")), alt({text("0"), seq({dec_digit(1, 9), digits})}), text("."), digits, dec_digit(1, 9), digits});
  }
  if (!s.lo.set && !s.hi.set) return ref(fractions ? sh_.number : sh_.integer);
  // Bounds at 0 hold exactly on any spelling, exponents included; other
  // bounds on plain decimal text (an exponent above a bound is no regular
  // language: 1e1, 10, 100e-1).
  const bool at_zero = (!s.lo.set || s.lo.value.zero()) && (!s.hi.set || s.hi.value.zero());
  if (kind == Numbers::all && exact_ && at_zero) {
    const bool negative = !s.lo.set, positive = !s.hi.set;
    const bool zero = !(s.lo.set && s.lo.exclusive) && !(s.hi.set && s.hi.exclusive);
    return number_by_sign(negative, zero, positive);
  }
  for (const Bound* b : {&s.lo, &s.hi})
    if (b->set && b->value.whole.size() + b->value.frac.size() > 400)
      throw SchemaError(b->keyword, b->ptr, "a bound of more than 400 digits");
  std::optional<NumberBound> lo, hi;
  if (s.lo.set) lo = generation_safe(s.lo, true, fractions);
  if (s.hi.set) hi = generation_safe(s.hi, false, fractions);
  return number_range(lo, hi, kind);
}

// multipleOf m = M / 10^k: the numbers whose digits, to k places, make a
// multiple of M: a machine of M states over the digits (M up to 1000).
// Integral multiples are written as integers. Generation refuses
// fractional ones: validators divide in doubles (Python's jsonschema
// finds 0.07 no multiple of 0.01).
Expr Converter::lower_multiples(const Simple& s) {
  const auto& [m, ptr_binding] = s.multiples.front();
  const std::string& ptr = ptr_binding;  // clang 14 cannot capture a structured binding
  for (const auto& [other, p] : s.multiples)
    if (compare(other, m) != 0) throw SchemaError("multipleOf", p, "two different multipleOf are not enforced");
  const size_t places = m.frac.size();
  if (places > 0 && !exact_)
    throw SchemaError("multipleOf", ptr,
                      "a fractional multipleOf is not written: validators divide in doubles and disagree (Python's "
                      "jsonschema finds 0.07 no multiple of 0.01)");
  std::string digits = m.whole + m.frac;
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  if (digits.size() > 4 || std::stoi(digits) > 1000) throw SchemaError("multipleOf", ptr, "multiples of more than 1000 units");
  const int mod = std::stoi(digits);
  // Integral multiples of 1: integers, in their range.
  if (mod == 1 && places == 0) {
    Simple ints = s;
    ints.multiples.clear();
    ints.types = kInteger;
    return lower_number(ints);
  }
  const bool lo_zero = s.lo.set && s.lo.value.zero(), hi_zero = s.hi.set && s.hi.value.zero();
  const bool sign_only = (!s.lo.set || lo_zero) && (!s.hi.set || hi_zero);
  if (!sign_only) {
    if (places > 0) throw SchemaError("multipleOf", ptr, "beside bounds other than 0, a fractional multipleOf is not enforced");
    return enumerated_multiples(s, mod, ptr);
  }
  const bool negative = !(s.lo.set && s.lo.value.sign() >= 0), positive = !(s.hi.set && s.hi.value.sign() <= 0);
  const bool zero = !(lo_zero && s.lo.exclusive) && !(hi_zero && s.hi.exclusive) && (!s.lo.set || s.lo.value.sign() <= 0) &&
                    (!s.hi.set || s.hi.value.sign() >= 0);
  return MultipleDigits(b_, mod, places, ptr).by_sign(negative, zero, positive);
}

// Integral multiples in a bounded range: each, where there are at most 1000.
Expr Converter::enumerated_multiples(const Simple& s, int mod, const std::string& ptr) {
  if (!s.lo.set || !s.hi.set) throw SchemaError("multipleOf", ptr, "beside a bound other than 0 on one side only: not enforced");
  for (const Bound* b : {&s.lo, &s.hi})
    if (b->value.whole.size() > 15) throw SchemaError("multipleOf", ptr, "beside bounds past 10^15: not enforced");
  auto to_int = [](const Decimal& d, bool up) {
    int64_t w = std::stoll(d.whole);
    if (!d.frac.empty() && up != (d.sign() < 0)) ++w;  // away from the whole part's floor/ceiling
    return d.sign() < 0 ? -w : w;
  };
  int64_t lo = to_int(s.lo.value, true), hi = to_int(s.hi.value, false);
  if (s.lo.exclusive && s.lo.value.frac.empty()) ++lo;
  if (s.hi.exclusive && s.hi.value.frac.empty()) --hi;
  int64_t first = lo % mod == 0 ? lo : lo + (mod - ((lo % mod) + mod) % mod);
  if (hi >= first && (hi - first) / mod >= 1000) throw SchemaError("multipleOf", ptr, "more than 1000 multiples in the range");
  std::vector<Expr> alts;
  for (int64_t v = first; v <= hi; v += mod) alts.push_back(text(std::to_string(v)));
  return alt(std::move(alts));
}

// Validators read numbers as doubles (Python: integers exactly, others as
// doubles). Where that could put a number the exact comparison lets
// through on the wrong side of a bound, generation moves the bound inward
// by a step at its 16th significant digit (over two units in the last
// place) and makes it inclusive: exclusive bounds when fractions may be
// written (x > b, yet x rounds to b), bounds past 10^15 when fractions
// may be written (b + 0.5 rounds up past an integer b past 2^53) or
// when the bound is no integer literal (1e30 is a double a little above
// 10^30).
NumberBound Converter::generation_safe(const Bound& b, bool lower, bool fractions) const {
  NumberBound nb{b.value, b.exclusive};
  if (exact_) return nb;
  const bool big = b.value.whole.size() >= 16;
  if (!((fractions && (b.exclusive || big)) || (!fractions && big && !b.integer_literal))) return nb;
  const int64_t at = b.value.zero() ? -30 : sixteenth_digit(b.value);
  return NumberBound{step(b.value, at, lower), false};
}

}  // namespace troupe::grammar::schema
