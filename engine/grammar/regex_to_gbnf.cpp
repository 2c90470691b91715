// The regex dialect (regex_to_gbnf.h) parsed into the grammar IR, and a
// whole pattern printed as GBNF.
#include "engine/grammar/regex_to_gbnf.h"

#include <cctype>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex_anchors.h"

namespace troupe::grammar {
namespace detail {

namespace {

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
      if (v >= CharSet::kSurrogateLo && v <= CharSet::kSurrogateHi) fail("a lone surrogate escape matches no text");
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
    if (v >= CharSet::kSurrogateLo && v <= CharSet::kSurrogateHi) fail("a lone surrogate escape matches no text");
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

std::vector<RegexBranch> parse_regex(std::string_view pattern, const std::string& pointer) {
  const std::vector<std::string> lifted = lift_anchors(pattern);
  if (lifted.size() == 1 && lifted[0] == pattern) return RegexParser(pattern, pointer).parse();
  std::vector<RegexBranch> out;
  for (const std::string& p : lifted)
    for (RegexBranch& b : RegexParser(p, pointer).parse()) out.push_back(std::move(b));
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
