// JSON Schema to GBNF, fail closed (json_schema.h, docs/JSON_SCHEMA.md).
//
// A schema is read into "simple" schemas (one per anyOf/oneOf/dependency
// branch once allOf, not, if/then/else and dependencies are merged in): per
// JSON type, the constraints on it. Each becomes a union over its allowed
// types; every subschema is a rule, so references (recursive ones too) are
// rule references. Negations are written as schemas without `not`. Strings
// are matched as JSON text: in the exact profile a character of a pattern,
// format, key or const is any of its spellings (raw, \n-style, \uXXXX, a
// surrogate pair), so escapes change nothing; in the generation profile it
// has one spelling, and the layout is fixed.
#include "engine/grammar/json_schema.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <climits>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "engine/grammar/regex_to_gbnf.h"

namespace troupe::grammar {

SchemaError::SchemaError(std::string keyword, std::string pointer, const std::string& why)
    : std::invalid_argument((pointer.empty() ? std::string("/") : pointer) + ": " + keyword + ": " + why),
      keyword_(std::move(keyword)),
      pointer_(std::move(pointer)) {}

namespace {

using namespace detail;
using ojson = nlohmann::ordered_json;  // keeps `properties` in their declared order
using json = nlohmann::json;

constexpr int32_t kMaxRepeat = 10000;  // gbnf.cpp's cap on x{m,n}
constexpr size_t kMaxDisjuncts = 64;   // anyOf/oneOf branches once allOf is distributed

// ---- JSON text pieces -----------------------------------------------------------

CharSet cs(std::u32string_view chars) {
  CharSet s;
  for (char32_t c : chars) s.add(c, c);
  return s;
}

// The escapes JSON has for single characters, by the character.
const std::map<char32_t, std::string>& short_escapes() {
  static const std::map<char32_t, std::string> m{{'"', "\\\""}, {'\\', "\\\\"}, {'/', "\\/"}, {'\b', "\\b"},
                                                 {'\f', "\\f"},  {'\n', "\\n"},  {'\r', "\\r"}, {'\t', "\\t"}};
  return m;
}

// Hex digits with values lo..hi, either case.
Expr hex_digit(int lo, int hi) {
  if (lo == hi && lo < 10) return text(std::string(1, static_cast<char>('0' + lo)));
  CharSet s;
  if (lo <= 9) s.add(static_cast<char32_t>('0' + lo), static_cast<char32_t>('0' + std::min(hi, 9)));
  if (hi >= 10) {
    const int a = std::max(lo, 10) - 10, b = hi - 10;
    s.add(static_cast<char32_t>('a' + a), static_cast<char32_t>('a' + b));
    s.add(static_cast<char32_t>('A' + a), static_cast<char32_t>('A' + b));
  }
  return chars(s);
}

Expr dec_digit(int lo, int hi) {
  if (lo == hi) return text(std::string(1, static_cast<char>('0' + lo)));
  return chars(CharSet(static_cast<char32_t>('0' + lo), static_cast<char32_t>('0' + hi)));
}

uint64_t power(uint64_t base, int exp) {
  uint64_t p = 1;
  for (int i = 0; i < exp; ++i) p *= base;
  return p;
}

// Strings of exactly `width` digits whose value lies in [lo, hi]: one digit
// position at a time, as llama.cpp's _generate_min_max_int does.
Expr digit_range(uint64_t lo, uint64_t hi, int width, uint64_t base, const std::function<Expr(int, int)>& digit) {
  if (width == 0) return empty();
  const uint64_t p = power(base, width - 1);
  const auto lo_d = static_cast<int>(lo / p), hi_d = static_cast<int>(hi / p);
  const uint64_t lo_r = lo % p, hi_r = hi % p;
  if (lo_d == hi_d) return seq({digit(lo_d, lo_d), digit_range(lo_r, hi_r, width - 1, base, digit)});
  std::vector<Expr> alts;
  int mid_lo = lo_d, mid_hi = hi_d;
  if (lo_r != 0) {
    alts.push_back(seq({digit(lo_d, lo_d), digit_range(lo_r, p - 1, width - 1, base, digit)}));
    ++mid_lo;
  }
  const bool hi_partial = hi_r != p - 1;
  if (hi_partial) --mid_hi;
  if (mid_lo <= mid_hi)
    alts.push_back(seq({digit(mid_lo, mid_hi), rep(digit(0, static_cast<int>(base) - 1), width - 1, width - 1)}));
  if (hi_partial) alts.push_back(seq({digit(hi_d, hi_d), digit_range(0, hi_r, width - 1, base, digit)}));
  return alt(std::move(alts));
}

Expr hex4(uint32_t lo, uint32_t hi) { return seq({text("\\u"), digit_range(lo, hi, 4, 16, hex_digit)}); }

// \uXXXX\uXXXX pairs for code points lo..hi past the BMP.
Expr surrogate_pairs(char32_t lo, char32_t hi) {
  auto high = [](char32_t c) { return static_cast<uint32_t>(0xD800 + ((c - 0x10000) >> 10)); };
  auto low = [](char32_t c) { return static_cast<uint32_t>(0xDC00 + ((c - 0x10000) & 0x3FF)); };
  if (high(lo) == high(hi)) return seq({hex4(high(lo), high(lo)), hex4(low(lo), low(hi))});
  std::vector<Expr> alts{seq({hex4(high(lo), high(lo)), hex4(low(lo), 0xDFFF)})};
  if (high(lo) + 1 <= high(hi) - 1) alts.push_back(seq({hex4(high(lo) + 1, high(hi) - 1), hex4(0xDC00, 0xDFFF)}));
  alts.push_back(seq({hex4(high(hi), high(hi)), hex4(0xDC00, low(hi))}));
  return alt(std::move(alts));
}

// The one spelling the generation profile writes for a character that
// cannot be written raw: `\"`, `\\`, a short escape, else \u00XX (lower case).
std::string canonical_escape(char32_t c) {
  if (c == '"') return "\\\"";
  if (c == '\\') return "\\\\";
  if (auto it = short_escapes().find(c); it != short_escapes().end()) return it->second;
  static const char* kHex = "0123456789abcdef";
  return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
}

// Every spelling, inside a JSON string, of a character of `set` (exact), or
// its one canonical spelling (generation: raw where JSON allows it).
Expr json_spellings(const CharSet& set, bool exact) {
  std::vector<Expr> alts{chars(set - cs(U"\"\\").add(0, 0x1F))};
  if (!exact) {
    for (char32_t c : {U'"', U'\\'})
      if (set.contains(c)) alts.push_back(text(canonical_escape(c)));
    const CharSet controls = set & CharSet(0, 0x1F);
    for (const auto& r : controls.ranges())
      for (char32_t c = r.lo; c <= r.hi; ++c) alts.push_back(text(canonical_escape(c)));
    return alt(std::move(alts));
  }
  for (const auto& [c, esc] : short_escapes())
    if (set.contains(c)) alts.push_back(text(esc));
  const CharSet bmp = set & CharSet(0, 0xFFFF), astral = set & CharSet(0x10000, CharSet::kMax);
  for (const auto& r : bmp.ranges()) alts.push_back(hex4(r.lo, r.hi));
  for (const auto& r : astral.ranges()) alts.push_back(surrogate_pairs(r.lo, r.hi));
  return alt(std::move(alts));
}

// The rules every JSON grammar shares.
struct Shared {
  int32_t ws, chr, string, tail, integer, number, boolean, null, value, object, array;
};

// The separators of the two layouts: exact allows bounded whitespace around
// every token; generation writes `{"a": 1, "b": [1, 2]}` and nothing else.
struct Layout {
  bool exact = false;
  int32_t ws_rule = -1;
  Expr ws() const { return exact ? ref(ws_rule) : empty(); }
  Expr comma() const { return exact ? seq({text(","), ref(ws_rule)}) : text(", "); }
  Expr colon() const { return exact ? seq({ref(ws_rule), text(":"), ref(ws_rule)}) : text(": "); }
};

Shared add_shared(RuleBuilder& b, Layout& layout) {
  Shared s{};
  const Expr hex = chars(CharSet('0', '9').add('a', 'f').add('A', 'F'));
  const Expr digit = chars(CharSet('0', '9'));
  s.ws = -1;
  if (layout.exact) {
    s.ws = b.reserve("ws");
    b.define(s.ws, opt(alt({text(" "), seq({text("\n"), rep(chars(cs(U" \t")), 0, 20)})})));
  }
  layout.ws_rule = s.ws;
  // \uXXXX spells a BMP character; a surrogate only as half of a pair.
  const Expr not_surrogate = seq({chars(CharSet('0', '9').add('a', 'c').add('A', 'C').add('e', 'f').add('E', 'F')), rep(hex, 3, 3)});
  const Expr low_surrogate = seq({text("\\u"), chars(cs(U"dD")), chars(CharSet('c', 'f').add('C', 'F')), rep(hex, 2, 2)});
  const Expr pair = seq({chars(cs(U"dD")), chars(cs(U"89abAB")), rep(hex, 2, 2), low_surrogate});
  const Expr bmp_high = seq({chars(cs(U"dD")), chars(CharSet('0', '7')), rep(hex, 2, 2)});
  s.chr = b.reserve("char");
  if (layout.exact)
    b.define(s.chr, alt({chars(CharSet::any() - cs(U"\"\\").add(0, 0x1F)),
                         seq({text("\\"), alt({chars(cs(U"\"\\/bfnrt")), seq({text("u"), alt({not_surrogate, bmp_high, pair})})})})}));
  else
    b.define(s.chr, json_spellings(CharSet::any(), false));
  s.tail = b.reserve("string-tail");
  b.define(s.tail, seq({star(ref(s.chr)), text("\"")}));
  s.string = b.reserve("string");
  b.define(s.string, seq({text("\""), ref(s.tail)}));
  const Expr natural = alt({text("0"), seq({chars(CharSet('1', '9')), star(digit)})});
  s.integer = b.reserve("integer");
  b.define(s.integer, seq({opt(text("-")), natural}));
  s.number = b.reserve("number");
  b.define(s.number, seq({opt(text("-")), natural, opt(seq({text("."), rep(digit, 1, -1)})),
                          opt(seq({chars(cs(U"eE")), opt(chars(cs(U"+-"))), rep(digit, 1, -1)}))}));
  s.boolean = b.reserve("boolean");
  b.define(s.boolean, alt({text("true"), text("false")}));
  s.null = b.reserve("null");
  b.define(s.null, text("null"));
  s.value = b.reserve("value");
  s.object = b.reserve("object");
  s.array = b.reserve("array");
  b.define(s.value, alt({ref(s.object), ref(s.array), ref(s.string), ref(s.number), ref(s.boolean), ref(s.null)}));
  const Expr member = seq({ref(s.string), layout.colon(), ref(s.value), layout.ws()});
  b.define(s.object, seq({text("{"), layout.ws(), opt(seq({member, star(seq({layout.comma(), member}))})), text("}")}));
  const Expr item = seq({ref(s.value), layout.ws()});
  b.define(s.array, seq({text("["), layout.ws(), opt(seq({item, star(seq({layout.comma(), item}))})), text("]")}));
  return s;
}

// ---- numbers ----------------------------------------------------------------------

// An exact decimal: the digits of the whole part (no leading zeros, "0" for
// none) and of the fraction (no trailing zeros).
struct Decimal {
  bool negative = false;
  std::string whole = "0", frac;
  bool zero() const { return whole == "0" && frac.empty(); }
  int sign() const { return zero() ? 0 : negative ? -1 : 1; }
  Decimal abs() const {
    Decimal d = *this;
    d.negative = false;
    return d;
  }
};

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

// The decimal a JSON number of the schema stands for: an integer exactly,
// a float as the shortest decimal that reads back as the same double.
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

// d moved by 10^exp10 up (or down), exactly.
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

// The power of ten of d's 16th significant digit (d nonzero): a step there
// is more than two units in the last place of the double nearest d.
int64_t sixteenth_digit(const Decimal& d) {
  if (d.whole != "0") return static_cast<int64_t>(d.whole.size()) - 16;
  return -static_cast<int64_t>(d.frac.find_first_not_of('0')) - 16;
}

// Whether x is an integer multiple of m (> 0), exactly; throws SchemaError
// where m, scaled to an integer beside x, passes 18 digits.
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

// What a number text may be: an integer, anything, or no integer (a
// fraction with a digit other than 0).
enum class Numbers { integers, all, non_integers };

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

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};

// JSON numbers without an exponent, of the kind, in the range; "-0" and
// "-0.0" count as 0.
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

// JSON numbers by sign, exactly (the exponent cannot make zero nonzero).
Expr number_by_sign(bool negative, bool zero, bool positive) {
  const Expr digit = chars(CharSet('0', '9'));
  const Expr exp = opt(seq({chars(cs(U"eE")), opt(chars(cs(U"+-"))), rep(digit, 1, -1)}));
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

// The spelling a const or enum number is accepted in: integral values as
// integers (as the integer type), others as nlohmann writes them.
std::string number_text(const ojson& v) {
  if (v.is_number_integer()) return v.dump();
  const double d = v.get<double>();
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) return std::to_string(static_cast<int64_t>(d));
  return v.dump();
}

// ---- schema reading ------------------------------------------------------------

enum TypeBits : unsigned {
  kNull = 1,
  kBool = 2,
  kObject = 4,
  kArray = 8,
  kString = 16,
  kInteger = 32,
  kFraction = 64,  // numbers that are not integers
  kAllTypes = 127,
};

unsigned type_bits(std::string_view name) {
  if (name == "null") return kNull;
  if (name == "boolean") return kBool;
  if (name == "object") return kObject;
  if (name == "array") return kArray;
  if (name == "string") return kString;
  if (name == "integer") return kInteger;
  if (name == "number") return kInteger | kFraction;
  return 0;
}

unsigned value_type(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return kNull;
    case ojson::value_t::boolean: return kBool;
    case ojson::value_t::object: return kObject;
    case ojson::value_t::array: return kArray;
    case ojson::value_t::string: return kString;
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned: return kInteger;
    case ojson::value_t::number_float: {
      const double d = v.get<double>();
      return std::isfinite(d) && d == std::floor(d) ? kInteger : kFraction;
    }
    default: return 0;
  }
}

// JSON Schema equality: objects unordered, 1 == 1.0.
bool same_value(const ojson& a, const ojson& b) { return json(a) == json(b); }

const std::set<std::string, std::less<>>& supported_keywords() {
  static const std::set<std::string, std::less<>> s{
      "type",      "enum",     "const",     "properties", "required",   "additionalProperties", "items",
      "prefixItems", "additionalItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "nullable",
      "minLength", "maxLength", "pattern",  "format",     "minimum",    "maximum",              "exclusiveMinimum",
      "exclusiveMaximum", "minProperties", "maxProperties", "patternProperties", "propertyNames", "dependencies",
      "dependentRequired", "dependentSchemas", "not", "if", "then", "else", "contains", "multipleOf", "uniqueItems",
      // What negations write (not for schemas to use): numbers that are not
      // integers, strings other than the listed.
      "$troupe:not-integer", "$troupe:not-in"};
  return s;
}

// The types the keywords constrain (0: some keyword is about none).
unsigned keyword_types(const std::vector<std::string>& keywords) {
  static const std::map<std::string, unsigned, std::less<>> m{
      {"minLength", kString},     {"maxLength", kString},       {"pattern", kString},         {"format", kString},
      {"format(number)", kInteger | kFraction},
      {"minimum", kInteger | kFraction}, {"maximum", kInteger | kFraction}, {"exclusiveMinimum", kInteger | kFraction},
      {"exclusiveMaximum", kInteger | kFraction}, {"multipleOf", kInteger | kFraction},
      {"properties", kObject},    {"required", kObject},        {"additionalProperties", kObject},
      {"patternProperties", kObject}, {"propertyNames", kObject}, {"minProperties", kObject}, {"maxProperties", kObject},
      {"items", kArray},          {"prefixItems", kArray},      {"additionalItems", kArray},  {"minItems", kArray},
      {"maxItems", kArray},       {"uniqueItems", kArray},      {"contains", kArray},
      {"$troupe:not-in", kString}};
  unsigned t = 0;
  for (const std::string& k : keywords) {
    auto it = m.find(k);
    if (it == m.end()) return 0;
    t |= it->second;
  }
  return t;
}

// Keywords of some draft that constrain instances and are not enforced here,
// and why.
const std::map<std::string, std::string, std::less<>>& refused_keywords() {
  static const std::map<std::string, std::string, std::less<>> m{
      {"minContains", "\"some item matches\" is not enforced"},
      {"maxContains", "\"some item matches\" is not enforced"},
      {"unevaluatedProperties", "annotation-dependent validation is not enforced"},
      {"unevaluatedItems", "annotation-dependent validation is not enforced"},
      {"$dynamicRef", "dynamic references are not supported"},
      {"$recursiveRef", "dynamic references are not supported"},
      {"extends", "draft 3's extends is not supported (use allOf)"},
      {"disallow", "draft 3's disallow is not supported (use not)"},
      {"divisibleBy", "draft 3's divisibleBy is not supported"},
  };
  return m;
}

// Exactly one insertion, deletion, substitution or swap of neighbours apart.
bool one_edit(std::string_view a, std::string_view b) {
  if (a.size() > b.size()) std::swap(a, b);
  size_t i = 0;
  while (i < a.size() && a[i] == b[i]) ++i;
  if (a.size() + 1 == b.size()) return a.substr(i) == b.substr(i + 1);
  if (a.size() != b.size() || i == a.size()) return false;
  if (a.substr(i + 1) == b.substr(i + 1)) return true;
  return i + 1 < a.size() && a[i] == b[i + 1] && a[i + 1] == b[i] && a.substr(i + 2) == b.substr(i + 2);
}

// The validation keyword an unknown keyword is probably a misspelling of:
// the same but for case (minlength), or one edit from a long one
// (additonalProperties). Names starting with '_' or '$' or "x-" are never.
std::string misspelt(std::string_view k) {
  if (k.empty() || !std::isalpha(static_cast<unsigned char>(k[0])) || k.substr(0, 2) == "x-") return "";
  auto iequal = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
  };
  auto check = [&](const std::string& v) { return v != k && (iequal(k, v) || (v.size() >= 8 && one_edit(k, v))); };
  for (const std::string& v : supported_keywords())
    if (check(v)) return v;
  for (const auto& [v, why] : refused_keywords())
    if (check(v)) return v;
  return "";
}

// Unknown keywords are annotations (validators ignore them), but for
// likely misspellings of validation keywords.
bool is_annotation(std::string_view k) {
  return !supported_keywords().count(k) && !refused_keywords().count(k) && misspelt(k).empty();
}

std::string escape_pointer_token(std::string_view t) {
  std::string out;
  for (char c : t) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

struct Node {
  const ojson* s;
  std::string ptr;
};

const ojson kTrueSchema = true;
const ojson kFalseSchema = false;

bool is_false(const Node& n) { return n.s->is_boolean() && !n.s->get<bool>(); }
bool is_true(const Node& n) {
  if (n.s->is_boolean()) return n.s->get<bool>();
  if (!n.s->is_object()) return false;
  for (const auto& [k, v] : n.s->items())
    if (!is_annotation(k)) return false;
  return true;
}

struct Bound {
  bool set = false, exclusive = false;
  Decimal value;
  std::string keyword, ptr;
  bool integer_literal = false;  // written as a JSON integer (a validator compares it exactly)
};

// One conjunction of constraints, per type (no anyOf/oneOf/allOf/$ref left).
struct Simple {
  std::string ptr;
  unsigned types = kAllTypes;
  bool has_values = false;
  std::vector<ojson> values;
  std::string values_keyword;
  std::vector<std::string> constraints;  // keywords besides type/enum/const: refused beside enum
  int64_t min_len = 0, max_len = -1;
  std::vector<std::pair<std::string, std::string>> patterns;  // pattern, pointer
  std::string format, format_ptr;
  Bound lo, hi;
  std::vector<std::pair<Decimal, std::string>> multiples;  // multipleOf, pointer
  std::vector<std::pair<std::string, Node>> props;
  std::vector<std::string> required;
  std::optional<Node> additional;  // none: any
  struct PatternProp {
    std::string regex, ptr;
    Node schema;
  };
  std::vector<PatternProp> pattern_props;
  std::vector<Node> property_names;  // schemas every name must meet
  std::vector<std::string> not_in;  // strings other than these
  std::vector<Node> contains;       // schemas some item must meet, each
  bool unique = false;              // uniqueItems
  std::vector<Node> prefix;
  std::optional<Node> rest;  // none: any
  int64_t min_items = 0, max_items = -1;
  int64_t min_props = 0, max_props = -1;
};

const Node* find_prop(const Simple& s, std::string_view name) {
  for (const auto& [k, n] : s.props)
    if (k == name) return &n;
  return nullptr;
}

int64_t min_of(int64_t a, int64_t b) { return a < 0 ? b : b < 0 ? a : std::min(a, b); }

// ---- formats -----------------------------------------------------------------------

std::string ipv4_regex() {
  const std::string octet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
  return octet + "(\\." + octet + "){3}";
}

std::string ipv6_regex() {
  const std::string h = "[0-9A-Fa-f]{1,4}", ls32 = "(" + h + ":" + h + "|" + ipv4_regex() + ")";
  auto upto = [&](int n) { return "((" + h + ":){0," + std::to_string(n) + "}" + h + ")?::"; };
  return "((" + h + ":){6}" + ls32 + "|::(" + h + ":){5}" + ls32 + "|(" + h + ")?::(" + h + ":){4}" + ls32 + "|" +
         upto(1) + "(" + h + ":){3}" + ls32 + "|" + upto(2) + "(" + h + ":){2}" + ls32 + "|" + upto(3) + h + ":" +
         ls32 + "|" + upto(4) + ls32 + "|" + upto(5) + h + "|" + upto(6) + ")";
}

// RFC 3339 full-date; `year_zero`: whether 0000 is a year (RFC 3339 says
// so; Python's datetime, and so its validators, does not).
std::string date_regex(bool year_zero = true) {
  const std::string y = year_zero ? "\\d{4}" : "(000[1-9]|00[1-9]\\d|0[1-9]\\d\\d|[1-9]\\d{3})";
  const std::string leap = std::string("(\\d\\d([02468][48]|[13579][26]|[2468]0)|(") +
                           (year_zero ? "[02468][048]" : "0[48]|[2468][048]") + "|[13579][26])00)";
  return "(" + y + "-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|" + y + "-(0[469]|11)-(0[1-9]|[12]\\d|30)|" + y +
         "-02-(0[1-9]|1\\d|2[0-8])|" + leap + "-02-29)";
}

std::string time_regex(bool lower_case = true) {
  return std::string("([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d+)?(") + (lower_case ? "[zZ]" : "Z") +
         "|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
}

// RFC 3986's URI (relative: false) or relative-ref (true).
std::string uri_regex(bool relative = false) {
  const std::string pct = "%[0-9A-Fa-f]{2}";
  const std::string pchar = "([A-Za-z0-9._~!$&'()*+,;=:@-]|" + pct + ")";
  const std::string userinfo = "([A-Za-z0-9._~!$&'()*+,;=:-]|" + pct + ")*";
  const std::string reg_name = "([A-Za-z0-9._~!$&'()*+,;=-]|" + pct + ")*";
  const std::string future = "v[0-9A-Fa-f]+\\.[A-Za-z0-9._~!$&'()*+,;=:-]+";
  const std::string host = "(\\[(" + ipv6_regex() + "|" + future + ")\\]|" + reg_name + ")";
  const std::string authority = "(" + userinfo + "@)?" + host + "(:\\d*)?";
  const std::string segments = "(/" + pchar + "*)*";
  const std::string tail = "(\\?(" + pchar + "|[/?])*)?(#(" + pchar + "|[/?])*)?";
  if (relative) {
    // The first segment of a relative path holds no ':' (it would read as a scheme).
    const std::string nc = "([A-Za-z0-9._~!$&'()*+,;=@-]|" + pct + ")";
    return "(//" + authority + segments + "|/(" + pchar + "+" + segments + ")?|" + nc + "+" + segments + ")?" + tail;
  }
  const std::string hier = "(//" + authority + segments + "|/(" + pchar + "+" + segments + ")?|" + pchar + "+" + segments + ")?";
  return "[A-Za-z][A-Za-z0-9+.-]*:" + hier + tail;
}

// RFC 3339 appendix A's ISO 8601 durations.
std::string duration_regex() {
  const std::string s = "\\d+S", m = "\\d+M(" + s + ")?", h = "\\d+H(" + m + ")?";
  const std::string time = "T(" + h + "|" + m + "|" + s + ")";
  const std::string d = "\\d+D", mo = "\\d+M(" + d + ")?", y = "\\d+Y(" + mo + ")?";
  return "P((" + d + "|" + mo + "|" + y + ")(" + time + ")?|" + time + "|\\d+W)";
}

// RFC 1123 host names as the generation profile writes them: up to 8
// labels of up to 30 letters, digits and inner hyphens, so that no name
// passes the 253 characters a host name may have.
std::string hostname_regex() {
  const std::string label = "[A-Za-z0-9]([A-Za-z0-9-]{0,28}[A-Za-z0-9])?";
  return label + "(\\." + label + "){0,7}";
}

const std::map<std::string, std::string, std::less<>>& format_regexes() {
  static const std::map<std::string, std::string, std::less<>> m{
      {"date", date_regex()},
      {"time", time_regex()},
      {"date-time", date_regex() + "[tT]" + time_regex()},
      {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
      {"email",
       "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)+"
       "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"},
      {"uri", uri_regex()},
      {"uri-reference", "(" + uri_regex() + "|" + uri_regex(true) + ")"},
      {"ipv4", ipv4_regex()},
      {"ipv6", ipv6_regex()},
      {"duration", duration_regex()},
      {"json-pointer", "(/([^~/]|~[01])*)*"},
      {"relative-json-pointer", "(0|[1-9]\\d*)(#|(/([^~/]|~[01])*)*)"},
      {"byte", "([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"},  // OpenAPI: base64
      {"hostname", hostname_regex()},  // generation only
  };
  return m;
}

// The generation profile's dates: no year 0000, upper-case T and Z.
const std::map<std::string, std::string, std::less<>>& generation_format_regexes() {
  static const std::map<std::string, std::string, std::less<>> m{
      {"date", date_regex(false)},
      {"time", time_regex(false)},
      {"date-time", date_regex(false) + "T" + time_regex(false)},
  };
  return m;
}

// Formats of JSON Schema's own that are not enforced: refused. Other
// formats no standard defines (OpenAPI's float, double, binary, password;
// "url", "path", ...) are annotations, as validators treat them.
const std::set<std::string, std::less<>>& refused_formats() {
  static const std::set<std::string, std::less<>> s{"iri",          "iri-reference", "idn-email",
                                                    "idn-hostname", "uri-template",  "regex"};
  return s;
}

// OpenAPI's integer formats: their ranges.
const std::map<std::string, std::pair<int64_t, int64_t>, std::less<>>& integer_formats() {
  static const std::map<std::string, std::pair<int64_t, int64_t>, std::less<>> m{
      {"int32", {INT32_MIN, INT32_MAX}}, {"int64", {INT64_MIN, INT64_MAX}}};
  return m;
}

// ---- the converter ---------------------------------------------------------------

enum class Draft { unknown, up_to_7, from_2019 };

// Deepest nesting of arrays and objects in JSON text (strings skipped), so a
// hostile schema is refused before anything recurses over it.
size_t json_nesting(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

bool mentions_ref(const ojson& j) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      if ((k == "$ref" && v.is_string()) || mentions_ref(v)) return true;
  } else if (j.is_array()) {
    for (const auto& v : j)
      if (mentions_ref(v)) return true;
  }
  return false;
}

class Converter {
 public:
  Converter(std::string_view text, const SchemaLimits& limits, const SchemaOptions& options)
      : limits_(limits), exact_(options.exact), b_(limits.max_grammar_bytes) {
    layout_.exact = exact_;
    if (text.size() > limits.max_schema_bytes)
      throw SchemaError("limits", "", "the schema is " + std::to_string(text.size()) + " bytes; the limit is " +
                                          std::to_string(limits.max_schema_bytes));
    if (json_nesting(text) > static_cast<size_t>(4 * limits.max_depth + 16))
      throw SchemaError("limits", "", "the schema nests deeper than max_depth " + std::to_string(limits.max_depth) + " allows");
    try {
      doc_ = ojson::parse(text);
    } catch (const ojson::exception& e) {
      throw SchemaError("schema", "", std::string("not valid JSON: ") + e.what());
    }
    if (doc_.is_object()) {
      if (auto it = doc_.find("$schema"); it != doc_.end() && it->is_string()) {
        const std::string uri = it->get<std::string>();
        for (const char* old : {"draft-03", "draft-04", "draft-06", "draft-07"})
          if (uri.find(old) != std::string::npos) draft_ = Draft::up_to_7;
        legacy_id_ = uri.find("draft-03") != std::string::npos || uri.find("draft-04") != std::string::npos ||
                     draft_ == Draft::unknown;
        if (uri.find("2019-09") != std::string::npos || uri.find("2020-12") != std::string::npos) draft_ = Draft::from_2019;
      }
    }
    has_refs_ = mentions_ref(doc_);
  }

  std::string run() {
    const int32_t root = b_.reserve("root", "");
    sh_ = add_shared(b_, layout_);
    if (is_false(Node{&doc_, ""})) throw SchemaError("false", "", "the schema `false` accepts no value");
    memo_[&doc_] = root;
    b_.define(root, lower_body(Node{&doc_, ""}));
    try {
      return b_.emit(root);
    } catch (const BuildError& e) {
      switch (e.reason) {
        case BuildError::Reason::empty_language:
          throw SchemaError("unsatisfiable", e.origin, "no JSON value satisfies the schema");
        case BuildError::Reason::endless_recursion:
        case BuildError::Reason::left_recursion: throw SchemaError("$ref", e.origin, e.why);
        case BuildError::Reason::too_large: throw SchemaError("limits", e.origin, e.why);
      }
      throw;
    }
  }

  std::string object_only() {
    const int32_t root = b_.reserve("root", "");
    sh_ = add_shared(b_, layout_);
    b_.define(root, ref(sh_.object));
    return b_.emit(root);
  }

 private:
  // Counts nesting against max_depth for as long as it lives.
  class Deeper {
   public:
    Deeper(Converter& c, const std::string& ptr) : c_(c) {
      if (c_.depth_ >= c_.limits_.max_depth)  // checked before counting: a throw runs no destructor
        throw SchemaError("limits", ptr, "subschemas, $ref chains or allOf/anyOf/oneOf nest deeper than max_depth " +
                                             std::to_string(c_.limits_.max_depth));
      ++c_.depth_;
    }
    ~Deeper() { --c_.depth_; }
    Deeper(const Deeper&) = delete;
    Deeper& operator=(const Deeper&) = delete;

   private:
    Converter& c_;
  };

  // ---- keywords and references ----

  void check_keywords(const Node& n) const {
    for (const auto& [k, v] : n.s->items()) {
      if (supported_keywords().count(k)) continue;
      if (auto it = refused_keywords().find(k); it != refused_keywords().end()) throw SchemaError(k, n.ptr, it->second);
      if (const std::string near = misspelt(k); !near.empty())
        throw SchemaError(k, n.ptr, "not a keyword, but so close to '" + near +
                                        "' that it is taken for a misspelling of it (a validator would ignore it)");
      // Other keywords are annotations; an identifier in a subschema moves
      // the base that references resolve against.
      // (A fragment, "#name", names the subschema in the same document.)
      const bool identifier = (k == "$id" || (k == "id" && legacy_id_)) && v.is_string() &&
                              !(v.get_ref<const std::string&>().size() > 0 && v.get_ref<const std::string&>()[0] == '#');
      if (identifier && !n.ptr.empty() && has_refs_)
        throw SchemaError(k, n.ptr, "an embedded " + k + " changes what $ref resolves against; it is not supported");
    }
  }

  // Whether `$ref`'s siblings say nothing (annotations and definitions only).
  static bool ref_alone(const ojson& s) {
    for (const auto& [k, v] : s.items())
      if (k != "$ref" && !is_annotation(k)) return false;
    return true;
  }

  static bool only_keyword(const ojson& s, std::string_view kw) {
    if (!s.contains(kw)) return false;
    for (const auto& [k, v] : s.items())
      if (k != kw && !is_annotation(k)) return false;
    return true;
  }

  // Whether this schema's $ref stands for the whole schema (draft 7 ignores
  // its siblings; later drafts apply them too).
  bool ref_replaces(const Node& n) const {
    const ojson& s = *n.s;
    if (!s.contains("$ref")) return false;
    if (ref_alone(s) || draft_ == Draft::up_to_7) return true;
    if (draft_ == Draft::unknown)
      throw SchemaError("$ref", n.ptr,
                        "keywords beside $ref mean different things in draft 7 (ignored) and 2019-09 on (applied); "
                        "say which with $schema");
    return false;
  }

  Node resolve(const Node& n) const {
    const ojson& r = (*n.s)["$ref"];
    const std::string at = n.ptr + "/$ref";
    if (!r.is_string()) throw SchemaError("$ref", at, "must be a string");
    const std::string ref = r.get<std::string>();
    if (ref.empty() || ref[0] != '#')
      throw SchemaError("$ref", at, "'" + ref + "': only references within the schema (#/...) are supported");
    const std::string pointer = percent_decoded(ref.substr(1), ref, at);
    if (!pointer.empty() && pointer[0] != '/')
      throw SchemaError("$ref", at, "'" + ref + "': named anchors are not supported; use a JSON Pointer (#/...)");
    const ojson* cur = &doc_;
    for (size_t pos = 0; pos < pointer.size();) {
      const size_t next = std::min(pointer.find('/', pos + 1), pointer.size());
      const std::string token = pointer_token(pointer.substr(pos + 1, next - pos - 1), ref, at);
      const bool index = cur->is_array() && !token.empty() && token.size() < 10 &&
                         token.find_first_not_of("0123456789") == std::string::npos && std::stoul(token) < cur->size();
      if (cur->is_object() && cur->contains(token)) cur = &(*cur)[token];
      else if (index) cur = &(*cur)[std::stoul(token)];
      else throw SchemaError("$ref", at, "'" + ref + "' points to nothing in the schema");
      pos = next;
    }
    return Node{cur, pointer};
  }

  // A URI fragment is %-encoded ("#/percent%25field").
  static std::string percent_decoded(const std::string& s, const std::string& ref, const std::string& at) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '%') {
        out += s[i];
        continue;
      }
      if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
        throw SchemaError("$ref", at, "'" + ref + "': a malformed %-escape");
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    }
    return out;
  }

  // One JSON Pointer token, ~1 and ~0 decoded.
  static std::string pointer_token(const std::string& raw, const std::string& ref, const std::string& at) {
    std::string token;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '~') {
        token += raw[i];
      } else if (i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
        token += raw[++i] == '0' ? '~' : '/';
      } else {
        throw SchemaError("$ref", at, "'" + ref + "': a malformed ~-escape");
      }
    }
    return token;
  }

  // ---- reading one schema object ----

  static int64_t count_value(const ojson& v, const std::string& kw, const std::string& ptr) {
    const bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) ||
                    (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() == std::floor(v.get<double>()));
    if (!ok) throw SchemaError(kw, ptr, "must be a non-negative integer");
    const double d = v.get<double>();
    return d > 1e15 ? int64_t{1} << 50 : v.get<int64_t>();
  }

  static std::vector<std::string> string_list(const ojson& v, const std::string& kw, const std::string& ptr) {
    if (!v.is_array()) throw SchemaError(kw, ptr, "must be an array of strings");
    std::vector<std::string> out;
    for (const auto& x : v) {
      if (!x.is_string()) throw SchemaError(kw, ptr, "must be an array of strings");
      if (std::find(out.begin(), out.end(), x.get<std::string>()) == out.end()) out.push_back(x.get<std::string>());
    }
    return out;
  }

  static void set_bound(Bound& b, const ojson& v, bool exclusive, const std::string& kw, const std::string& ptr,
                        bool lower) {
    if (!v.is_number()) throw SchemaError(kw, ptr, "must be a number");
    tighten(b, Bound{true, exclusive, decimal_of(v), kw, ptr, !v.is_number_float()}, lower);
  }

  static void tighten(Bound& b, const Bound& nb, bool lower) {
    if (!nb.set) return;
    if (!b.set) {
      b = nb;
      return;
    }
    const int c = compare(nb.value, b.value);
    const bool tighter = lower ? c > 0 : c < 0;
    if (tighter || (c == 0 && nb.exclusive && !b.exclusive)) b = nb;
  }

  Node child(const Node& n, const ojson& v, const std::string& suffix) const { return Node{&v, n.ptr + suffix}; }

  Simple simple_of(const Node& n) const {
    Simple r;
    r.ptr = n.ptr;
    auto at = [&](const std::string& kw) { return n.ptr + "/" + escape_pointer_token(kw); };
    read_types(*n.s, r, at);
    read_values(*n.s, r, at);
    read_strings(*n.s, r, at);
    read_bounds(*n.s, r, at);
    read_object(n, r, at);
    read_array(n, r, at);
    return r;
  }

  template <typename At>
  static void read_types(const ojson& s, Simple& r, At at) {
    if (auto it = s.find("type"); it != s.end()) {
      r.types = 0;
      const std::vector<std::string> names =
          it->is_string() ? std::vector<std::string>{it->get<std::string>()} : string_list(*it, "type", at("type"));
      for (const std::string& t : names) {
        if (!type_bits(t)) throw SchemaError("type", at("type"), "unknown type '" + t + "'");
        r.types |= type_bits(t);
      }
    }
    if (auto it = s.find("nullable"); it != s.end()) {
      if (!it->is_boolean()) throw SchemaError("nullable", at("nullable"), "must be a boolean");
      if (it->get<bool>() && s.contains("type")) r.types |= kNull;
    }
    if (s.contains("$troupe:not-integer")) r.types &= ~static_cast<unsigned>(kInteger);
  }

  template <typename At>
  static void read_values(const ojson& s, Simple& r, At at) {
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array()) throw SchemaError("enum", at("enum"), "must be an array");
      r.has_values = true;
      r.values_keyword = "enum";
      r.values.assign(it->begin(), it->end());
    }
    if (auto it = s.find("const"); it != s.end()) {
      std::vector<ojson> kept;
      if (!r.has_values) kept.push_back(*it);
      for (const ojson& v : r.values)
        if (same_value(v, *it)) kept.push_back(v);
      r.has_values = true;
      r.values_keyword = "const";
      r.values = std::move(kept);
    }
  }

  template <typename At>
  void read_strings(const ojson& s, Simple& r, At at) const {
    if (auto it = s.find("minLength"); it != s.end()) {
      r.min_len = count_value(*it, "minLength", at("minLength"));
      r.constraints.push_back("minLength");
    }
    if (auto it = s.find("maxLength"); it != s.end()) {
      r.max_len = count_value(*it, "maxLength", at("maxLength"));
      r.constraints.push_back("maxLength");
    }
    if (auto it = s.find("$troupe:not-in"); it != s.end()) {
      r.not_in = string_list(*it, "$troupe:not-in", at("$troupe:not-in"));
      r.constraints.push_back("$troupe:not-in");
    }
    if (auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) throw SchemaError("pattern", at("pattern"), "must be a string");
      r.patterns.emplace_back(it->get<std::string>(), at("pattern"));
      r.constraints.push_back("pattern");
    }
    if (auto it = s.find("format"); it != s.end()) {
      if (!it->is_string()) throw SchemaError("format", at("format"), "must be a string");
      const std::string f = it->get<std::string>();
      if (auto range = integer_formats().find(f); range != integer_formats().end()) {
        tighten(r.lo, Bound{true, false, decimal_of(ojson(range->second.first)), "format", at("format"), true}, true);
        tighten(r.hi, Bound{true, false, decimal_of(ojson(range->second.second)), "format", at("format"), true}, false);
        r.constraints.push_back("format(number)");
      } else if (refused_formats().count(f) || (f == "hostname" && exact_)) {
        throw SchemaError("format", at("format"),
                          "format '" + f + "' is not enforced" +
                              (f == "hostname" ? " exactly (its 253-character limit); the generation profile writes a subset" : ""));
      } else if (format_regexes().count(f)) {
        r.format = f;
        r.format_ptr = at("format");
        r.constraints.push_back("format");
      }
    }
  }

  template <typename At>
  void read_bounds(const ojson& s, Simple& r, At at) const {
    // Draft 4 wrote exclusiveMinimum: true beside minimum; later drafts a number.
    auto side = [&](const char* incl, const char* excl, Bound& b, bool lower) {
      bool draft4_exclusive = false;
      if (auto it = s.find(excl); it != s.end()) {
        if (it->is_boolean()) draft4_exclusive = it->get<bool>();
        else set_bound(b, *it, true, excl, at(excl), lower), r.constraints.push_back(excl);
      }
      if (auto it = s.find(incl); it != s.end()) {
        Bound nb;
        set_bound(nb, *it, draft4_exclusive, incl, at(incl), lower);
        tighten(b, nb, lower);
        r.constraints.push_back(incl);
      }
    };
    side("minimum", "exclusiveMinimum", r.lo, true);
    side("maximum", "exclusiveMaximum", r.hi, false);
    if (auto it = s.find("multipleOf"); it != s.end()) {
      if (!it->is_number() || decimal_of(*it).sign() <= 0) throw SchemaError("multipleOf", at("multipleOf"), "must be a number above 0");
      r.multiples.emplace_back(decimal_of(*it), at("multipleOf"));
      r.constraints.push_back("multipleOf");
    }
  }

  template <typename At>
  void read_object(const Node& n, Simple& r, At at) const {
    const ojson& s = *n.s;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) throw SchemaError("properties", at("properties"), "must be an object");
      for (const auto& [k, v] : it->items()) r.props.emplace_back(k, child(n, v, "/properties/" + escape_pointer_token(k)));
      r.constraints.push_back("properties");
    }
    if (auto it = s.find("required"); it != s.end()) {
      r.required = string_list(*it, "required", at("required"));
      r.constraints.push_back("required");
    }
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      r.additional = child(n, *it, "/additionalProperties");
      r.constraints.push_back("additionalProperties");
    }
    if (auto it = s.find("patternProperties"); it != s.end()) {
      if (!it->is_object()) throw SchemaError("patternProperties", at("patternProperties"), "must be an object");
      for (const auto& [k, v] : it->items()) {
        const std::string ptr = n.ptr + "/patternProperties/" + escape_pointer_token(k);
        r.pattern_props.push_back({k, ptr, child(n, v, "/patternProperties/" + escape_pointer_token(k))});
      }
      r.constraints.push_back("patternProperties");
    }
    if (auto it = s.find("propertyNames"); it != s.end()) {
      r.property_names.push_back(child(n, *it, "/propertyNames"));
      r.constraints.push_back("propertyNames");
    }
    if (auto it = s.find("minProperties"); it != s.end())
      r.min_props = count_value(*it, "minProperties", at("minProperties")), r.constraints.push_back("minProperties");
    if (auto it = s.find("maxProperties"); it != s.end())
      r.max_props = count_value(*it, "maxProperties", at("maxProperties")), r.constraints.push_back("maxProperties");
  }

  template <typename At>
  void read_array(const Node& n, Simple& r, At at) const {
    const ojson& s = *n.s;
    const auto items = s.find("items"), prefix = s.find("prefixItems"), additional = s.find("additionalItems");
    if (prefix != s.end()) {
      if (!prefix->is_array()) throw SchemaError("prefixItems", at("prefixItems"), "must be an array of schemas");
      if (additional != s.end())
        throw SchemaError("additionalItems", at("additionalItems"),
                          "beside prefixItems (2020-12) it is ambiguous; use items for the rest");
      if (items != s.end() && items->is_array())
        throw SchemaError("items", at("items"), "beside prefixItems, items must be one schema");
      for (size_t i = 0; i < prefix->size(); ++i) r.prefix.push_back(child(n, (*prefix)[i], "/prefixItems/" + std::to_string(i)));
      if (items != s.end()) r.rest = child(n, *items, "/items");
      r.constraints.push_back("prefixItems");
    } else if (items != s.end() && items->is_array()) {
      // Draft 7's tuple form; additionalItems is the rest.
      for (size_t i = 0; i < items->size(); ++i) r.prefix.push_back(child(n, (*items)[i], "/items/" + std::to_string(i)));
      if (additional != s.end()) r.rest = child(n, *additional, "/additionalItems");
      r.constraints.push_back("items");
    } else if (items != s.end()) {
      r.rest = child(n, *items, "/items");  // additionalItems has no effect beside a schema
      r.constraints.push_back("items");
    }
    if (auto it = s.find("contains"); it != s.end()) {
      r.contains.push_back(child(n, *it, "/contains"));
      r.constraints.push_back("contains");
    }
    if (auto it = s.find("uniqueItems"); it != s.end()) {
      if (!it->is_boolean()) throw SchemaError("uniqueItems", at("uniqueItems"), "must be a boolean");
      r.unique = it->get<bool>();
      r.constraints.push_back("uniqueItems");
    }
    if (auto it = s.find("minItems"); it != s.end()) r.min_items = count_value(*it, "minItems", at("minItems")), r.constraints.push_back("minItems");
    if (auto it = s.find("maxItems"); it != s.end()) r.max_items = count_value(*it, "maxItems", at("maxItems")), r.constraints.push_back("maxItems");
  }

  // ---- conjunctions ----

  // A schema for "both": the one if the other says nothing, else an allOf.
  Node both(const Node& x, const Node& y) {
    if (is_false(x) || is_true(y)) return x;
    if (is_false(y) || is_true(x)) return y;
    if (x.s == y.s) return x;
    ojson conj = ojson::object();
    conj["allOf"] = ojson::array({*x.s, *y.s});
    std::string key = conj.dump();
    if (auto it = arena_index_.find(key); it != arena_index_.end()) return Node{it->second, x.ptr};
    arena_bytes_ += key.size();
    if (arena_bytes_ > 4 * limits_.max_schema_bytes)
      throw SchemaError("allOf", x.ptr, "merging the schema's conjunctions grows it past 4 times max_schema_bytes");
    arena_.push_back(std::move(conj));
    arena_index_.emplace(std::move(key), &arena_.back());
    return Node{&arena_.back(), x.ptr};
  }

  std::optional<Simple> merge(const Simple& a, const Simple& b) {
    Simple r = a;
    r.types = a.types & b.types;
    if (!r.types) return std::nullopt;
    if (b.has_values) {
      if (!a.has_values) {
        r.values = b.values;
      } else {
        r.values.clear();
        for (const ojson& v : a.values)
          if (std::any_of(b.values.begin(), b.values.end(), [&](const ojson& w) { return same_value(v, w); }))
            r.values.push_back(v);
      }
      r.has_values = true;
      r.values_keyword = b.values_keyword;
    }
    r.constraints.insert(r.constraints.end(), b.constraints.begin(), b.constraints.end());
    r.min_len = std::max(a.min_len, b.min_len);
    r.not_in.insert(r.not_in.end(), b.not_in.begin(), b.not_in.end());
    r.contains.insert(r.contains.end(), b.contains.begin(), b.contains.end());
    r.unique = a.unique || b.unique;
    r.max_len = min_of(a.max_len, b.max_len);
    for (const auto& p : b.patterns)
      if (std::none_of(r.patterns.begin(), r.patterns.end(), [&](const auto& q) { return q.first == p.first; }))
        r.patterns.push_back(p);
    if (!b.format.empty()) {
      if (!a.format.empty() && a.format != b.format)
        throw SchemaError("format", b.format_ptr, "formats '" + a.format + "' and '" + b.format + "' cannot both be enforced");
      r.format = b.format, r.format_ptr = b.format_ptr;
    }
    tighten(r.lo, b.lo, true);
    r.multiples.insert(r.multiples.end(), b.multiples.begin(), b.multiples.end());
    tighten(r.hi, b.hi, false);
    merge_objects(a, b, r);
    merge_arrays(a, b, r);
    r.min_items = std::max(a.min_items, b.min_items);
    r.max_items = min_of(a.max_items, b.max_items);
    r.min_props = std::max(a.min_props, b.min_props);
    r.max_props = min_of(a.max_props, b.max_props);
    return r;
  }

  void merge_objects(const Simple& a, const Simple& b, Simple& r) {
    r.props.clear();
    // additionalProperties of one side applies to the other's extra names.
    for (const auto& [k, n] : a.props) r.props.emplace_back(k, both(n, prop_schema(b, k)));
    for (const auto& [k, n] : b.props)
      if (!find_prop(a, k)) r.props.emplace_back(k, both(prop_schema(a, k), n));
    for (const std::string& k : b.required)
      if (std::find(r.required.begin(), r.required.end(), k) == r.required.end()) r.required.push_back(k);
    // A name one side's pattern matches must also meet the other side's
    // additionalProperties, where that side has no property of the name
    // and no pattern that matches it: the patterns' complement, not held.
    for (const auto& [x, y] : {std::pair{&a, &b}, std::pair{&b, &a}})
      if (x->additional && !is_true(*x->additional) && !y->pattern_props.empty())
        throw SchemaError("patternProperties", y->pattern_props.front().ptr,
                          "merged with a schema whose additionalProperties is not true: not enforced");
    r.pattern_props = a.pattern_props;
    r.pattern_props.insert(r.pattern_props.end(), b.pattern_props.begin(), b.pattern_props.end());
    r.property_names = a.property_names;
    r.property_names.insert(r.property_names.end(), b.property_names.begin(), b.property_names.end());
    if (a.additional && b.additional) r.additional = both(*a.additional, *b.additional);
    else r.additional = a.additional ? a.additional : b.additional;
  }

  // ---- names and values ----

  const std::vector<RegexBranch>& regex(const std::string& pattern, const std::string& ptr) {
    auto it = regexes_.find(pattern);
    if (it == regexes_.end()) it = regexes_.emplace(pattern, parse_regex(pattern, ptr)).first;
    return it->second;
  }

  // The schema a property of this name meets: its own, those of the
  // patterns it matches, else additionalProperties; false where the name
  // fails propertyNames.
  Node prop_schema(const Simple& s, std::string_view name) {
    const ojson key(std::string{name});
    for (const Node& pn : s.property_names)
      if (!satisfies(key, pn)) return Node{&kFalseSchema, pn.ptr};
    std::optional<Node> r;
    auto add = [&](const Node& n) { r = r ? both(*r, n) : n; };
    if (const Node* n = find_prop(s, name)) add(*n);
    const std::vector<uint32_t> cps = decode_utf8(name);
    for (const auto& pp : s.pattern_props)
      if (regex_search(regex(pp.regex, pp.ptr), cps)) add(pp.schema);
    if (!r) return s.additional ? *s.additional : Node{&kTrueSchema, s.ptr};
    return *r;
  }

  // Whether `v` validates against the schema (formats as this profile
  // writes them).
  bool satisfies(const ojson& v, const Node& n, int depth = 0) {
    if (n.s->is_boolean()) return n.s->get<bool>();
    if (depth > limits_.max_depth)
      throw SchemaError("limits", n.ptr, "checking a value against the schema nests deeper than max_depth");
    for (const Simple& s : expand(n))
      if (satisfies_simple(v, s, depth)) return true;
    return false;
  }

  bool satisfies_simple(const ojson& v, const Simple& s, int depth) {
    const unsigned t = value_type(v);
    if (!(t & s.types)) return false;
    if (s.has_values && std::none_of(s.values.begin(), s.values.end(), [&](const ojson& w) { return same_value(v, w); }))
      return false;
    if (t == kString) {
      const std::string& str = v.get_ref<const std::string&>();
      const std::vector<uint32_t> cps = decode_utf8(str);
      const auto len = static_cast<int64_t>(cps.size());
      if (len < s.min_len || (s.max_len >= 0 && len > s.max_len)) return false;
      if (std::find(s.not_in.begin(), s.not_in.end(), str) != s.not_in.end()) return false;
      for (const auto& [p, ptr] : s.patterns)
        if (!regex_search(regex(p, ptr), cps)) return false;
      if (!s.format.empty()) {
        // What the grammar writes: the profile's format; what a validator
        // may accept: the exact one (any string for generation's host names).
        if (possible_) {
          if (s.format != "hostname" && !expr_matches(exact_format_content(s.format), cps)) return false;
        } else if (!expr_matches(format_content(s.format), cps)) {
          return false;
        }
      }
    } else if (t == kInteger || t == kFraction) {
      const Decimal x = decimal_of(v);
      const int lo = s.lo.set ? compare(x, s.lo.value) : 1, hi = s.hi.set ? compare(x, s.hi.value) : -1;
      if (lo < 0 || (lo == 0 && s.lo.exclusive) || hi > 0 || (hi == 0 && s.hi.exclusive)) return false;
      for (const auto& [m, ptr] : s.multiples)
        if (!multiple_of(x, m, ptr)) return false;
    } else if (t == kArray) {
      const auto size = static_cast<int64_t>(v.size());
      if (size < s.min_items || (s.max_items >= 0 && size > s.max_items)) return false;
      for (size_t i = 0; i < v.size(); ++i) {
        const Node item = i < s.prefix.size() ? s.prefix[i] : s.rest ? *s.rest : Node{&kTrueSchema, s.ptr};
        if (!satisfies(v[i], item, depth + 1)) return false;
      }
      for (const Node& c : s.contains)
        if (std::none_of(v.begin(), v.end(), [&](const ojson& x) { return satisfies(x, c, depth + 1); })) return false;
      if (s.unique)
        for (size_t i = 0; i < v.size(); ++i)
          for (size_t j = i + 1; j < v.size(); ++j)
            if (same_value(v[i], v[j])) return false;
    } else if (t == kObject) {
      const auto size = static_cast<int64_t>(v.size());
      if (size < s.min_props || (s.max_props >= 0 && size > s.max_props)) return false;
      for (const std::string& k : s.required)
        if (!v.contains(k)) return false;
      for (const auto& [k, x] : v.items())
        if (!satisfies(x, prop_schema(s, k), depth + 1)) return false;
    }
    return true;
  }

  void merge_arrays(const Simple& a, const Simple& b, Simple& r) {
    const Node any{&kTrueSchema, a.ptr};
    auto at = [&](const Simple& s, size_t i) { return i < s.prefix.size() ? s.prefix[i] : s.rest ? *s.rest : any; };
    r.prefix.clear();
    for (size_t i = 0; i < std::max(a.prefix.size(), b.prefix.size()); ++i) r.prefix.push_back(both(at(a, i), at(b, i)));
    if (a.rest && b.rest) r.rest = both(*a.rest, *b.rest);
    else r.rest = a.rest ? a.rest : b.rest;
  }

  std::vector<Simple> conjoin(const std::vector<Simple>& xs, const std::vector<Simple>& ys, const std::string& kw,
                              const std::string& ptr) {
    std::vector<Simple> out;
    for (const Simple& x : xs)
      for (const Simple& y : ys)
        if (auto m = merge(x, y)) {
          out.push_back(std::move(*m));
          if (out.size() > kMaxDisjuncts)
            throw SchemaError(kw, ptr, "more than " + std::to_string(kMaxDisjuncts) + " branches once allOf is distributed over anyOf/oneOf");
        }
    return out;
  }

  // The schema as a union of simple schemas. `nested`: a step deeper than
  // the caller (false where lower() has counted this node already).
  std::vector<Simple> expand(const Node& n, bool nested = true) {
    if (n.s->is_boolean()) {
      if (!n.s->get<bool>()) return {};
      Simple any;
      any.ptr = n.ptr;
      return {any};
    }
    if (!n.s->is_object()) throw SchemaError("schema", n.ptr, "a schema must be an object or a boolean");
    std::optional<Deeper> guard;
    if (nested) guard.emplace(*this, n.ptr);
    if (std::find(expanding_.begin(), expanding_.end(), n.s) != expanding_.end())
      throw SchemaError("$ref", n.ptr, "refers back to itself without nesting (through $ref, allOf, anyOf or oneOf)");
    expanding_.push_back(n.s);
    struct Pop {
      std::vector<const ojson*>& v;
      ~Pop() { v.pop_back(); }
    } pop{expanding_};
    check_keywords(n);
    const ojson& s = *n.s;
    if (ref_replaces(n)) return expand(resolve(n));
    std::vector<Simple> out{simple_of(n)};
    if (s.contains("$ref")) out = conjoin(out, expand(resolve(n)), "$ref", n.ptr);
    if (s.contains("allOf"))
      for (const Node& sub : subschemas(n, "allOf")) out = conjoin(out, expand(sub), "allOf", n.ptr);
    if (s.contains("anyOf")) {
      std::vector<Simple> options;
      for (const Node& sub : subschemas(n, "anyOf"))
        for (Simple& x : expand(sub)) options.push_back(std::move(x));
      out = conjoin(out, options, "anyOf", n.ptr);
    }
    if (s.contains("oneOf")) out = one_of(out, n);
    if (auto it = s.find("not"); it != s.end())
      out = conjoin(out, expand(synthetic(negate(child(n, *it, "/not")), n.ptr + "/not")), "not", n.ptr);
    // if/then/else: (if and then) or (not if, and else).
    if (auto it = s.find("if"); it != s.end()) {
      const ojson then = s.contains("then") ? s["then"] : ojson(true), other = s.contains("else") ? s["else"] : ojson(true);
      ojson either = ojson::object();
      either["anyOf"] = ojson::array({ojson{{"allOf", ojson::array({*it, then})}},
                                      ojson{{"allOf", ojson::array({negate(child(n, *it, "/if")), other})}}});
      out = conjoin(out, expand(synthetic(std::move(either), n.ptr + "/if")), "if", n.ptr);
    }
    // A dependency holds where its name is absent, or present with what it
    // requires: two branches each.
    for (const char* kw : {"dependencies", "dependentRequired", "dependentSchemas"}) {
      auto it = s.find(kw);
      if (it == s.end()) continue;
      const std::string at = n.ptr + "/" + kw;
      if (!it->is_object()) throw SchemaError(kw, at, "must be an object");
      for (const auto& [name, dep] : it->items()) {
        const std::string ptr = at + "/" + escape_pointer_token(name);
        ojson absent = ojson::object(), present = ojson::object();
        absent["properties"][name] = false;
        if (dep.is_array() && std::string_view(kw) != "dependentSchemas") {
          std::vector<std::string> required{name};
          for (const std::string& r : string_list(dep, kw, ptr)) required.push_back(r);
          present["required"] = required;
        } else if (std::string_view(kw) != "dependentRequired" && (dep.is_object() || dep.is_boolean())) {
          present["allOf"] = ojson::array({ojson{{"required", {name}}}, dep});
        } else {
          throw SchemaError(kw, ptr, "must be an array of names or a schema");
        }
        std::vector<Simple> options = expand(synthetic(std::move(absent), ptr));
        for (Simple& x : expand(synthetic(std::move(present), ptr))) options.push_back(std::move(x));
        out = conjoin(out, options, kw, ptr);
      }
    }
    return out;
  }

  // A schema the converter writes (kept in the arena with the merged ones).
  Node synthetic(ojson schema, const std::string& ptr) {
    std::string key = schema.dump();
    if (auto it = arena_index_.find(key); it != arena_index_.end()) return Node{it->second, ptr};
    arena_bytes_ += key.size();
    if (arena_bytes_ > 4 * limits_.max_schema_bytes)
      throw SchemaError("limits", ptr, "the schemas written for allOf, dependencies and negations grow past 4 times max_schema_bytes");
    arena_.push_back(std::move(schema));
    arena_index_.emplace(std::move(key), &arena_.back());
    return Node{&arena_.back(), ptr};
  }

  // oneOf: the union of its branches where they cannot overlap, else of
  // each branch less the others (where they can be negated).
  std::vector<Simple> one_of(const std::vector<Simple>& base, const Node& n) {
    const std::vector<Node> subs = subschemas(n, "oneOf");
    std::vector<std::vector<Simple>> branches;
    for (const Node& sub : subs) branches.push_back(conjoin(base, expand(sub), "oneOf", n.ptr));
    std::vector<Simple> out;
    try {
      require_exclusive(branches, n.ptr);
      for (auto& br : branches)
        for (Simple& x : br) out.push_back(std::move(x));
      return out;
    } catch (const SchemaError& overlap) {
      std::vector<Node> negated;
      for (const Node& sub : subs) {
        try {
          negated.push_back(synthetic(negate(sub), sub.ptr));
        } catch (const SchemaError& e) {
          throw SchemaError("oneOf", n.ptr, std::string(overlap.what()).substr(overlap.pointer().size() + 9) +
                                                "; branch " + sub.ptr.substr(n.ptr.size() + 7) + " cannot be negated (" +
                                                e.keyword() + ")");
        }
      }
      for (size_t i = 0; i < subs.size(); ++i) {
        std::vector<Simple> br = branches[i];
        for (size_t j = 0; j < subs.size(); ++j)
          if (j != i) br = conjoin(br, expand(negated[j]), "oneOf", n.ptr);
        for (Simple& x : br) out.push_back(std::move(x));
      }
      return out;
    }
  }

  // ---- negation ----

  // A schema (without `not`) for exactly the instances `n` rejects; throws
  // SchemaError naming a keyword that cannot be negated.
  ojson negate(const Node& n, int depth = 0) {
    if (depth > limits_.max_depth) throw SchemaError("not", n.ptr, "negations nest deeper than max_depth");
    const ojson& s = *n.s;
    if (s.is_boolean()) return !s.get<bool>();
    if (!s.is_object()) throw SchemaError("schema", n.ptr, "a schema must be an object or a boolean");
    check_keywords(n);
    if (ref_replaces(n)) return negate(resolve(n), depth + 1);
    auto at = [&](const std::string& kw) { return n.ptr + "/" + escape_pointer_token(kw); };
    auto refuse = [&](const std::string& kw, const std::string& why) -> ojson { throw SchemaError(kw, at(kw), "cannot be negated: " + why); };
    auto typed = [](const char* type, ojson rest) {
      rest["type"] = type;
      return rest;
    };
    std::vector<ojson> any;  // the instance fails one of the keywords
    Simple types;
    read_types(s, types, at);
    if (types.types != kAllTypes) any.push_back(types_schema(kAllTypes & ~types.types));
    const bool draft4_min = s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean() && s["exclusiveMinimum"].get<bool>();
    const bool draft4_max = s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean() && s["exclusiveMaximum"].get<bool>();
    for (const auto& [k, v] : s.items()) {
      if (k == "type" || k == "nullable" || k == "$troupe:not-integer" || is_annotation(k)) continue;
      if (k == "enum" || k == "const") {
        any.push_back(values_outside(k == "const" ? std::vector<ojson>{v} : std::vector<ojson>(v.begin(), v.end()), at(k)));
      } else if (k == "$troupe:not-in") {
        any.push_back(typed("string", ojson{{"enum", v}}));
      } else if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" || k == "minProperties" ||
                 k == "maxProperties") {
        const int64_t c = count_value(v, k, at(k));
        const bool min = k.substr(0, 3) == "min";
        const std::string what = k.substr(3);
        const char* type = what == "Length" ? "string" : what == "Items" ? "array" : "object";
        if (min && c > 0) any.push_back(typed(type, ojson{{"max" + what, c - 1}}));
        if (!min) any.push_back(typed(type, ojson{{"min" + what, c + 1}}));
      } else if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") {
        if (!v.is_number()) continue;  // draft 4's booleans go with their bound
        const bool lower = k == "minimum" || k == "exclusiveMinimum";
        const bool exclusive = k.substr(0, 9) == "exclusive" || (k == "minimum" && draft4_min) || (k == "maximum" && draft4_max);
        // Below an inclusive lower bound, or at or below an exclusive one.
        const std::string flipped = lower ? (exclusive ? "maximum" : "exclusiveMaximum") : (exclusive ? "minimum" : "exclusiveMinimum");
        any.push_back(typed("number", ojson{{flipped, v}}));
      } else if (k == "required") {
        for (const std::string& name : string_list(v, k, at(k))) any.push_back(typed("object", ojson{{"properties", {{name, false}}}}));
      } else if (k == "properties") {
        if (!v.is_object()) refuse(k, "not an object");
        for (const auto& [name, sub] : v.items()) {
          const ojson neg = negate(child(n, sub, "/properties/" + escape_pointer_token(name)), depth + 1);
          if (neg.is_boolean() && !neg.get<bool>()) continue;
          any.push_back(typed("object", ojson{{"required", {name}}, {"properties", {{name, neg}}}}));
        }
      } else if (k == "additionalProperties") {
        if (!is_true(child(n, v, "/additionalProperties"))) refuse(k, "\"some other property\" is not written");
      } else if (k == "items" && !v.is_array()) {
        const ojson neg = negate(child(n, v, "/items"), depth + 1);
        if (!(neg.is_boolean() && !neg.get<bool>())) {
          if (s.contains("prefixItems")) refuse(k, "beside prefixItems");
          any.push_back(typed("array", ojson{{"contains", neg}}));
        }
      } else if (k == "contains") {
        any.push_back(typed("array", ojson{{"items", negate(child(n, v, "/contains"), depth + 1)}}));
      } else if (k == "uniqueItems") {
        if (v.is_boolean() && v.get<bool>()) refuse(k, "\"two items are equal\" is not written");
      } else if (k == "dependencies" || k == "dependentRequired" || k == "dependentSchemas") {
        if (!v.is_object()) refuse(k, "not an object");
        for (const auto& [name, dep] : v.items()) {
          if (dep.is_array()) {
            for (const std::string& r : string_list(dep, k, at(k)))
              any.push_back(typed("object", ojson{{"required", {name}}, {"properties", {{r, false}}}}));
          } else {
            const ojson neg = negate(child(n, dep, "/" + k + "/" + escape_pointer_token(name)), depth + 1);
            any.push_back(ojson{{"allOf", ojson::array({typed("object", ojson{{"required", {name}}}), neg})}});
          }
        }
      } else if (k == "allOf" || k == "anyOf") {
        std::vector<ojson> parts;
        for (const Node& sub : subschemas(n, k)) parts.push_back(negate(sub, depth + 1));
        if (k == "allOf") any.insert(any.end(), parts.begin(), parts.end());
        else any.push_back(ojson{{"allOf", parts}});
      } else if (k == "oneOf") {
        // None matches, or two do.
        const std::vector<Node> subs = subschemas(n, k);
        std::vector<ojson> none;
        for (const Node& sub : subs) none.push_back(negate(sub, depth + 1));
        any.push_back(ojson{{"allOf", none}});
        if (subs.size() * (subs.size() - 1) / 2 > kMaxDisjuncts) refuse(k, "too many pairs of branches");
        for (size_t i = 0; i < subs.size(); ++i)
          for (size_t j = i + 1; j < subs.size(); ++j) any.push_back(ojson{{"allOf", ojson::array({*subs[i].s, *subs[j].s})}});
      } else if (k == "not") {
        any.push_back(v);
      } else if (k == "if") {
        // (if and not then) or (not if and not else)
        const ojson then = s.contains("then") ? negate(child(n, s["then"], "/then"), depth + 1) : ojson(false);
        const ojson other = s.contains("else") ? negate(child(n, s["else"], "/else"), depth + 1) : ojson(false);
        any.push_back(ojson{{"anyOf", ojson::array({ojson{{"allOf", ojson::array({v, then})}},
                                                    ojson{{"allOf", ojson::array({negate(child(n, v, "/if"), depth + 1), other})}}})}});
      } else if (k == "then" || k == "else") {
        continue;  // with if
      } else if (k == "$ref") {
        any.push_back(negate(resolve(n), depth + 1));
      } else {
        refuse(k, "not supported");
      }
    }
    if (any.empty()) return false;
    if (any.size() == 1) return any.front();
    return ojson{{"anyOf", any}};
  }

  // A schema for the types in `bits` (numbers that are not integers: an
  // internal keyword).
  static ojson types_schema(unsigned bits) {
    std::vector<std::string> names;
    for (const auto& [bit, name] : std::vector<std::pair<unsigned, const char*>>{
             {kNull, "null"}, {kBool, "boolean"}, {kObject, "object"}, {kArray, "array"}, {kString, "string"}})
      if (bits & bit) names.push_back(name);
    std::vector<ojson> parts;
    if (!names.empty()) parts.push_back(ojson{{"type", names}});
    if ((bits & kInteger) && (bits & kFraction)) parts.push_back(ojson{{"type", "number"}});
    else if (bits & kInteger) parts.push_back(ojson{{"type", "integer"}});
    else if (bits & kFraction) parts.push_back(ojson{{"type", "number"}, {"$troupe:not-integer", true}});
    if (parts.empty()) return false;
    if (parts.size() == 1) return parts.front();
    return ojson{{"anyOf", parts}};
  }

  // Every value but these: strings other than the listed, numbers between
  // the listed, the other boolean, null, arrays and objects where none is
  // listed.
  ojson values_outside(const std::vector<ojson>& values, const std::string& ptr) {
    std::vector<std::string> strings;
    std::vector<ojson> numbers;
    bool has_true = false, has_false = false, has_null = false;
    for (const ojson& v : values) {
      if (v.is_string()) strings.push_back(v.get<std::string>());
      else if (v.is_number()) numbers.push_back(v);
      else if (v.is_boolean()) (v.get<bool>() ? has_true : has_false) = true;
      else if (v.is_null()) has_null = true;
      else throw SchemaError("enum", ptr, "cannot be negated: an array or object value");
    }
    std::vector<ojson> parts;
    parts.push_back(strings.empty() ? ojson{{"type", "string"}} : ojson{{"type", "string"}, {"$troupe:not-in", strings}});
    std::sort(numbers.begin(), numbers.end(), [](const ojson& a, const ojson& b) { return compare(decimal_of(a), decimal_of(b)) < 0; });
    if (numbers.empty()) {
      parts.push_back(ojson{{"type", "number"}});
    } else {
      parts.push_back(ojson{{"type", "number"}, {"exclusiveMaximum", numbers.front()}});
      for (size_t i = 0; i + 1 < numbers.size(); ++i)
        if (compare(decimal_of(numbers[i]), decimal_of(numbers[i + 1])) < 0)
          parts.push_back(ojson{{"type", "number"}, {"exclusiveMinimum", numbers[i]}, {"exclusiveMaximum", numbers[i + 1]}});
      parts.push_back(ojson{{"type", "number"}, {"exclusiveMinimum", numbers.back()}});
    }
    if (!has_true || !has_false) parts.push_back(has_true ? ojson{{"const", false}} : has_false ? ojson{{"const", true}} : ojson{{"type", "boolean"}});
    if (!has_null) parts.push_back(ojson{{"type", "null"}});
    parts.push_back(ojson{{"type", ojson::array({"array", "object"})}});
    return ojson{{"anyOf", parts}};
  }

  std::vector<Node> subschemas(const Node& n, const std::string& kw) const {
    const ojson& v = (*n.s)[kw];
    if (!v.is_array() || v.empty()) throw SchemaError(kw, n.ptr + "/" + kw, "must be a non-empty array of schemas");
    std::vector<Node> out;
    for (size_t i = 0; i < v.size(); ++i) out.push_back(child(n, v[i], "/" + kw + "/" + std::to_string(i)));
    return out;
  }

  // ---- oneOf: exclusive only where provably so ----

  // Exact: no instance matches two branches. Generation: no instance a
  // branch's grammar writes matches another branch.
  void require_exclusive(const std::vector<std::vector<Simple>>& branches, const std::string& ptr) {
    for (size_t i = 0; i < branches.size(); ++i)
      for (size_t j = exact_ ? i + 1 : 0; j < branches.size(); ++j) {
        if (i == j) continue;
        for (const Simple& a : branches[i])
          for (const Simple& b : branches[j])
            if (!disjoint(a, b, 0))
              throw SchemaError("oneOf", ptr,
                                "branches " + std::to_string(std::min(i, j)) + " and " + std::to_string(std::max(i, j)) +
                                    " may both match, and a grammar cannot enforce that only one does");
      }
  }

  // The types the grammar of `s` writes.
  unsigned written_types(const Simple& s) const {
    unsigned t = effective_types(s);
    if (!exact_ && !s.has_values && s.types == kAllTypes && !s.constraints.empty())
      if (const unsigned about = keyword_types(s.constraints)) t &= about;
    return t;
  }

  // Generation: the names an object a writes may have, where it writes no
  // others (no other names allowed, no patterns); none: any.
  std::optional<std::vector<std::string>> written_names(const Simple& a) {
    if (exact_ || !a.pattern_props.empty() || (a.additional && !is_false(*a.additional))) return std::nullopt;
    std::vector<std::string> names;
    for (const auto& [k, n] : a.props)
      if (!is_false(n)) names.push_back(k);
    for (const std::string& k : a.required)
      if (!find_prop(a, k)) names.push_back(k);
    return names;
  }

  static unsigned effective_types(const Simple& s) {
    if (!s.has_values) return s.types;
    unsigned t = 0;
    for (const ojson& v : s.values) t |= value_type(v);
    return t & s.types;
  }

  static bool ranges_apart(const Bound& lo1, const Bound& hi1, const Bound& lo2, const Bound& hi2) {
    auto below = [](const Bound& hi, const Bound& lo) {
      if (!hi.set || !lo.set) return false;
      const int c = compare(hi.value, lo.value);
      return c < 0 || (c == 0 && (hi.exclusive || lo.exclusive));
    };
    return below(hi1, lo2) || below(hi2, lo1);
  }

  static bool counts_apart(int64_t min1, int64_t max1, int64_t min2, int64_t max2) {
    return (max1 >= 0 && max1 < min2) || (max2 >= 0 && max2 < min1);
  }

  // Exact: whether no instance validates against both. Generation: whether
  // no instance a's grammar writes validates against b.
  bool disjoint(const Simple& a, const Simple& b, int depth) {
    const unsigned common = written_types(a) & effective_types(b);
    if (!common) return true;
    if (a.has_values || b.has_values) {
      const Simple& finite = a.has_values ? a : b;
      const Simple& other = a.has_values ? b : a;
      for (const ojson& v : finite.values)
        if ((value_type(v) & finite.types) && !fails(v, other, depth)) return false;
      return true;
    }
    for (unsigned t = 1; t < kAllTypes; t <<= 1) {
      if (!(common & t)) continue;
      bool apart = false;
      if (t == kInteger || t == kFraction) apart = ranges_apart(a.lo, a.hi, b.lo, b.hi);
      else if (t == kString) apart = counts_apart(a.min_len, a.max_len, b.min_len, b.max_len);
      else if (t == kArray) apart = counts_apart(a.min_items, a.max_items, b.min_items, b.max_items);
      else if (t == kObject)
        apart = counts_apart(a.min_props, a.max_props, b.min_props, b.max_props) || objects_apart(a, b, depth) ||
                names_apart(a, b);
      if (!apart) return false;
    }
    return true;
  }

  bool forbids(const Simple& s, const std::string& name) { return is_false(prop_schema(s, name)); }

  // Generation: b requires a name a never writes.
  bool names_apart(const Simple& a, const Simple& b) {
    const auto names = written_names(a);
    if (!names) return false;
    for (const std::string& k : b.required)
      if (std::find(names->begin(), names->end(), k) == names->end()) return true;
    return b.min_props > static_cast<int64_t>(names->size());
  }

  bool objects_apart(const Simple& a, const Simple& b, int depth) {
    try {
      return objects_apart_or_throw(a, b, depth);
    } catch (const SchemaError&) {
      return false;
    }
  }

  bool objects_apart_or_throw(const Simple& a, const Simple& b, int depth) {
    for (const std::string& k : a.required)
      if (forbids(b, k)) return true;
    for (const std::string& k : b.required)
      if (forbids(a, k)) return true;
    for (const std::string& k : a.required)
      if (std::find(b.required.begin(), b.required.end(), k) != b.required.end() &&
          nodes_apart(prop_schema(a, k), prop_schema(b, k), depth + 1))
        return true;
    return false;
  }

  bool nodes_apart(const Node& x, const Node& y, int depth) {
    if (depth > 8) return false;
    std::vector<Simple> xs, ys;
    try {
      xs = expand(x);
      ys = expand(y);
    } catch (const SchemaError&) {
      return false;  // lowering will name the problem
    }
    for (const Simple& a : xs)
      for (const Simple& b : ys)
        if (!disjoint(a, b, depth)) return false;
    return true;
  }

  // Whether `v` certainly fails `s` (false: it may pass, or checking it
  // failed).
  bool fails(const ojson& v, const Simple& s, int depth) {
    const bool was = possible_;
    possible_ = true;
    bool failed = false;
    try {
      failed = !satisfies_simple(v, s, depth);
    } catch (const SchemaError&) {
      failed = false;
    }
    possible_ = was;
    return failed;
  }

  // ---- lowering ----

  static std::string hint(const std::string& ptr) {
    if (ptr.empty()) return "root";
    const size_t slash = ptr.rfind('/');
    std::string last = ptr.substr(slash + 1);
    if (!last.empty() && last.find_first_not_of("0123456789") == std::string::npos && slash > 0) {
      const size_t before = ptr.rfind('/', slash - 1);
      last = ptr.substr(before + 1, slash - before - 1) + "-" + last;
    }
    return last;
  }

  Expr lower(const Node& n) {
    if (n.s->is_boolean()) return n.s->get<bool>() ? ref(sh_.value) : nothing();
    if (auto it = memo_.find(n.s); it != memo_.end()) return ref(it->second);
    const int32_t id = b_.reserve(hint(n.ptr), n.ptr);
    memo_[n.s] = id;
    Deeper guard(*this, n.ptr);
    b_.define(id, lower_body(n));
    return ref(id);
  }

  Expr lower_body(const Node& n) {
    if (n.s->is_boolean()) return n.s->get<bool>() ? ref(sh_.value) : nothing();
    if (!n.s->is_object()) throw SchemaError("schema", n.ptr, "a schema must be an object or a boolean");
    check_keywords(n);
    if (is_true(n)) return ref(sh_.value);
    if (ref_replaces(n)) return lower(resolve(n));
    // A bare anyOf/oneOf keeps its branches as rules of their own.
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!only_keyword(*n.s, kw)) continue;
      const std::vector<Node> subs = subschemas(n, kw);
      if (std::string_view(kw) == "oneOf") {
        std::vector<std::vector<Simple>> branches;
        for (const Node& sub : subs) branches.push_back(expand(sub));
        try {
          require_exclusive(branches, n.ptr);
        } catch (const SchemaError&) {
          break;  // each branch less the others: below
        }
      }
      std::vector<Expr> alts;
      for (const Node& sub : subs) alts.push_back(lower(sub));
      return alt(std::move(alts));
    }
    std::vector<Expr> alts;
    for (const Simple& s : expand(n, false)) alts.push_back(lower_simple(s));
    return alt(std::move(alts));
  }

  Expr lower_simple(const Simple& s) {
    if (s.has_values) {
      // The values that meet the other keywords too.
      Simple rest = s;
      rest.has_values = false;
      std::vector<Expr> alts;
      for (const ojson& v : s.values)
        if ((value_type(v) & s.types) && (s.constraints.empty() || satisfies_simple(v, rest, 0))) alts.push_back(literal(v));
      return alt(std::move(alts));
    }
    // A schema that constrains nothing is any value; generation narrows one
    // without a type to the types its keywords are about ({"minLength": 1}:
    // strings), as xgrammar does.
    if (s.types == kAllTypes && s.constraints.empty()) return ref(sh_.value);
    unsigned types = s.types;
    if (!exact_ && types == kAllTypes)
      if (const unsigned about = keyword_types(s.constraints)) types &= about;
    std::vector<Expr> alts;
    if (types & kNull) alts.push_back(ref(sh_.null));
    if (types & kBool) alts.push_back(ref(sh_.boolean));
    if (types & (kInteger | kFraction)) alts.push_back(lower_number(s));
    if (types & kString) alts.push_back(lower_string(s));
    if (types & kArray) alts.push_back(lower_array(s));
    if (types & kObject) alts.push_back(lower_object(s));
    return alt(std::move(alts));
  }

  Expr lower_number(const Simple& s) {
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
  Expr lower_multiples(const Simple& s) {
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
    const bool negative = !(s.lo.set && s.lo.value.sign() >= 0), positive = !(s.hi.set && s.hi.value.sign() <= 0);
    const bool zero = !(lo_zero && s.lo.exclusive) && !(hi_zero && s.hi.exclusive) && (!s.lo.set || s.lo.value.sign() <= 0) &&
                      (!s.hi.set || s.hi.value.sign() >= 0);
    const bool sign_only = (!s.lo.set || lo_zero) && (!s.hi.set || hi_zero);
    if (!sign_only) {
      if (places > 0) throw SchemaError("multipleOf", ptr, "beside bounds other than 0, a fractional multipleOf is not enforced");
      return enumerated_multiples(s, mod, ptr);
    }
    // state r: the digits so far are r modulo M; the integer part, then (for
    // places > 0) up to `places` fraction digits and zeros.
    const Expr digit = dec_digit(0, 9);
    std::vector<int32_t> whole(static_cast<size_t>(mod)), frac;
    for (int r = 0; r < mod; ++r) whole[static_cast<size_t>(r)] = b_.reserve("multiple", ptr);
    // frac rule (k, r): k fraction digits written, value so far r.
    std::map<std::pair<size_t, int>, int32_t> fr;
    std::function<Expr(size_t, int)> fraction = [&](size_t k, int r) -> Expr {
      if (k == places) return r == 0 ? star(text("0")) : nothing();
      if (auto it = fr.find({k, r}); it != fr.end()) return ref(it->second);
      const int32_t id = b_.reserve("multiple-fraction", ptr);
      fr.emplace(std::pair{k, r}, id);
      std::vector<Expr> alts;
      if (k > 0 && ends_multiple(r, places - k, mod)) alts.push_back(empty());
      for (int d = 0; d < 10; ++d) alts.push_back(seq({dec_digit(d, d), fraction(k + 1, (r * 10 + d) % mod)}));
      b_.define(id, alt(std::move(alts)));
      return ref(id);
    };
    // After the integer part, with value r: its fraction (scaled: r * 10^places so far).
    auto after_whole = [&](int r) -> Expr {
      if (places == 0) return r == 0 ? empty() : nothing();
      std::vector<Expr> alts;
      if (ends_multiple(r, places, mod)) alts.push_back(empty());  // an integral multiple, written as an integer
      alts.push_back(seq({text("."), fraction(0, r)}));
      return alt(std::move(alts));
    };
    for (int r = 0; r < mod; ++r) {
      std::vector<Expr> alts{after_whole(r)};
      for (int d = 0; d < 10; ++d) alts.push_back(seq({dec_digit(d, d), ref(whole[static_cast<size_t>((r * 10 + d) % mod)])}));
      b_.define(whole[static_cast<size_t>(r)], alt(std::move(alts)));
    }
    // A first digit 1-9; a sign where allowed.
    std::vector<Expr> nonzero;
    for (int d = 1; d < 10; ++d) nonzero.push_back(seq({dec_digit(d, d), ref(whole[static_cast<size_t>(d % mod)])}));
    const Expr above_zero = alt(std::move(nonzero));
    // Zero itself ("0", "0.00") is a multiple; numbers below 1 with a
    // fraction ("0.05") are above zero.
    const Expr fraction_below_one = places > 0 ? seq({text("0."), fraction_nonzero(places, mod, ptr)}) : nothing();
    std::vector<Expr> alts;
    const Expr magnitude_above = alt({above_zero, fraction_below_one});
    if (positive) alts.push_back(magnitude_above);
    if (negative) alts.push_back(seq({text("-"), magnitude_above}));
    if (zero) alts.push_back(places > 0 ? seq({text("0"), opt(seq({text("."), rep(text("0"), 1, -1)}))}) : text("0"));
    return alt(std::move(alts));
  }

  // Fractions (digits after "0.") of nonzero multiples: up to `places`
  // digits making a nonzero multiple of `mod`, then zeros.
  Expr fraction_nonzero(size_t places, int mod, const std::string& ptr) {
    std::map<std::tuple<size_t, int, bool>, int32_t> memo;
    std::function<Expr(size_t, int, bool)> go = [&](size_t k, int r, bool nonzero) -> Expr {
      if (k == places) return r == 0 && nonzero ? star(text("0")) : nothing();
      if (auto it = memo.find({k, r, nonzero}); it != memo.end()) return ref(it->second);
      const int32_t id = b_.reserve("multiple-fraction", ptr);
      memo.emplace(std::tuple{k, r, nonzero}, id);
      std::vector<Expr> alts;
      if (nonzero && ends_multiple(r, places - k, mod)) alts.push_back(empty());
      for (int d = 0; d < 10; ++d) alts.push_back(seq({dec_digit(d, d), go(k + 1, (r * 10 + d) % mod, nonzero || d > 0)}));
      b_.define(id, alt(std::move(alts)));
      return ref(id);
    };
    return go(0, 0, false);
  }

  // Whether r, followed by `zeros` implicit zeros, is a multiple of mod.
  static bool ends_multiple(int r, size_t zeros, int mod) {
    int64_t v = r;
    for (size_t i = 0; i < zeros; ++i) v = v * 10 % mod;
    return v % mod == 0;
  }

  // Integral multiples in a bounded range: each, where there are at most 1000.
  Expr enumerated_multiples(const Simple& s, int mod, const std::string& ptr) {
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
  NumberBound generation_safe(const Bound& b, bool lower, bool fractions) const {
    NumberBound nb{b.value, b.exclusive};
    if (exact_) return nb;
    const bool big = b.value.whole.size() >= 16;
    if (!((fractions && (b.exclusive || big)) || (!fractions && big && !b.integer_literal))) return nb;
    const int64_t at = b.value.zero() ? -30 : sixteenth_digit(b.value);
    return NumberBound{step(b.value, at, lower), false};
  }

  const std::string& pattern_of(const Simple& s) {
    if (s.patterns.size() > 1)
      throw SchemaError("pattern", s.patterns[1].second, "two patterns on one string cannot be intersected");
    return s.patterns.front().first;
  }

  Expr lower_string(const Simple& s) {
    if (s.max_len >= 0 && s.min_len > s.max_len) return nothing();
    const Expr quote = text("\"");
    if (!s.not_in.empty()) {
      if (s.min_len > 0 || s.max_len >= 0 || !s.patterns.empty() || !s.format.empty())
        throw SchemaError("not", s.ptr, "strings other than some, beside other string keywords, are not enforced");
      return key_not_in(s.not_in);
    }
    if (s.patterns.empty() && s.format.empty()) {
      if (s.min_len == 0 && s.max_len < 0) return ref(sh_.string);
      return seq({quote, counted(ref(sh_.chr), s.min_len, s.max_len, s.max_len > s.min_len ? "maxLength" : "minLength", s.ptr),
                  quote});
    }
    if (!s.patterns.empty() && !s.format.empty())
      throw SchemaError("format", s.format_ptr, "a format and a pattern on one string cannot be intersected");
    Expr c = s.patterns.empty() ? format_content(s.format) : pattern_content(pattern_of(s), s.patterns.front().second);
    c = bound_length(std::move(c), s);
    return seq({quote, json_content(c), quote});
  }

  // A pattern matches anywhere in the string unless anchored.
  Expr pattern_content(const std::string& pattern, const std::string& ptr) {
    std::vector<Expr> alts;
    const Expr anything = star(chars(CharSet::any()));
    for (RegexBranch& b : parse_regex(pattern, ptr)) {
      if (nullable(b.body) && !(b.anchored_start && b.anchored_end)) {
        alts.push_back(anything);
        continue;
      }
      alts.push_back(seq({b.anchored_start ? empty() : anything, std::move(b.body), b.anchored_end ? empty() : anything}));
    }
    return alt(std::move(alts));
  }

  Expr exact_format_content(const std::string& format) {
    std::vector<Expr> alts;
    for (RegexBranch& b : parse_regex(format_regexes().find(format)->second, "")) alts.push_back(std::move(b.body));
    return alt(std::move(alts));
  }

  Expr format_content(const std::string& format) {
    std::vector<Expr> alts;
    auto it = generation_format_regexes().find(format);
    const std::string& regex = !exact_ && it != generation_format_regexes().end() ? it->second : format_regexes().find(format)->second;
    for (RegexBranch& b : parse_regex(regex, "")) alts.push_back(std::move(b.body));
    return alt(std::move(alts));
  }

  // minLength/maxLength beside a pattern or format: kept where the regex
  // already implies them or is one repeated class, refused elsewhere.
  Expr bound_length(Expr c, const Simple& s) {
    if (s.min_len == 0 && s.max_len < 0) return c;
    const auto [lo, hi] = length_range(c);
    if (lo >= s.min_len && (s.max_len < 0 || (hi >= 0 && hi <= s.max_len))) return c;
    if (c.kind == Expr::Kind::rep && c.items[0].kind == Expr::Kind::chars) {
      const int64_t min = std::max<int64_t>(c.min, s.min_len), max = min_of(c.max, s.max_len);
      return counted(c.items[0], min, max, s.max_len >= 0 ? "maxLength" : "minLength", s.ptr);
    }
    // Generation: the regex with its repetitions capped at the largest count
    // that keeps every match within maxLength (a subset), where its
    // shortest match is long enough.
    if (!exact_ && lo >= s.min_len && s.max_len >= 0) {
      Expr shorter = capped(c, s.max_len);
      if (shorter.kind != Expr::Kind::nothing && length_range(shorter).first >= s.min_len) return shorter;
    }
    throw SchemaError(s.max_len >= 0 ? "maxLength" : "minLength", s.ptr,
                      "beside a pattern or format, string lengths are enforced only where the regex implies them, is one "
                      "repeated character class, or (generation) holds a match within maxLength once its repetitions are "
                      "capped");
  }

  // Code points → their spellings inside a JSON string.
  Expr json_content(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::text: {
        std::vector<Expr> parts;
        for (uint32_t c : decode_utf8(e.text)) parts.push_back(spell(c));
        return seq(std::move(parts));
      }
      case Expr::Kind::chars: return spell_set(e.chars);
      case Expr::Kind::seq:
      case Expr::Kind::alt: {
        std::vector<Expr> parts;
        for (const Expr& x : e.items) parts.push_back(json_content(x));
        return e.kind == Expr::Kind::seq ? seq(std::move(parts)) : alt(std::move(parts));
      }
      case Expr::Kind::rep: return rep(json_content(e.items[0]), e.min, e.max);
      default: return e;
    }
  }

  Expr spell(char32_t c) {
    if (exact_) return json_spellings(CharSet(c, c), true);
    std::string one;
    if (c == '"' || c == '\\' || c < 0x20) one = canonical_escape(c);
    else put_utf8(one, c);
    return text(one);
  }

  Expr spell_set(const CharSet& set) {
    if (set == CharSet::any()) return ref(sh_.chr);
    if (set.single()) return spell(set.ranges()[0].lo);
    return ref(b_.intern("chars", json_spellings(set, exact_)));
  }

  Expr quoted(const std::string& s) { return seq({text("\""), json_content(text(s)), text("\"")}); }

  Expr literal(const ojson& v) {
    const Expr ws = layout_.ws();
    switch (v.type()) {
      case ojson::value_t::null: return text("null");
      case ojson::value_t::boolean: return text(v.get<bool>() ? "true" : "false");
      case ojson::value_t::string: return quoted(v.get<std::string>());
      case ojson::value_t::array: {
        std::vector<Expr> parts{text("["), ws};
        for (size_t i = 0; i < v.size(); ++i) {
          if (i) parts.push_back(layout_.comma());
          parts.push_back(literal(v[i]));
          parts.push_back(ws);
        }
        parts.push_back(text("]"));
        return seq(std::move(parts));
      }
      case ojson::value_t::object: {
        std::vector<Expr> parts{text("{"), ws};
        bool first = true;
        for (const auto& [k, x] : v.items()) {
          if (!first) parts.push_back(layout_.comma());
          first = false;
          for (Expr p : {quoted(k), layout_.colon(), literal(x), ws}) parts.push_back(std::move(p));
        }
        parts.push_back(text("}"));
        return seq(std::move(parts));
      }
      default: return text(number_text(v));
    }
  }

  // x{lo,hi} (hi -1: unbounded); counts past gbnf.cpp's cap as repeated
  // blocks of 100: x{n} = (x{100}){q} x{r}, x{0,n} = (x{100}){0,q-1} x{0,99}
  // | (x{100}){q} x{0,r}.
  Expr counted(const Expr& x, int64_t lo, int64_t hi, const std::string& kw, const std::string& ptr) {
    constexpr int64_t kBlock = 100, kMax = kBlock * kMaxRepeat;
    if (lo > kMax || hi > kMax) throw SchemaError(kw, ptr, "above " + std::to_string(kMax));
    if (hi >= 0 && hi < lo) return nothing();
    if (lo <= kMaxRepeat && hi <= kMaxRepeat) return rep(x, static_cast<int32_t>(lo), static_cast<int32_t>(hi));
    const Expr block = ref(b_.intern("block", rep(x, kBlock, kBlock)));
    auto n32 = [](int64_t n) { return static_cast<int32_t>(n); };
    const Expr head = seq({rep(block, n32(lo / kBlock), n32(lo / kBlock)), rep(x, n32(lo % kBlock), n32(lo % kBlock))});
    if (hi < 0) return seq({head, star(x)});
    const int64_t n = hi - lo;
    if (n <= kMaxRepeat) return seq({head, rep(x, 0, n32(n))});
    const int64_t q = n / kBlock, r = n % kBlock;
    return seq({head, alt({seq({rep(block, 0, n32(q - 1)), rep(x, 0, n32(kBlock - 1))}),
                           seq({rep(block, n32(q), n32(q)), rep(x, 0, n32(r))})})});
  }

  Expr lower_array(const Simple& s) {
    constexpr int64_t kMaxItems = 100 * int64_t{kMaxRepeat};
    if (s.min_items > kMaxItems) throw SchemaError("minItems", s.ptr, "above " + std::to_string(kMaxItems));
    if (s.max_items > kMaxItems) throw SchemaError("maxItems", s.ptr, "above " + std::to_string(kMaxItems));
    if (s.max_items >= 0 && s.min_items > s.max_items) return nothing();
    if (s.prefix.empty() && !s.rest && s.min_items == 0 && s.max_items < 0 && s.contains.empty() && !s.unique)
      return ref(sh_.array);
    std::vector<Node> prefix = s.prefix;
    if (s.max_items >= 0 && static_cast<int64_t>(prefix.size()) > s.max_items) prefix.resize(static_cast<size_t>(s.max_items));
    if (prefix.size() > static_cast<size_t>(kMaxRepeat)) throw SchemaError("items", s.ptr, "a tuple of more than 10000 items");
    const auto k = static_cast<int64_t>(prefix.size());
    const Expr ws = layout_.ws(), sep = layout_.comma();
    if (s.unique && (s.max_items < 0 || s.max_items > 1 || !s.contains.empty()))
      return seq({text("["), ws, unique_items(s), text("]")});
    if (!s.contains.empty()) return seq({text("["), ws, contains_items(s), text("]")});
    const Expr rest = s.rest ? lower(*s.rest) : ref(sh_.value);
    const auto upto = [&](int64_t used) { return s.max_items < 0 ? -1 : s.max_items - used; };
    const std::string kw = s.max_items >= 0 ? "maxItems" : "minItems";
    Expr body;
    if (k == 0) {
      const Expr more = counted(seq({sep, rest, ws}), std::max<int64_t>(s.min_items - 1, 0), upto(1), kw, s.ptr);
      const Expr some = seq({rest, ws, more});
      body = s.max_items == 0 ? empty() : s.min_items == 0 ? opt(some) : some;
    } else {
      // The rest after the tuple, then the tuple's items from the last:
      // each present (required below minItems) or the array ends there.
      body = counted(seq({sep, rest, ws}), std::max<int64_t>(s.min_items - k, 0), upto(k), kw, s.ptr);
      for (int64_t i = k - 1; i >= 0; --i) {
        Expr present = seq({i == 0 ? empty() : sep, lower(prefix[static_cast<size_t>(i)]), ws, std::move(body)});
        body = i < s.min_items ? std::move(present) : alt({std::move(present), empty()});
        if (i % 8 == 7) body = ref(b_.intern("tuple", std::move(body)));
      }
    }
    return seq({text("["), ws, std::move(body), text("]")});
  }

  // uniqueItems where the items have finitely many values (enum, const,
  // booleans, null): generation writes distinct values in the order the
  // schema lists them (states: the last written); exact, in any order
  // (states: the set written, up to 12 values).
  Expr unique_items(const Simple& s) {
    const std::string ptr = s.ptr;
    if (!s.prefix.empty() || !s.contains.empty())
      throw SchemaError("uniqueItems", ptr, "beside prefixItems or contains: not enforced");
    if (!s.rest) throw SchemaError("uniqueItems", ptr, "a grammar cannot compare array items of any value with each other");
    std::vector<ojson> values;
    auto add = [&](const ojson& v) {
      if (std::none_of(values.begin(), values.end(), [&](const ojson& w) { return same_value(v, w); })) values.push_back(v);
    };
    for (const Simple& x : expand(*s.rest)) {
      Simple rest = x;
      rest.has_values = false;
      if (x.has_values) {
        for (const ojson& v : x.values)
          if ((value_type(v) & x.types) && (x.constraints.empty() || satisfies_simple(v, rest, 0))) add(v);
      } else if (!(x.types & ~static_cast<unsigned>(kNull | kBool))) {
        if (x.types & kNull) add(ojson(nullptr));
        if (x.types & kBool) add(ojson(false)), add(ojson(true));
      } else {
        throw SchemaError("uniqueItems", ptr,
                          "a grammar cannot compare array items with each other (only items of finitely many values: "
                          "enum, const, booleans)");
      }
    }
    const auto k = static_cast<int64_t>(values.size());
    const int64_t max = s.max_items < 0 ? k : std::min(s.max_items, k);
    if (exact_ ? k > 12 : k * k * (max + 1) > 200000)
      throw SchemaError("uniqueItems", ptr, "distinct items from " + std::to_string(k) + " values: too many states");
    std::vector<Expr> items;
    for (const ojson& v : values) items.push_back(seq({literal(v), layout_.ws()}));
    std::map<std::pair<int64_t, int64_t>, int32_t> memo;  // (last index or set, count)
    std::function<Expr(int64_t, int64_t)> state = [&](int64_t at, int64_t count) -> Expr {
      if (auto it = memo.find({at, count}); it != memo.end()) return ref(it->second);
      const int32_t id = b_.reserve("unique", ptr);
      memo.emplace(std::pair{at, count}, id);
      std::vector<Expr> alts;
      if (count >= s.min_items) alts.push_back(empty());
      if (count < max) {
        const Expr sep = count > 0 ? layout_.comma() : empty();
        for (int64_t j = exact_ ? 0 : at + 1; j < k; ++j)
          if (!exact_ || !(at & (int64_t{1} << j)))
            alts.push_back(seq({sep, items[static_cast<size_t>(j)], state(exact_ ? at | (int64_t{1} << j) : j, count + 1)}));
      }
      b_.define(id, alt(std::move(alts)));
      return ref(id);
    };
    return state(exact_ ? 0 : -1, 0);
  }

  // Items of which one at least meets `contains`: states (items so far,
  // whether one met it).
  Expr contains_items(const Simple& s) {
    if (s.contains.size() > 1) throw SchemaError("contains", s.contains[1].ptr, "two contains schemas are not enforced");
    if (!s.prefix.empty()) throw SchemaError("contains", s.contains[0].ptr, "beside prefixItems: not enforced");
    const Node item = s.rest ? *s.rest : Node{&kTrueSchema, s.ptr};
    const Expr any = seq({lower(item), layout_.ws()}), hit = seq({lower(both(item, s.contains[0])), layout_.ws()});
    if (hit.kind == Expr::Kind::nothing) return nothing();  // no item can meet it: no array
    const int64_t cap = s.max_items >= 0 ? s.max_items : std::max<int64_t>(s.min_items, 1);
    if (cap > kMaxRepeat) throw SchemaError(s.max_items >= 0 ? "maxItems" : "minItems", s.ptr, "beside contains, above " + std::to_string(kMaxRepeat));
    std::map<std::pair<int64_t, bool>, int32_t> memo;
    std::function<Expr(int64_t, bool)> state = [&](int64_t c, bool found) -> Expr {
      const Expr sep = c > 0 ? layout_.comma() : empty();
      if (s.max_items < 0 && c == cap && found) return star(seq({layout_.comma(), any}));
      if (auto it = memo.find({c, found}); it != memo.end()) return ref(it->second);
      const int32_t id = b_.reserve("contains", s.ptr);
      memo.emplace(std::pair{c, found}, id);
      std::vector<Expr> alts;
      if (found && c >= s.min_items) alts.push_back(empty());
      if (s.max_items < 0 || c < s.max_items) {
        const int64_t next = s.max_items < 0 ? std::min(c + 1, cap) : c + 1;
        alts.push_back(seq({sep, hit, state(next, true)}));
        alts.push_back(seq({sep, any, state(next, found)}));
      }
      b_.define(id, alt(std::move(alts)));
      return ref(id);
    };
    return state(0, false);
  }

  // Keys (as JSON strings, closing quote included) that decode to none of `names`.
  Expr key_not_in(const std::vector<std::string>& names) {
    if (names.empty()) return ref(sh_.string);
    const std::vector<CodePointTrie> trie = code_point_trie(names);
    std::function<Expr(size_t, int)> rest = [&](size_t at, int depth) {
      std::vector<Expr> alts;
      if (!trie[at].terminal) alts.push_back(text("\""));
      CharSet kids;
      for (const auto& [c, next] : trie[at].next) kids.add(c, c);
      alts.push_back(seq({spell_set(kids.complement()), ref(sh_.tail)}));
      for (const auto& [c, next] : trie[at].next) alts.push_back(seq({spell(c), rest(next, depth + 1)}));
      Expr e = alt(std::move(alts));
      return depth % 8 == 7 ? ref(b_.intern("key", std::move(e))) : e;
    };
    return seq({text("\""), rest(0, 0)});
  }

  // An object's members as a machine over (next declared member, members so
  // far, whether any came yet); every state a rule.
  struct ObjectPlan {
    std::vector<Expr> members;  // `"name": value`
    std::vector<char> required;
    Expr extra = nothing();  // one property of another name, or nothing
    int64_t min = 0, max = -1;
    std::string ptr;
  };

  Expr lower_object(const Simple& s) {
    // Declared names (and required ones), each with all it must meet.
    std::vector<std::pair<std::string, Node>> members;
    for (const auto& [k, n] : s.props) members.emplace_back(k, prop_schema(s, k));
    for (const std::string& r : s.required)
      if (!find_prop(s, r)) members.emplace_back(r, prop_schema(s, r));
    if (exact_ && members.empty() && !s.additional && s.min_props == 0 && s.max_props < 0 && s.pattern_props.empty() &&
        s.property_names.empty())
      return ref(sh_.object);
    ObjectPlan plan;
    plan.min = s.min_props;
    plan.max = s.max_props;
    plan.ptr = s.ptr;
    std::vector<std::string> names;
    for (const auto& m : members) names.push_back(m.first);
    for (const auto& [name, node] : members) {
      plan.members.push_back(seq({quoted(name), layout_.colon(), lower(node), layout_.ws()}));
      plan.required.push_back(std::find(s.required.begin(), s.required.end(), name) != s.required.end());
    }
    std::vector<Expr> extras = other_properties(s, names);
    if (!extras.empty()) plan.extra = ref(b_.intern("other-property", alt(std::move(extras))));
    // Only declared properties and one of other names count towards
    // minProperties (another name may repeat); exact must not need more.
    const auto required = std::count(plan.required.begin(), plan.required.end(), 1);
    if (exact_ && plan.extra.kind != Expr::Kind::nothing && plan.min > std::max<int64_t>(required, 1))
      throw SchemaError("minProperties", s.ptr,
                        "counting properties of other names is not enforced (a grammar cannot keep a name from repeating)");
    const int64_t states = static_cast<int64_t>(members.size() + 1) * (std::min<int64_t>(plan.min, static_cast<int64_t>(members.size())) + 1) *
                           (plan.max >= 0 ? plan.max + 1 : 1);
    if ((plan.min > 0 || plan.max >= 0) && states > 100000)
      throw SchemaError(plan.max >= 0 ? "maxProperties" : "minProperties", s.ptr,
                        "counting properties past 100000 states (declared properties times the counts)");
    return seq({text("{"), layout_.ws(), ObjectStates(*this, plan).start(), text("}")});
  }

  // Properties of names not declared: by patternProperties, then by
  // additionalProperties. Exact: other names are allowed unless
  // additionalProperties says no; generation: only where it says yes (and
  // no pattern is given: their complement is not held).
  std::vector<Expr> other_properties(const Simple& s, const std::vector<std::string>& names) {
    std::vector<Expr> out;
    const bool closed = s.additional && is_false(*s.additional);
    bool open = exact_ ? !closed : s.additional && !closed;
    const bool vacuous = std::all_of(s.pattern_props.begin(), s.pattern_props.end(), [](const auto& pp) { return is_true(pp.schema); }) &&
                         (!s.additional || is_true(*s.additional));
    if (!s.pattern_props.empty() && !(exact_ && vacuous)) {
      const auto& first = s.pattern_props.front();
      if (exact_ && open)
        throw SchemaError("patternProperties", first.ptr,
                          "beside additionalProperties other than false, names matching no pattern are not enforced");
      open = false;
      // Exact: a name two patterns match meets both schemas, which one
      // alternative per pattern holds only where they are the same.
      // Generation: each pattern's names meet every pattern's schema.
      std::optional<Node> all;
      for (const auto& pp : s.pattern_props) {
        if (exact_ && !same_value(*pp.schema.s, *first.schema.s))
          throw SchemaError("patternProperties", pp.ptr, "patterns with different schemas, which a name may match both of");
        all = all ? both(*all, pp.schema) : pp.schema;
      }
      for (const auto& pp : s.pattern_props) {
        if (!s.property_names.empty())
          throw SchemaError("propertyNames", s.property_names.front().ptr, "beside patternProperties: not enforced");
        // Names the pattern matches, but for the declared ones.
        const std::vector<RegexBranch>& re = regex(pp.regex, pp.ptr);
        std::vector<std::string> matched;
        for (const std::string& name : names)
          if (regex_search(re, decode_utf8(name))) matched.push_back(name);
        const Expr key = seq({text("\""), json_content(without(pattern_content(pp.regex, pp.ptr), matched)), text("\"")});
        out.push_back(seq({key, layout_.colon(), lower(*all), layout_.ws()}));
      }
    }
    if (open) {
      const Node extra_schema = s.additional ? *s.additional : Node{&kTrueSchema, s.ptr};
      for (const Expr& key : other_keys(s, names)) out.push_back(seq({key, layout_.colon(), lower(extra_schema), layout_.ws()}));
    }
    return out;
  }

  // Keys (JSON strings) of none of `names` that meet propertyNames.
  std::vector<Expr> other_keys(const Simple& s, const std::vector<std::string>& names) {
    if (s.property_names.empty()) return {key_not_in(names)};
    if (s.property_names.size() > 1)
      throw SchemaError("propertyNames", s.property_names[1].ptr, "two propertyNames schemas cannot be intersected");
    const Node& pn = s.property_names.front();
    std::vector<Expr> out;
    for (const Simple& k : expand(pn)) {
      if (!(k.types & kString)) continue;
      if (k.has_values) {
        for (const ojson& v : k.values)
          if (v.is_string() && std::find(names.begin(), names.end(), v.get<std::string>()) == names.end() &&
              satisfies(v, pn))
            out.push_back(quoted(v.get<std::string>()));
        continue;
      }
      Simple str = k;
      str.types = kString;
      if (str.min_len == 0 && str.max_len < 0 && str.patterns.empty() && str.format.empty()) {
        out.push_back(key_not_in(names));
        continue;
      }
      for (const std::string& name : names)
        if (satisfies_simple(ojson(name), str, 0))
          throw SchemaError("propertyNames", pn.ptr, "the declared property '" + name + "' meets it: other names are not enforced");
      out.push_back(lower_string(str));
    }
    return out;
  }

  class ObjectStates {
   public:
    ObjectStates(Converter& c, const ObjectPlan& p) : c_(c), p_(p), n_(p.members.size()) {
      has_extra_ = p.extra.kind != Expr::Kind::nothing;
      if (has_extra_) extras_ = c_.b_.intern("other-properties", star(seq({c_.layout_.comma(), p.extra})));
    }

    Expr start() { return next(0, 0, 0, true, false); }

   private:
    Expr sep(bool first) const { return first ? empty() : c_.layout_.comma(); }
    Expr extras() const { return has_extra_ ? ref(extras_) : empty(); }

    // At declared member i, after `distinct` members that are certainly
    // distinct (declared ones, and the first of other names: later ones may
    // repeat it, so they do not count towards minProperties) and `total`
    // members (for maxProperties: a repeated name only makes fewer).
    Expr next(size_t i, int64_t distinct, int64_t total, bool first, bool other) {
      distinct = std::min(distinct, p_.min);
      if (p_.max < 0) total = 0;
      if (p_.max >= 0 && total > p_.max) return nothing();
      if (p_.max < 0 && distinct >= p_.min) return c_.exact_ ? exact_free(i, first) : free(i, first);
      if (i == n_) return tail(distinct, total, first, other);
      return rule({2, i, distinct, total, first, other}, [&] {
        std::vector<Expr> alts{seq({sep(first), p_.members[i], next(i + 1, distinct + 1, total + 1, false, other)})};
        if (!p_.required[i]) alts.push_back(next(i + 1, distinct, total, first, other));
        if (has_extra_ && c_.exact_)
          alts.push_back(seq({sep(first), p_.extra, next(i, distinct + (other ? 0 : 1), total + 1, false, true)}));
        return alt(std::move(alts));
      });
    }

    // Only other names left.
    Expr tail(int64_t distinct, int64_t total, bool first, bool other) {
      const bool one_needed = distinct < p_.min;
      if (one_needed && (other || distinct + 1 < p_.min || !has_extra_)) return nothing();
      const int64_t hi = p_.max < 0 ? -1 : p_.max - total;
      if (!has_extra_ || hi == 0) return one_needed ? nothing() : empty();
      const Expr more = c_.counted(seq({c_.layout_.comma(), p_.extra}), 0, hi < 0 ? -1 : hi - 1, "maxProperties", p_.ptr);
      const Expr some = seq({sep(first), p_.extra, more});
      return one_needed ? some : opt(some);
    }

    // Generation, no count left to keep: declared members in order, then
    // other names.
    Expr free(size_t i, bool first) {
      if (i == n_) return tail(p_.min, 0, first, false);
      return rule({0, i, 0, 0, first, false}, [&] {
        std::vector<Expr> alts{seq({sep(first), p_.members[i], free(i + 1, false)})};
        if (!p_.required[i]) alts.push_back(free(i + 1, first));
        return alt(std::move(alts));
      });
    }

    // Exact, no count left to keep: other names anywhere among the declared.
    Expr exact_free(size_t i, bool first) {
      if (!has_extra_) return declared(i, first);
      return rule({1, i, 0, 0, first, false}, [&] {
        if (!first) return seq({extras(), declared(i, false)});
        return alt({declared(i, true), seq({p_.extra, extras(), declared(i, false)})});
      });
    }

    Expr declared(size_t i, bool first) {
      if (i == n_) return empty();
      return rule({3, i, 0, 0, first, false}, [&] {
        std::vector<Expr> alts{seq({sep(first), p_.members[i], exact_free(i + 1, false)})};
        if (!p_.required[i]) alts.push_back(declared(i + 1, first));
        return alt(std::move(alts));
      });
    }

    using Key = std::tuple<int, size_t, int64_t, int64_t, bool, bool>;
    template <typename F>
    Expr rule(const Key& key, F body) {
      if (auto it = memo_.find(key); it != memo_.end()) return ref(it->second);
      const int32_t id = c_.b_.reserve("props");
      memo_.emplace(key, id);
      c_.b_.define(id, body());
      return ref(id);
    }

    Converter& c_;
    const ObjectPlan& p_;
    size_t n_;
    bool has_extra_ = false;
    int32_t extras_ = -1;
    std::map<Key, int32_t> memo_;
  };

  const SchemaLimits& limits_;
  const bool exact_;
  Layout layout_;
  ojson doc_;
  Draft draft_ = Draft::unknown;
  bool legacy_id_ = true;  // `id` is draft 4's $id (no $schema, or draft 3 or 4)
  bool has_refs_ = false;
  RuleBuilder b_;
  Shared sh_{};
  std::map<const ojson*, int32_t> memo_;
  std::map<std::string, std::vector<RegexBranch>> regexes_;
  bool possible_ = false;  // satisfies(): whether a validator may accept (true) or the grammar writes (false)
  std::deque<ojson> arena_;
  std::map<std::string, const ojson*> arena_index_;
  size_t arena_bytes_ = 0;
  int depth_ = 0;
  std::vector<const ojson*> expanding_;
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json, const SchemaLimits& limits, const SchemaOptions& options) {
  return Converter(schema_json, limits, options).run();
}

std::string json_object_gbnf(const SchemaOptions& options) {
  static const std::string exact = Converter("{}", SchemaLimits{}, SchemaOptions{true}).object_only();
  static const std::string generation = Converter("{}", SchemaLimits{}, SchemaOptions{false}).object_only();
  return options.exact ? exact : generation;
}

std::string choice_to_gbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) throw std::invalid_argument("choice: at least one string is needed");
  std::vector<Expr> alts;
  for (const std::string& c : choices) {
    try {
      decode_utf8(c);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument("choice: a string that is not valid UTF-8");
    }
    alts.push_back(text(c));
  }
  RuleBuilder b(size_t{64} << 20);
  const int32_t root = b.reserve("root");
  b.define(root, alt(std::move(alts)));
  try {
    return b.emit(root);
  } catch (const BuildError& e) {
    throw std::invalid_argument("choice: " + e.why);
  }
}

}  // namespace troupe::grammar
