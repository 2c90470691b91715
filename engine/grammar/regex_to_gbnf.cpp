// Regexes to GBNF, and the grammar IR (regex_to_gbnf.h) both converters print.
#include "engine/grammar/regex_to_gbnf.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <set>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/utf8_ranges.h"

namespace troupe::grammar {
namespace detail {

// ---- CharSet ----------------------------------------------------------------

namespace {

constexpr char32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

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
    if (c < kMinOfLength[len] || c > CharSet::kMax || (c >= kSurrogateLo && c <= kSurrogateHi))
      throw std::invalid_argument("not valid UTF-8");
    out.push_back(c);
    i += static_cast<size_t>(len);
  }
  return out;
}

// ---- expressions --------------------------------------------------------------

Expr nothing() {
  Expr e;
  e.kind = Expr::Kind::nothing;
  return e;
}

Expr empty() { return Expr{}; }

Expr text(std::string utf8) {
  if (utf8.empty()) return empty();
  Expr e;
  e.kind = Expr::Kind::text;
  e.text = std::move(utf8);
  return e;
}

Expr chars(CharSet set) {
  if (set.empty()) return nothing();
  Expr e;
  e.kind = Expr::Kind::chars;
  e.chars = std::move(set);
  return e;
}

Expr ref(int32_t rule) {
  Expr e;
  e.kind = Expr::Kind::rule;
  e.rule = rule;
  return e;
}

namespace {

void push_part(std::vector<Expr>& out, Expr&& p) {
  if (p.kind == Expr::Kind::text && !out.empty() && out.back().kind == Expr::Kind::text) out.back().text += p.text;
  else out.push_back(std::move(p));
}

}  // namespace

Expr seq(std::vector<Expr> parts) {
  std::vector<Expr> out;
  for (Expr& p : parts) {
    if (p.kind == Expr::Kind::nothing) return nothing();
    if (p.kind == Expr::Kind::empty) continue;
    if (p.kind == Expr::Kind::seq) {
      for (Expr& q : p.items) push_part(out, std::move(q));
    } else {
      push_part(out, std::move(p));
    }
  }
  if (out.empty()) return empty();
  if (out.size() == 1) return std::move(out[0]);
  Expr e;
  e.kind = Expr::Kind::seq;
  e.items = std::move(out);
  return e;
}

Expr alt(std::vector<Expr> parts) {
  std::vector<Expr> out;
  bool has_empty = false;
  auto take = [&](Expr&& p) {
    if (p.kind == Expr::Kind::nothing) return;
    if (p.kind == Expr::Kind::empty) has_empty = true;
    else out.push_back(std::move(p));
  };
  for (Expr& p : parts) {
    if (p.kind == Expr::Kind::alt) {
      for (Expr& q : p.items) take(std::move(q));
    } else {
      take(std::move(p));
    }
  }
  if (has_empty) out.push_back(empty());
  if (out.empty()) return nothing();
  if (out.size() == 1) return std::move(out[0]);
  Expr e;
  e.kind = Expr::Kind::alt;
  e.items = std::move(out);
  return e;
}

Expr rep(Expr e, int32_t min, int32_t max) {
  if (max >= 0 && max < min) return nothing();
  if (max == 0) return empty();
  if (e.kind == Expr::Kind::nothing) return min == 0 ? empty() : nothing();
  if (e.kind == Expr::Kind::empty) return empty();
  if (min == 1 && max == 1) return e;
  Expr r;
  r.kind = Expr::Kind::rep;
  r.min = min;
  r.max = max;
  r.items.push_back(std::move(e));
  return r;
}

bool nullable(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::empty: return true;
    case Expr::Kind::nothing:
    case Expr::Kind::text:
    case Expr::Kind::chars:
    case Expr::Kind::rule: return false;
    case Expr::Kind::seq: return std::all_of(e.items.begin(), e.items.end(), [](const Expr& x) { return nullable(x); });
    case Expr::Kind::alt: return std::any_of(e.items.begin(), e.items.end(), [](const Expr& x) { return nullable(x); });
    case Expr::Kind::rep: return e.min == 0 || nullable(e.items[0]);
  }
  return false;
}

namespace {

constexpr int64_t kSaturate = int64_t{1} << 40;
int64_t sat_add(int64_t a, int64_t b) { return std::min(a + b, kSaturate); }
int64_t sat_mul(int64_t a, int64_t b) { return a == 0 || b == 0 ? 0 : (a > kSaturate / b ? kSaturate : std::min(a * b, kSaturate)); }

int64_t code_points(std::string_view s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace

std::pair<int64_t, int64_t> length_range(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::nothing:
    case Expr::Kind::empty: return {0, 0};
    case Expr::Kind::text: return {code_points(e.text), code_points(e.text)};
    case Expr::Kind::chars:
    case Expr::Kind::rule: return {1, 1};
    case Expr::Kind::seq: {
      int64_t lo = 0, hi = 0;
      for (const Expr& x : e.items) {
        const auto [a, b] = length_range(x);
        lo = sat_add(lo, a);
        hi = (hi < 0 || b < 0) ? -1 : sat_add(hi, b);
      }
      return {lo, hi};
    }
    case Expr::Kind::alt: {
      int64_t lo = kSaturate, hi = 0;
      for (const Expr& x : e.items) {
        const auto [a, b] = length_range(x);
        lo = std::min(lo, a);
        hi = (hi < 0 || b < 0) ? -1 : std::max(hi, b);
      }
      return {lo, hi};
    }
    case Expr::Kind::rep: {
      const auto [a, b] = length_range(e.items[0]);
      const int64_t hi = b == 0 ? 0 : (e.max < 0 || b < 0) ? -1 : sat_mul(b, e.max);
      return {sat_mul(a, e.min), hi};
    }
  }
  return {0, 0};
}

int64_t expanded_size(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::nothing:
    case Expr::Kind::empty: return 1;
    case Expr::Kind::text: return static_cast<int64_t>(e.text.size());
    case Expr::Kind::chars: return 2;  // one element (a rule where it is not ASCII), however many ranges
    case Expr::Kind::rule: return 1;
    case Expr::Kind::seq:
    case Expr::Kind::alt: {
      int64_t n = 1;
      for (const Expr& x : e.items) n = sat_add(n, expanded_size(x));
      return n;
    }
    case Expr::Kind::rep: {
      // gbnf.cpp writes min copies and then max - min nested optional rules.
      const int64_t copies = e.max < 0 ? e.min + 1 : e.max;
      return sat_add(sat_mul(copies, expanded_size(e.items[0]) + 4), 4);
    }
  }
  return 1;
}

std::string expr_key(const Expr& e) {
  std::string k;
  std::function<void(const Expr&)> walk = [&](const Expr& x) {
    switch (x.kind) {
      case Expr::Kind::nothing: k += "!"; break;
      case Expr::Kind::empty: k += "e"; break;
      case Expr::Kind::text: k += "t" + std::to_string(x.text.size()) + ":" + x.text; break;
      case Expr::Kind::chars:
        k += "c";
        for (const auto& r : x.chars.ranges()) k += std::to_string(r.lo) + "-" + std::to_string(r.hi) + ",";
        break;
      case Expr::Kind::rule: k += "r" + std::to_string(x.rule); break;
      case Expr::Kind::seq:
      case Expr::Kind::alt:
      case Expr::Kind::rep:
        k += x.kind == Expr::Kind::seq ? "(" : x.kind == Expr::Kind::alt ? "[" : "{" + std::to_string(x.min) + "," + std::to_string(x.max) + ":";
        for (const Expr& y : x.items) walk(y), k += " ";
        k += ")";
        break;
    }
  };
  walk(e);
  return k;
}

// ---- the regex parser ---------------------------------------------------------

namespace {

constexpr int32_t kMaxRepeat = 10000;      // gbnf.cpp's own cap on x{m,n}
constexpr int64_t kMaxExpansion = 200000;  // grammar elements one pattern may become
constexpr int kMaxGroupDepth = 200;

CharSet digits() { return CharSet('0', '9'); }
CharSet word() { return CharSet('0', '9').add('A', 'Z').add('a', 'z').add('_', '_'); }
CharSet space() {
  // ECMA-262's WhiteSpace and LineTerminator.
  CharSet s('\t', '\r');
  for (char32_t c : {U' ', U'\u00a0', U'\u1680', U'\u2028', U'\u2029', U'\u202f', U'\u205f', U'\u3000', U'\ufeff'})
    s.add(c, c);
  return s.add(0x2000, 0x200a);
}
CharSet dot() {
  return CharSet::any() - CharSet('\n', '\n').add('\r', '\r').add(0x2028, 0x2029);
}

std::string utf8_of(char32_t c) {
  std::string s;
  put_utf8(s, c);
  return s;
}

class RegexParser {
 public:
  RegexParser(std::string_view pattern, const std::string& pointer) : pointer_(pointer) {
    try {
      cps_ = decode_utf8(pattern);
    } catch (const std::invalid_argument&) {
      fail("the pattern is not valid UTF-8");
    }
  }

  std::vector<RegexBranch> parse() {
    std::vector<RegexBranch> out;
    for (;;) {
      out.push_back(branch());
      if (done()) break;
      ++at_;  // '|'
    }
    int64_t size = 0;
    for (const RegexBranch& b : out) size += expanded_size(b.body);
    if (size > kMaxExpansion)
      fail("the pattern expands past " + std::to_string(kMaxExpansion) + " grammar elements (its repetitions are too large)");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw SchemaError("pattern", pointer_, why + (at_ < cps_.size() ? " (at character " + std::to_string(at_) + ")" : ""));
  }
  bool done() const { return at_ >= cps_.size(); }
  char32_t cur() const { return done() ? 0 : cps_[at_]; }
  char32_t peek(size_t k) const { return at_ + k < cps_.size() ? cps_[at_ + k] : 0; }

  // A top-level alternative: anchors may open and close it, nowhere else.
  RegexBranch branch() {
    RegexBranch b;
    if (cur() == '^' && !done()) ++at_, b.anchored_start = true;
    std::vector<Expr> parts;
    while (!done() && cur() != '|') {
      if (cur() == '$') {
        ++at_;
        if (!done() && cur() != '|') fail("'$' is only supported at the end of the pattern");
        b.anchored_end = true;
        break;
      }
      parts.push_back(quantified());
    }
    b.body = seq(std::move(parts));
    return b;
  }

  Expr alternation() {
    std::vector<Expr> alts;
    for (;;) {
      std::vector<Expr> parts;
      while (!done() && cur() != '|' && cur() != ')') parts.push_back(quantified());
      alts.push_back(seq(std::move(parts)));
      if (done() || cur() == ')') break;
      ++at_;
    }
    return alt(std::move(alts));
  }

  Expr quantified() {
    Expr a = atom();
    int32_t min = 0, max = 0;
    if (!quantifier(min, max)) return a;
    // Lazy or greedy, the strings that match are the same (there are no
    // backreferences or lookarounds): only which match is found differs.
    if (cur() == '?' && !done()) ++at_;
    int32_t m2 = 0, n2 = 0;
    const size_t save = at_;
    if (quantifier(m2, n2)) at_ = save, fail("a quantifier cannot follow a quantifier");
    return repeat(std::move(a), min, max);
  }

  bool quantifier(int32_t& min, int32_t& max) {
    if (done()) return false;
    switch (cur()) {
      case '*': ++at_, min = 0, max = -1; return true;
      case '+': ++at_, min = 1, max = -1; return true;
      case '?': ++at_, min = 0, max = 1; return true;
      case '{': break;
      default: return false;
    }
    const size_t start = at_;
    ++at_;
    if (!number(min)) return at_ = start, false;
    max = min;
    if (cur() == ',') {
      ++at_;
      max = -1;
      if (cur() != '}' && !number(max)) return at_ = start, false;
    }
    if (cur() != '}') return at_ = start, false;
    ++at_;
    if (max >= 0 && max < min) fail("a quantifier {m,n} with n below m");
    return true;
  }

  bool number(int32_t& v) {
    const size_t start = at_;
    int64_t n = 0;
    while (!done() && cur() >= '0' && cur() <= '9') {
      n = n * 10 + (cur() - '0');
      if (n > kMaxRepeat) fail("a repetition count above " + std::to_string(kMaxRepeat));
      ++at_;
    }
    v = static_cast<int32_t>(n);
    return at_ > start;
  }

  // x{m,n} where x may match the empty string is x'{0,n}, x' its non-empty
  // part: a matcher then never loops on empty copies.
  Expr repeat(Expr a, int32_t min, int32_t max) {
    if (nullable(a)) return rep(nonempty(a), 0, max);
    return rep(std::move(a), min, max);
  }

  Expr nonempty(const Expr& e) {
    if (++nonempty_steps_ > kMaxExpansion) fail("the pattern is too complex (nested optional repetitions)");
    switch (e.kind) {
      case Expr::Kind::nothing:
      case Expr::Kind::empty: return nothing();
      case Expr::Kind::alt: {
        std::vector<Expr> parts;
        for (const Expr& x : e.items) parts.push_back(nonempty(x));
        return alt(std::move(parts));
      }
      case Expr::Kind::seq: {
        if (!nullable(e)) return e;
        // The first non-empty part decides; those before it matched nothing.
        std::vector<Expr> parts;
        for (size_t i = 0; i < e.items.size(); ++i) {
          std::vector<Expr> s{nonempty(e.items[i])};
          s.insert(s.end(), e.items.begin() + static_cast<std::ptrdiff_t>(i) + 1, e.items.end());
          parts.push_back(seq(std::move(s)));
        }
        return alt(std::move(parts));
      }
      case Expr::Kind::rep: {
        const Expr& x = e.items[0];
        return rep(nullable(x) ? nonempty(x) : x, 1, e.max);
      }
      default: return e;
    }
  }

  Expr atom() {
    const char32_t c = cur();
    switch (c) {
      case '(': return group();
      case '[': return klass();
      case '.': ++at_; return chars(dot());
      case '\\': ++at_; return atom_escape();
      case '^': fail("'^' is only supported at the start of the pattern");
      case '$': fail("'$' is only supported at the end of the pattern");
      case ')': fail("unbalanced ')'");
      case '*':
      case '+':
      case '?': fail("nothing to repeat");
      case '{': fail("a '{' that does not start a quantifier (write \\{)");
      case '}':
      case ']': fail(std::string("a lone '") + static_cast<char>(c) + "' (write \\" + static_cast<char>(c) + ")");
      default: ++at_; return text(utf8_of(c));
    }
  }

  Expr group() {
    ++at_;  // (
    if (cur() == '?') {
      ++at_;
      if (cur() == ':') {
        ++at_;
      } else if (cur() == '=' || cur() == '!') {
        fail("lookahead is not supported");
      } else if (cur() == '<' && (peek(1) == '=' || peek(1) == '!')) {
        fail("lookbehind is not supported");
      } else if (cur() == '<') {
        ++at_;  // a named group matches as a plain one (nothing refers back)
        const size_t start = at_;
        while (!done() && (std::isalnum(static_cast<int>(cur() < 0x80 ? cur() : 0)) || cur() == '_' || cur() == '$')) ++at_;
        if (at_ == start || cur() != '>') fail("a malformed group name");
        ++at_;
      } else {
        fail("unsupported group syntax '(?'");
      }
    }
    if (++depth_ > kMaxGroupDepth) fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
    Expr e = alternation();
    if (done() || cur() != ')') fail("a group is not closed");
    ++at_;
    --depth_;
    return e;
  }

  static bool class_escape(char32_t c, CharSet& out) {
    switch (c) {
      case 'd': out = digits(); return true;
      case 'D': out = digits().complement(); return true;
      case 'w': out = word(); return true;
      case 'W': out = word().complement(); return true;
      case 's': out = space(); return true;
      case 'S': out = space().complement(); return true;
      default: return false;
    }
  }

  Expr atom_escape() {
    if (done()) fail("the pattern ends with '\\'");
    const char32_t c = cur();
    if (CharSet s; class_escape(c, s)) return ++at_, chars(std::move(s));
    if (c == 'b' || c == 'B') fail("word boundary assertions (\\b, \\B) are not supported");
    if (c == 'k' || (c >= '1' && c <= '9')) fail("backreferences are not supported");
    return text(utf8_of(char_escape(false)));
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char32_t c = cur();
      int d = -1;
      if (c >= '0' && c <= '9') d = static_cast<int>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<int>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<int>(c - 'A' + 10);
      if (d < 0) fail("expected " + std::to_string(digits) + " hexadecimal digits");
      v = v * 16 + static_cast<uint32_t>(d);
      ++at_;
    }
    return v;
  }

  // \uHHHH, \u{H...}, and a surrogate pair written as two \u escapes.
  char32_t unicode_escape() {
    if (cur() == '{') {
      ++at_;
      uint32_t v = 0;
      int n = 0;
      while (!done() && cur() != '}') {
        v = v * 16 + hex(1);
        if (++n > 6 || v > CharSet::kMax) fail("a \\u{...} escape past U+10FFFF");
      }
      if (done() || n == 0) fail("a malformed \\u{...} escape");
      ++at_;
      if (v >= kSurrogateLo && v <= kSurrogateHi) fail("a lone surrogate escape matches no text");
      return v;
    }
    const uint32_t v = hex(4);
    if (v >= 0xD800 && v <= 0xDBFF && cur() == '\\' && peek(1) == 'u') {
      const size_t save = at_;
      at_ += 2;
      const uint32_t low = hex(4);
      if (low >= 0xDC00 && low <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
      at_ = save;
    }
    if (v >= kSurrogateLo && v <= kSurrogateHi) fail("a lone surrogate escape matches no text");
    return v;
  }

  // One escaped character (at_ just past the backslash).
  char32_t char_escape(bool in_class) {
    const char32_t c = cur();
    ++at_;
    switch (c) {
      case 't': return '\t';
      case 'n': return '\n';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0':
        if (cur() >= '0' && cur() <= '9' && !done()) fail("octal escapes are not supported");
        return 0;
      case 'c': {
        const char32_t l = cur();
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) fail("\\c must be followed by a letter");
        ++at_;
        return l % 32;
      }
      case 'x': return hex(2);
      case 'u': return unicode_escape();
      case 'p':
      case 'P': --at_, fail("Unicode property escapes (\\p, \\P) are not supported");
      default: break;
    }
    if (c == 'b' && in_class) return '\b';
    static const std::u32string kSyntax = U"^$\\.*+?()[]{}|/-";
    if (kSyntax.find(c) != std::u32string::npos) return c;
    // Other ASCII punctuation escaped stands for itself (ECMA-262 Annex B,
    // Python's re); a letter or digit that is no escape is an error.
    if (c < 0x80 && std::ispunct(static_cast<int>(c))) return c;
    --at_;
    fail("unknown escape '\\" + utf8_of(c) + "'");
  }

  // One class member: a character (true, in `c`) or a class escape (false).
  bool class_atom(char32_t& c, CharSet& set) {
    if (done()) fail("a character class is not closed");
    if (cur() != '\\') return c = cur(), ++at_, true;
    ++at_;
    if (done()) fail("the pattern ends with '\\'");
    if (class_escape(cur(), set)) return ++at_, false;
    if (cur() == 'B') fail("\\B is not supported in a character class");
    if (cur() == 'k' || (cur() >= '1' && cur() <= '9')) fail("backreferences are not supported");
    c = char_escape(true);
    return true;
  }

  Expr klass() {
    ++at_;  // [
    const bool negated = cur() == '^' && !done();
    if (negated) ++at_;
    CharSet set;
    for (;;) {
      if (done()) fail("a character class is not closed");
      if (cur() == ']') break;
      char32_t lo = 0;
      CharSet escape_set;
      const bool is_char = class_atom(lo, escape_set);
      const bool range = cur() == '-' && peek(1) != ']' && at_ + 1 < cps_.size();
      if (!range) {
        if (is_char) set.add(lo, lo);
        else set.add(escape_set);
        continue;
      }
      ++at_;  // '-'
      char32_t hi = 0;
      CharSet ignored;
      if (!is_char || !class_atom(hi, ignored)) fail("a class escape (\\d, \\w, \\s) cannot bound a range");
      if (hi < lo) fail("a character range out of order");
      set.add(lo, hi);
    }
    ++at_;  // ]
    return chars(negated ? set.complement() : set);
  }

  std::string pointer_;
  std::vector<uint32_t> cps_;
  size_t at_ = 0;
  int depth_ = 0;
  int64_t nonempty_steps_ = 0;
};

}  // namespace

namespace {

// The end of the group opening at `open` (its ')'), skipping escapes and
// classes; npos if unclosed.
size_t group_end(std::string_view p, size_t open) {
  int depth = 0;
  bool in_class = false;
  for (size_t i = open; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      if (c == ']') in_class = false;
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')' && --depth == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

// The top-level alternatives of p.
std::vector<std::string> top_alternatives(std::string_view p) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (c == '[') {
      for (++i; i < p.size() && p[i] != ']'; ++i)
        if (p[i] == '\\') ++i;
    } else if (c == '(') {
      const size_t end = group_end(p, i);
      if (end == std::string_view::npos) return {std::string(p)};
      i = end;
    } else if (c == '|') {
      out.emplace_back(p.substr(start, i - start));
      start = i + 1;
    }
  }
  out.emplace_back(p.substr(start));
  return out;
}

// Where a group opens ("(", "(?:", "(?<name>"), the length of its opener.
size_t opener(std::string_view p, size_t i) {
  if (p.substr(i, 3) == "(?:") return 3;
  if (p.substr(i, 2) == "(?" && p.substr(i, 3) != "(?<") return 0;  // lookaround: left alone
  if (p.substr(i, 3) == "(?<" && p.size() > i + 3 && (p[i + 3] == '=' || p[i + 3] == '!')) return 0;
  if (p.substr(i, 3) == "(?<") {
    const size_t close = p.find('>', i);
    return close == std::string_view::npos ? 0 : close - i + 1;
  }
  return 1;
}

bool has_anchor(std::string_view p) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\') ++i;
    else if (p[i] == '^' || p[i] == '$') return true;
  }
  return false;
}

// Alternatives with anchors inside groups, lifted to the top where the
// group opens or closes its alternative: "(^a$)|(^b$)" is "^a$|^b$",
// "^([^,]|$)" is "^[^,]|^$". Groups without quantifiers only; others are
// left for the parser to refuse.
void lift(std::string_view p, std::vector<std::string>& out, int budget) {
  for (const std::string& branch : top_alternatives(p)) {
    const std::string_view b = branch;
    if (budget <= 0 || out.size() > 64 || !has_anchor(b)) {
      out.push_back(branch);
      continue;
    }
    // A group that opens the alternative, and what follows it.
    if (!b.empty() && b[0] == '(') {
      const size_t n = opener(b, 0), end = group_end(b, 0);
      const bool quantified = end != std::string_view::npos && end + 1 < b.size() && std::string_view("*+?{").find(b[end + 1]) != std::string_view::npos;
      if (n > 0 && end != std::string_view::npos && !quantified && has_anchor(b.substr(n, end - n))) {
        for (const std::string& a : top_alternatives(b.substr(n, end - n))) lift(a + std::string(b.substr(end + 1)), out, budget - 1);
        continue;
      }
    }
    // A group that closes it, and what precedes it.
    if (!b.empty() && b.back() == ')') {
      size_t open = std::string_view::npos;
      for (size_t i = 0; i < b.size(); ++i) {
        if (b[i] == '\\') {
          ++i;
        } else if (b[i] == '[') {
          for (++i; i < b.size() && b[i] != ']'; ++i)
            if (b[i] == '\\') ++i;
        } else if (b[i] == '(') {
          const size_t end = group_end(b, i);
          if (end == std::string_view::npos) break;
          if (end == b.size() - 1) open = i;
          i = end;
        }
      }
      if (open != std::string_view::npos && open > 0) {
        const size_t n = opener(b, open);
        const std::string_view inner = b.substr(open + n, b.size() - 1 - open - n);
        if (n > 0 && has_anchor(inner)) {
          for (const std::string& a : top_alternatives(inner)) lift(std::string(b.substr(0, open)) + a, out, budget - 1);
          continue;
        }
      }
    }
    out.push_back(branch);
  }
}

}  // namespace

std::vector<RegexBranch> parse_regex(std::string_view pattern, const std::string& pointer) {
  std::vector<std::string> lifted;
  lift(pattern, lifted, 8);
  if (lifted.size() == 1 && lifted[0] == pattern) return RegexParser(pattern, pointer).parse();
  std::vector<RegexBranch> out;
  for (const std::string& p : lifted)
    for (RegexBranch& b : RegexParser(p, pointer).parse()) out.push_back(std::move(b));
  return out;
}

// ---- matching ---------------------------------------------------------------------

namespace {

using Positions = std::vector<char>;  // positions[i]: the match may stand at i

Positions ends(const Expr& e, const std::vector<uint32_t>& s, const Positions& from) {
  const size_t n = s.size();
  Positions out(n + 1, 0);
  switch (e.kind) {
    case Expr::Kind::nothing: return out;
    case Expr::Kind::empty: return from;
    case Expr::Kind::text: {
      const std::vector<uint32_t> t = decode_utf8(e.text);
      for (size_t p = 0; p + t.size() <= n; ++p)
        if (from[p] && std::equal(t.begin(), t.end(), s.begin() + static_cast<std::ptrdiff_t>(p))) out[p + t.size()] = 1;
      return out;
    }
    case Expr::Kind::chars:
      for (size_t p = 0; p < n; ++p)
        if (from[p] && e.chars.contains(s[p])) out[p + 1] = 1;
      return out;
    case Expr::Kind::rule: throw std::logic_error("expr_matches: a rule reference");
    case Expr::Kind::seq: {
      Positions cur = from;
      for (const Expr& x : e.items) cur = ends(x, s, cur);
      return cur;
    }
    case Expr::Kind::alt:
      for (const Expr& x : e.items) {
        const Positions p = ends(x, s, from);
        for (size_t i = 0; i <= n; ++i) out[i] |= p[i];
      }
      return out;
    case Expr::Kind::rep: {
      Positions cur = from, seen(n + 1, 0);
      if (e.min == 0) out = from, seen = from;
      for (int64_t k = 1; e.max < 0 || k <= e.max; ++k) {
        cur = ends(e.items[0], s, cur);
        bool fresh = false, any = false;
        for (size_t i = 0; i <= n; ++i) {
          any |= cur[i] != 0;
          if (cur[i] && !seen[i]) fresh = true;
        }
        if (!any) break;
        if (k >= e.min) {
          for (size_t i = 0; i <= n; ++i)
            if (cur[i]) out[i] = 1, seen[i] = 1;
          if (!fresh) break;  // nothing new: later copies reach nothing new either
        }
      }
      return out;
    }
  }
  return out;
}

}  // namespace

bool expr_matches(const Expr& e, const std::vector<uint32_t>& text) {
  Positions start(text.size() + 1, 0);
  start[0] = 1;
  return ends(e, text, start)[text.size()] != 0;
}

bool regex_search(const std::vector<RegexBranch>& regex, const std::vector<uint32_t>& text) {
  for (const RegexBranch& b : regex) {
    Positions start(text.size() + 1, b.anchored_start ? 0 : 1);
    start[0] = 1;
    const Positions end = ends(b.body, text, start);
    if (b.anchored_end ? end[text.size()] != 0 : std::find(end.begin(), end.end(), 1) != end.end()) return true;
  }
  return false;
}

// ---- derivatives ------------------------------------------------------------------

Expr derivative(const Expr& e, char32_t c) {
  switch (e.kind) {
    case Expr::Kind::nothing:
    case Expr::Kind::empty: return nothing();
    case Expr::Kind::text: {
      const std::vector<uint32_t> t = decode_utf8(e.text);
      if (t[0] != c) return nothing();
      std::string rest;
      for (size_t i = 1; i < t.size(); ++i) put_utf8(rest, t[i]);
      return text(std::move(rest));
    }
    case Expr::Kind::chars: return e.chars.contains(c) ? empty() : nothing();
    case Expr::Kind::rule: throw std::logic_error("derivative: a rule reference");
    case Expr::Kind::seq: {
      // The first part's derivative then the rest, or (where the first part
      // may be empty) the rest's.
      std::vector<Expr> alts;
      for (size_t i = 0; i < e.items.size(); ++i) {
        std::vector<Expr> parts{derivative(e.items[i], c)};
        parts.insert(parts.end(), e.items.begin() + static_cast<std::ptrdiff_t>(i) + 1, e.items.end());
        alts.push_back(seq(std::move(parts)));
        if (!nullable(e.items[i])) break;
      }
      return alt(std::move(alts));
    }
    case Expr::Kind::alt: {
      std::vector<Expr> alts;
      for (const Expr& x : e.items) alts.push_back(derivative(x, c));
      return alt(std::move(alts));
    }
    case Expr::Kind::rep: {
      if (e.max == 0) return nothing();
      return seq({derivative(e.items[0], c), rep(e.items[0], std::max(e.min - 1, 0), e.max < 0 ? -1 : e.max - 1)});
    }
  }
  return nothing();
}

namespace {

// The non-empty strings of e whose first character is not in `set`.
Expr first_not_in(const Expr& e, const CharSet& set) {
  switch (e.kind) {
    case Expr::Kind::nothing:
    case Expr::Kind::empty: return nothing();
    case Expr::Kind::text: return set.contains(decode_utf8(e.text)[0]) ? nothing() : e;
    case Expr::Kind::chars: return chars(e.chars - set);
    case Expr::Kind::rule: throw std::logic_error("without: a rule reference");
    case Expr::Kind::seq: {
      std::vector<Expr> alts;
      for (size_t i = 0; i < e.items.size(); ++i) {
        std::vector<Expr> parts{first_not_in(e.items[i], set)};
        parts.insert(parts.end(), e.items.begin() + static_cast<std::ptrdiff_t>(i) + 1, e.items.end());
        alts.push_back(seq(std::move(parts)));
        if (!nullable(e.items[i])) break;
      }
      return alt(std::move(alts));
    }
    case Expr::Kind::alt: {
      std::vector<Expr> alts;
      for (const Expr& x : e.items) alts.push_back(first_not_in(x, set));
      return alt(std::move(alts));
    }
    case Expr::Kind::rep:
      if (e.max == 0) return nothing();
      return seq({first_not_in(e.items[0], set), rep(e.items[0], std::max(e.min - 1, 0), e.max < 0 ? -1 : e.max - 1)});
  }
  return nothing();
}

Expr without_at(const Expr& e, const std::vector<CodePointTrie>& trie, size_t at, int depth) {
  if (e.kind == Expr::Kind::nothing) return e;
  if (depth > 256) throw std::invalid_argument("without: names too long");
  std::vector<Expr> alts;
  if (!trie[at].terminal && nullable(e)) alts.push_back(empty());
  CharSet kids;
  for (const auto& [c, next] : trie[at].next) kids.add(c, c);
  alts.push_back(first_not_in(e, kids));
  for (const auto& [c, next] : trie[at].next) {
    std::string one;
    put_utf8(one, c);
    alts.push_back(seq({text(one), without_at(derivative(e, c), trie, next, depth + 1)}));
  }
  return alt(std::move(alts));
}

}  // namespace

std::vector<CodePointTrie> code_point_trie(const std::vector<std::string>& strings) {
  std::vector<CodePointTrie> trie(1);
  for (const std::string& s : strings) {
    size_t at = 0;
    for (uint32_t c : decode_utf8(s)) {
      auto it = trie[at].next.find(c);
      if (it == trie[at].next.end()) {
        it = trie[at].next.emplace(c, trie.size()).first;
        trie.emplace_back();
      }
      at = it->second;
    }
    trie[at].terminal = true;
  }
  return trie;
}

Expr without(const Expr& e, const std::vector<std::string>& strings) {
  return without_at(e, code_point_trie(strings), 0, 0);
}

namespace {

void collect_reps(const Expr& e, std::vector<std::pair<int32_t, int32_t>>& reps) {
  if (e.kind == Expr::Kind::rep) reps.emplace_back(e.min, e.max);
  for (const Expr& x : e.items) collect_reps(x, reps);
}

// e with the repetitions' upper counts replaced, in pre-order.
Expr with_caps(const Expr& e, const std::vector<int32_t>& caps, size_t& at) {
  switch (e.kind) {
    case Expr::Kind::seq:
    case Expr::Kind::alt: {
      std::vector<Expr> parts;
      for (const Expr& x : e.items) parts.push_back(with_caps(x, caps, at));
      return e.kind == Expr::Kind::seq ? seq(std::move(parts)) : alt(std::move(parts));
    }
    case Expr::Kind::rep: {
      const int32_t cap = caps[at++];
      return rep(with_caps(e.items[0], caps, at), e.min, cap);
    }
    default: return e;
  }
}

}  // namespace

Expr capped(const Expr& e, int64_t max_len) {
  std::vector<std::pair<int32_t, int32_t>> reps;
  collect_reps(e, reps);
  std::vector<int32_t> caps;
  for (const auto& [min, max] : reps) caps.push_back(min);
  auto build = [&] {
    size_t at = 0;
    return with_caps(e, caps, at);
  };
  auto fits = [&] {
    const int64_t hi = length_range(build()).second;
    return hi >= 0 && hi <= max_len;
  };
  if (!fits()) return nothing();
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < caps.size(); ++i) {
      if (reps[i].second >= 0 && caps[i] >= reps[i].second) continue;
      ++caps[i];
      if (fits()) grew = true;
      else --caps[i];
    }
  }
  return build();
}

// ---- rules and printing -------------------------------------------------------

namespace {

std::string sanitize(std::string_view hint) {
  std::string s;
  for (char c : hint) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) s += c;
    else if (!s.empty() && s.back() != '-') s += '-';
    if (s.size() >= 32) break;
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "r" : s;
}

void hex_escape(std::string& out, char32_t c) {
  char buf[12];
  if (c < 0x80) std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(c));
  else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(c));
  else std::snprintf(buf, sizeof buf, "\\U%08X", static_cast<unsigned>(c));
  out += buf;
}

void literal_char(std::string& out, char32_t c) {
  if (c == '"') out += "\\\"";
  else if (c == '\\') out += "\\\\";
  else if (c == '\n') out += "\\n";
  else if (c == '\r') out += "\\r";
  else if (c == '\t') out += "\\t";
  else if (c >= 0x20 && c < 0x7F) out += static_cast<char>(c);
  else hex_escape(out, c);
}

void class_char(std::string& out, char32_t c) {
  const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  if (plain) out += static_cast<char>(c);
  else hex_escape(out, c);
}

class Printer {
 public:
  explicit Printer(const std::vector<std::string>& names) : names_(names) {}

  // ctx 0: a rule body (alternatives bare); 1: a part of a sequence; 2: what
  // a repetition repeats.
  void print(const Expr& e, std::string& out, int ctx) const {
    const bool compound = e.kind == Expr::Kind::seq || e.kind == Expr::Kind::alt || e.kind == Expr::Kind::rep;
    if ((ctx == 2 && compound) || (ctx == 1 && e.kind == Expr::Kind::alt)) {
      out += "(";
      print(e, out, 0);
      out += ")";
      return;
    }
    switch (e.kind) {
      case Expr::Kind::nothing: throw std::logic_error("grammar printer: an expression that matches nothing");
      case Expr::Kind::empty: out += "\"\""; return;
      case Expr::Kind::text: {
        out += '"';
        for (uint32_t c : decode_utf8(e.text)) literal_char(out, c);
        out += '"';
        return;
      }
      case Expr::Kind::chars: {
        if (e.chars.single()) {
          out += '"';
          literal_char(out, e.chars.ranges()[0].lo);
          out += '"';
          return;
        }
        out += '[';
        for (const auto& r : e.chars.ranges()) {
          class_char(out, r.lo);
          if (r.hi > r.lo) {
            if (r.hi > r.lo + 1) out += '-';
            class_char(out, r.hi);
          }
        }
        out += ']';
        return;
      }
      case Expr::Kind::rule: out += names_[static_cast<size_t>(e.rule)]; return;
      case Expr::Kind::seq:
        for (size_t i = 0; i < e.items.size(); ++i) {
          if (i) out += ' ';
          print(e.items[i], out, 1);
        }
        return;
      case Expr::Kind::alt: {
        if (e.items.back().kind == Expr::Kind::empty) {  // alt() keeps the empty one last
          std::vector<Expr> rest(e.items.begin(), e.items.end() - 1);
          print(rep(alt(std::move(rest)), 0, 1), out, ctx);
          return;
        }
        for (size_t i = 0; i < e.items.size(); ++i) {
          if (i) out += " | ";
          print(e.items[i], out, 1);
        }
        return;
      }
      case Expr::Kind::rep:
        print(e.items[0], out, 2);
        if (e.min == 0 && e.max == 1) out += '?';
        else if (e.min == 0 && e.max < 0) out += '*';
        else if (e.min == 1 && e.max < 0) out += '+';
        else if (e.min == e.max) out += "{" + std::to_string(e.min) + "}";
        else if (e.max < 0) out += "{" + std::to_string(e.min) + ",}";
        else out += "{" + std::to_string(e.min) + "," + std::to_string(e.max) + "}";
        return;
    }
  }

 private:
  const std::vector<std::string>& names_;
};

void for_each_rule(const Expr& e, const std::function<void(int32_t)>& f) {
  if (e.kind == Expr::Kind::rule) f(e.rule);
  for (const Expr& x : e.items) for_each_rule(x, f);
}

Expr substitute(const Expr& e, const std::function<Expr(int32_t)>& f) {
  switch (e.kind) {
    case Expr::Kind::rule: return f(e.rule);
    case Expr::Kind::seq:
    case Expr::Kind::alt: {
      std::vector<Expr> parts;
      parts.reserve(e.items.size());
      for (const Expr& x : e.items) parts.push_back(substitute(x, f));
      return e.kind == Expr::Kind::seq ? seq(std::move(parts)) : alt(std::move(parts));
    }
    case Expr::Kind::rep: return rep(substitute(e.items[0], f), e.min, e.max);
    default: return e;
  }
}

bool derives(const Expr& e, const std::vector<char>& yes, bool nullable_mode) {
  switch (e.kind) {
    case Expr::Kind::nothing: return false;
    case Expr::Kind::empty: return true;
    case Expr::Kind::text:
    case Expr::Kind::chars: return !nullable_mode;
    case Expr::Kind::rule: return yes[static_cast<size_t>(e.rule)];
    case Expr::Kind::seq:
      return std::all_of(e.items.begin(), e.items.end(), [&](const Expr& x) { return derives(x, yes, nullable_mode); });
    case Expr::Kind::alt:
      return std::any_of(e.items.begin(), e.items.end(), [&](const Expr& x) { return derives(x, yes, nullable_mode); });
    case Expr::Kind::rep: return e.min == 0 || derives(e.items[0], yes, nullable_mode);
  }
  return false;
}

// Rules that derive some finite text (nullable_mode false) or the empty
// text (true): a fixed point.
std::vector<char> fixed_point(const std::vector<Expr>& bodies, const std::vector<char>& live, bool nullable_mode) {
  std::vector<char> yes(bodies.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < bodies.size(); ++r)
      if (live[r] && !yes[r] && derives(bodies[r], yes, nullable_mode)) yes[r] = 1, changed = true;
  }
  return yes;
}

std::vector<char> reachable(const std::vector<Expr>& bodies, int32_t root) {
  std::vector<char> seen(bodies.size(), 0);
  std::vector<int32_t> todo{root};
  seen[static_cast<size_t>(root)] = 1;
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    for_each_rule(bodies[static_cast<size_t>(r)], [&](int32_t s) {
      if (!seen[static_cast<size_t>(s)]) seen[static_cast<size_t>(s)] = 1, todo.push_back(s);
    });
  }
  return seen;
}

// A rule on a cycle of `edges` among `live` rules, or -1.
int32_t find_cycle(const std::vector<std::vector<int32_t>>& edges, const std::vector<char>& live) {
  std::vector<int> state(edges.size(), 0);  // 0 new, 1 on the path, 2 done
  for (size_t start = 0; start < edges.size(); ++start) {
    if (!live[start] || state[start]) continue;
    std::vector<std::pair<int32_t, size_t>> stack{{static_cast<int32_t>(start), 0}};
    state[start] = 1;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == edges[static_cast<size_t>(r)].size()) {
        state[static_cast<size_t>(r)] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t s = edges[static_cast<size_t>(r)][next++];
      if (state[static_cast<size_t>(s)] == 1) return s;
      if (state[static_cast<size_t>(s)] == 0) state[static_cast<size_t>(s)] = 1, stack.emplace_back(s, 0);
    }
  }
  return -1;
}

void first_rules(const Expr& e, const std::vector<char>& nullable_rules, std::vector<int32_t>& out) {
  switch (e.kind) {
    case Expr::Kind::rule: out.push_back(e.rule); return;
    case Expr::Kind::seq:
      for (const Expr& x : e.items) {
        first_rules(x, nullable_rules, out);
        if (!derives(x, nullable_rules, true)) return;
      }
      return;
    case Expr::Kind::alt:
      for (const Expr& x : e.items) first_rules(x, nullable_rules, out);
      return;
    case Expr::Kind::rep: first_rules(e.items[0], nullable_rules, out); return;
    default: return;
  }
}

bool repeats_past(const Expr& e, int32_t limit) {
  if (e.kind == Expr::Kind::rep && (e.min > limit || e.max > limit)) return true;
  return std::any_of(e.items.begin(), e.items.end(), [&](const Expr& x) { return repeats_past(x, limit); });
}

}  // namespace

int32_t RuleBuilder::reserve(std::string_view name_hint, std::string origin) {
  std::string base = name_hint == "root" && rules_.empty() ? "root" : sanitize(name_hint);
  if (base == "root" && !rules_.empty()) base = "root-r";
  // The next free suffix per base name (probing from 2 each time is
  // quadratic in the rules of one name).
  std::string name = base;
  int& k = next_suffix_[base];
  if (k < 2) k = 2;
  while (names_.count(name)) name = base + "-" + std::to_string(k++);
  const auto id = static_cast<int32_t>(rules_.size());
  names_.emplace(name, id);
  rules_.push_back({std::move(name), std::move(origin), nothing(), false});
  return id;
}

void RuleBuilder::define(int32_t id, Expr body) {
  Rule& r = rules_[static_cast<size_t>(id)];
  r.body = std::move(body);
  r.defined = true;
}

int32_t RuleBuilder::intern(std::string_view name_hint, Expr body) {
  std::string key = expr_key(body);
  if (auto it = interned_.find(key); it != interned_.end()) return it->second;
  const int32_t id = reserve(name_hint);
  define(id, std::move(body));
  interned_.emplace(std::move(key), id);
  return id;
}

std::string RuleBuilder::emit(int32_t root) const {
  std::vector<Expr> bodies(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) bodies[r] = rules_[r].body;
  const std::vector<char> live = reachable(bodies, root);
  for (size_t r = 0; r < rules_.size(); ++r)
    if (live[r] && !rules_[r].defined) throw std::logic_error("grammar builder: rule '" + rules_[r].name + "' never defined");
  drop_unfinishable(bodies, live, root);
  skip_aliases(bodies, live, root);
  const std::vector<char> used = reachable(bodies, root);
  check_left_recursion(bodies, used);
  check_size(bodies, used);
  return print(bodies, used, root);
}

// What can never finish is refused where it recurses and dropped where it is
// only an alternative (a `false` schema, a property that cannot be given):
// a matcher must never enter a branch it cannot leave.
void RuleBuilder::drop_unfinishable(std::vector<Expr>& bodies, const std::vector<char>& live, int32_t root) const {
  const size_t n = bodies.size();
  const std::vector<char> finite = fixed_point(bodies, live, false);
  std::vector<std::vector<int32_t>> endless(n);
  std::vector<char> dead(n, 0);
  for (size_t r = 0; r < n; ++r) {
    if (!live[r] || finite[r]) continue;
    dead[r] = 1;
    for_each_rule(bodies[r], [&](int32_t s) {
      if (!finite[static_cast<size_t>(s)]) endless[r].push_back(s);
    });
  }
  if (const int32_t r = find_cycle(endless, dead); r >= 0)
    throw BuildError{BuildError::Reason::endless_recursion, rules_[static_cast<size_t>(r)].origin,
                     "a recursion with no way to end (every alternative recurses)"};
  if (!finite[static_cast<size_t>(root)])
    throw BuildError{BuildError::Reason::empty_language, rules_[static_cast<size_t>(root)].origin, "no text matches"};
  for (size_t r = 0; r < n; ++r)
    if (live[r]) bodies[r] = substitute(bodies[r], [&](int32_t s) { return finite[static_cast<size_t>(s)] ? ref(s) : nothing(); });
}

// A rule that only names another is skipped (every referenced schema gets a
// rule, and most are one reference).
void RuleBuilder::skip_aliases(std::vector<Expr>& bodies, const std::vector<char>& live, int32_t root) const {
  const size_t n = bodies.size();
  std::vector<int32_t> target(n);
  for (size_t r = 0; r < n; ++r) {
    auto t = static_cast<int32_t>(r);
    for (size_t hops = 0; hops < n && bodies[static_cast<size_t>(t)].kind == Expr::Kind::rule &&
                          bodies[static_cast<size_t>(t)].rule != t;
         ++hops)
      t = bodies[static_cast<size_t>(t)].rule;
    target[r] = t;
  }
  for (size_t r = 0; r < n; ++r)
    if (live[r])
      bodies[r] = substitute(bodies[r], [&](int32_t s) { return ref(s == root ? root : target[static_cast<size_t>(s)]); });
}

// gbnf.cpp refuses left recursion too; here it is named by the schema
// location that made it.
void RuleBuilder::check_left_recursion(const std::vector<Expr>& bodies, const std::vector<char>& used) const {
  const std::vector<char> empties = fixed_point(bodies, used, true);
  std::vector<std::vector<int32_t>> firsts(bodies.size());
  for (size_t r = 0; r < bodies.size(); ++r)
    if (used[r]) first_rules(bodies[r], empties, firsts[r]);
  if (const int32_t r = find_cycle(firsts, used); r >= 0)
    throw BuildError{BuildError::Reason::left_recursion, rules_[static_cast<size_t>(r)].origin,
                     "a reference that reaches itself before any text (left recursion)"};
}

void RuleBuilder::check_size(const std::vector<Expr>& bodies, const std::vector<char>& used) const {
  constexpr int64_t kMaxElements = int64_t{1} << 19;  // half of gbnf.cpp's default, after expansion
  int64_t elements = 0;
  for (size_t r = 0; r < bodies.size(); ++r) {
    if (!used[r]) continue;
    if (repeats_past(bodies[r], kMaxRepeat))
      throw BuildError{BuildError::Reason::too_large, rules_[r].origin, "a repetition count above " + std::to_string(kMaxRepeat)};
    elements += expanded_size(bodies[r]);
  }
  if (elements > kMaxElements)
    throw BuildError{BuildError::Reason::too_large, "",
                     "the grammar would grow past " + std::to_string(kMaxElements) + " elements"};
}

std::string RuleBuilder::print(const std::vector<Expr>& bodies, const std::vector<char>& used, int32_t root) const {
  std::vector<std::string> names(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) names[r] = rules_[r].name;
  const Printer printer(names);
  std::string out;
  auto line = [&](size_t r) {
    out += names[r] + " ::= ";
    printer.print(bodies[r], out, 0);
    out += '\n';
    if (out.size() > max_text_bytes_)
      throw BuildError{BuildError::Reason::too_large, "",
                       "the grammar is longer than " + std::to_string(max_text_bytes_) + " bytes"};
  };
  line(static_cast<size_t>(root));
  for (size_t r = 0; r < bodies.size(); ++r)
    if (used[r] && r != static_cast<size_t>(root)) line(r);
  return out;
}

}  // namespace detail

std::string regex_to_gbnf(std::string_view pattern) {
  std::vector<detail::Expr> alts;
  for (detail::RegexBranch& b : detail::parse_regex(pattern, "")) alts.push_back(std::move(b.body));
  detail::RuleBuilder builder(size_t{4} << 20);
  const int32_t root = builder.reserve("root");
  builder.define(root, detail::alt(std::move(alts)));
  try {
    return builder.emit(root);
  } catch (const detail::BuildError& e) {
    throw SchemaError("pattern", "", e.reason == detail::BuildError::Reason::empty_language ? "the pattern matches no string" : e.why);
  }
}

}  // namespace troupe::grammar
