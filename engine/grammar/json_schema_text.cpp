// JSON text pieces for the JSON Schema converter (json_schema_text.h).
#include "engine/grammar/json_schema_text.h"

#include <functional>
#include <map>

namespace troupe::grammar::schema {

CharSet set_of(std::u32string_view chars) {
  CharSet s;
  for (char32_t c : chars) s.add(c, c);
  return s;
}

namespace {

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

}  // namespace

std::string canonical_escape(char32_t c) {
  if (c == '"') return "\\\"";
  if (c == '\\') return "\\\\";
  if (auto it = short_escapes().find(c); it != short_escapes().end()) return it->second;
  static const char* kHex = "0123456789abcdef";
  return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
}

Expr json_spellings(const CharSet& set, bool exact) {
  std::vector<Expr> alts{chars(set - set_of(U"\"\\").add(0, 0x1F))};
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

Shared add_shared(RuleBuilder& b, Layout& layout) {
  Shared s{};
  const Expr hex = chars(CharSet('0', '9').add('a', 'f').add('A', 'F'));
  const Expr digit = chars(CharSet('0', '9'));
  s.ws = -1;
  if (layout.exact) {
    s.ws = b.reserve("ws");
    b.define(s.ws, opt(alt({text(" "), seq({text("\n"), rep(chars(set_of(U" \t")), 0, 20)})})));
  }
  layout.ws_rule = s.ws;
  // \uXXXX spells a BMP character; a surrogate only as half of a pair.
  const Expr not_surrogate = seq({chars(CharSet('0', '9').add('a', 'c').add('A', 'C').add('e', 'f').add('E', 'F')), rep(hex, 3, 3)});
  const Expr low_surrogate = seq({text("\\u"), chars(set_of(U"dD")), chars(CharSet('c', 'f').add('C', 'F')), rep(hex, 2, 2)});
  const Expr pair = seq({chars(set_of(U"dD")), chars(set_of(U"89abAB")), rep(hex, 2, 2), low_surrogate});
  const Expr bmp_high = seq({chars(set_of(U"dD")), chars(CharSet('0', '7')), rep(hex, 2, 2)});
  s.chr = b.reserve("char");
  if (layout.exact)
    b.define(s.chr, alt({chars(CharSet::any() - set_of(U"\"\\").add(0, 0x1F)),
                         seq({text("\\"), alt({chars(set_of(U"\"\\/bfnrt")), seq({text("u"), alt({not_surrogate, bmp_high, pair})})})})}));
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
                          opt(seq({chars(set_of(U"eE")), opt(chars(set_of(U"+-"))), rep(digit, 1, -1)}))}));
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

}  // namespace troupe::grammar::schema
