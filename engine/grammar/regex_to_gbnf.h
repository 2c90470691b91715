#pragma once
// Regular expressions as GBNF, and the small grammar IR the JSON Schema
// converter (json_schema.h) builds its grammars in.
//
// The regex dialect is the subset of ECMA-262 (Unicode mode: code points,
// not UTF-16 units) that a grammar can hold exactly: literals, escapes, `.`,
// classes (\d \w \s and their negations), groups, alternation and
// quantifiers (a lazy one matches the same strings as a greedy one),
// anchors at the ends (also inside groups that open or close an
// alternative: "(^a|b$)"). Lookaround, backreferences, word boundaries and
// property escapes are refused (SchemaError "pattern"): a pattern is
// enforced exactly or not at all.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::grammar {

// A whole GBNF grammar whose `root` matches exactly the strings the regex
// matches as a whole (anchored at both ends, whether or not it says ^ and $).
// Throws SchemaError (keyword "pattern") for what it cannot express.
std::string regex_to_gbnf(std::string_view pattern);

namespace detail {

inline constexpr int32_t kMaxRepeat = 10000;  // gbnf.cpp's own cap on x{m,n}

// A set of Unicode scalar values (surrogates never belong), as sorted,
// disjoint, non-adjacent inclusive ranges.
class CharSet {
 public:
  struct Range {
    char32_t lo, hi;
    auto operator<=>(const Range&) const = default;
  };
  static constexpr char32_t kMax = 0x10FFFF;
  static constexpr char32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

  CharSet() = default;
  CharSet(char32_t lo, char32_t hi) { add(lo, hi); }
  static CharSet any() { return CharSet(0, kMax); }

  CharSet& add(char32_t lo, char32_t hi);
  CharSet& add(const CharSet& other);
  CharSet complement() const;
  CharSet operator&(const CharSet& other) const;
  CharSet operator-(const CharSet& other) const { return *this & other.complement(); }
  bool empty() const { return r_.empty(); }
  bool contains(char32_t c) const;
  bool single() const { return r_.size() == 1 && r_[0].lo == r_[0].hi; }
  const std::vector<Range>& ranges() const { return r_; }
  auto operator<=>(const CharSet&) const = default;

 private:
  std::vector<Range> r_;
};

// A grammar expression. Terminals are UTF-8 text and sets of code points;
// `rule` refers to a rule of a RuleBuilder by id.
struct Expr {
  enum class Kind : uint8_t { nothing, empty, text, chars, rule, seq, alt, rep };
  Kind kind = Kind::empty;
  std::string text;           // text
  CharSet chars;              // chars
  int32_t rule = -1;          // rule
  int32_t min = 0, max = -1;  // rep; max -1: unbounded
  std::vector<Expr> items;    // seq, alt: the parts; rep: the one repeated
};

// Constructors that keep expressions small: `nothing` (the empty language)
// absorbs sequences and drops out of alternatives, nested sequences and
// alternatives flatten, one-part ones collapse.
Expr nothing();
Expr empty();
Expr text(std::string utf8);
Expr chars(CharSet set);
Expr ref(int32_t rule);
Expr seq(std::vector<Expr> parts);
Expr alt(std::vector<Expr> parts);
Expr rep(Expr e, int32_t min, int32_t max);
inline Expr opt(Expr e) { return rep(std::move(e), 0, 1); }
inline Expr star(Expr e) { return rep(std::move(e), 0, -1); }

// Whether `e` matches the empty string; rules count as not (callers that
// repeat rules know theirs never do).
bool nullable(const Expr& e);
// The length range of `e` in code points (max -1: unbounded); rules count as
// one code point each.
std::pair<int64_t, int64_t> length_range(const Expr& e);
// A rough count of the grammar elements `e` becomes once repetitions are
// expanded (saturating), for the limits.
int64_t expanded_size(const Expr& e);

std::vector<uint32_t> decode_utf8(std::string_view s);  // throws std::invalid_argument
void put_utf8(std::string& out, char32_t c);

// One top-level alternative of a parsed regex: whether it starts with ^ and
// ends with $, and what lies between, over code points.
struct RegexBranch {
  bool anchored_start = false, anchored_end = false;
  Expr body;
};
// Throws SchemaError("pattern", pointer, why) for what is refused.
std::vector<RegexBranch> parse_regex(std::string_view pattern, const std::string& pointer);

// Whether `e` (no rule references) matches all of `text` (code points).
bool expr_matches(const Expr& e, const std::vector<uint32_t>& text);
// Whether the parsed regex matches `text` as JSON Schema's `pattern` does:
// anywhere in it, unless anchored.
bool regex_search(const std::vector<RegexBranch>& regex, const std::vector<uint32_t>& text);

// Languages over code points (expressions without rule references):
// the strings s with c·s in e (Brzozowski's derivative);
Expr derivative(const Expr& e, char32_t c);
// the strings of e other than the listed;
Expr without(const Expr& e, const std::vector<std::string>& strings);

// Strings as a trie over code points; node 0 is the root.
struct CodePointTrie {
  std::map<char32_t, size_t> next;
  bool terminal = false;  // a string ends here
};
std::vector<CodePointTrie> code_point_trie(const std::vector<std::string>& strings);
// A subset of e whose strings are at most max_len code points long: each
// repetition's upper count lowered (from its lower count up, one at a
// time, in turn), as high as the bound allows; nothing() if none is.
Expr capped(const Expr& e, int64_t max_len);

// Why a grammar cannot be emitted; `origin` is the pointer its rule was
// reserved with.
struct BuildError {
  enum class Reason : uint8_t { empty_language, endless_recursion, left_recursion, too_large } reason;
  std::string origin;
  std::string why;
};

// Rules under construction, printed as GBNF once the root is known. Printing
// drops what can never finish (rules that derive no finite text, and the
// alternatives that use them) and refuses what a matcher could not run.
class RuleBuilder {
 public:
  explicit RuleBuilder(size_t max_text_bytes) : max_text_bytes_(max_text_bytes) {}
  int32_t reserve(std::string_view name_hint, std::string origin = {});
  void define(int32_t id, Expr body);
  // The rule with this body, made on first use; `name_hint` names it then.
  int32_t intern(std::string_view name_hint, Expr body);
  size_t size() const { return rules_.size(); }
  // Throws BuildError.
  std::string emit(int32_t root) const;

 private:
  struct Rule {
    std::string name, origin;
    Expr body;
    bool defined = false;
  };
  void drop_unfinishable(std::vector<Expr>& bodies, const std::vector<char>& live, int32_t root) const;
  void skip_aliases(std::vector<Expr>& bodies, const std::vector<char>& live, int32_t root) const;
  void check_left_recursion(const std::vector<Expr>& bodies, const std::vector<char>& used) const;
  void check_size(const std::vector<Expr>& bodies, const std::vector<char>& used) const;
  std::string print(const std::vector<Expr>& bodies, const std::vector<char>& used, int32_t root) const;

  std::vector<Rule> rules_;
  std::map<std::string, int32_t> names_;
  std::map<std::string, int32_t> interned_;
  std::map<std::string, int> next_suffix_;
  size_t max_text_bytes_;
};

// The key intern() dedupes by; also a stable printing of `e` for tests.
std::string expr_key(const Expr& e);

}  // namespace detail
}  // namespace troupe::grammar
