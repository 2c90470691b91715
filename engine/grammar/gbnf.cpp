// GBNF text → Grammar (grammar.h). The parser follows llama.cpp's format;
// lowering turns code points into UTF-8 byte sequences and repetitions into
// rules, then the checks refuse what a matcher could not run to an end.
#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "engine/grammar/gbnf_names.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/utf8_ranges.h"

namespace troupe::grammar {
namespace {

using Alternative = std::vector<Element>;

class Parser {
 public:
  Parser(std::string_view text, const GrammarLimits& limits) : s_(text), limits_(limits) {}

  Grammar parse(std::string_view root) {
    skip_space(true);
    while (at_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    auto r = ids_.find(std::string(root));
    if (r == ids_.end() || !defined_[static_cast<size_t>(r->second)])
      fail("the grammar has no rule '" + std::string(root) + "' to start from");
    for (size_t i = 0; i < defined_.size(); ++i)
      if (!defined_[i]) fail_at(first_use_[i], "rule '" + names_[i] + "' is used but never defined");
    return lower(r->second);
  }

 private:
  // ---- errors -------------------------------------------------------------
  [[noreturn]] void fail_at(size_t pos, const std::string& why) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < s_.size(); ++i) {
      if (s_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    throw GrammarError("line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + why);
  }
  [[noreturn]] void fail(const std::string& why) const { fail_at(at_, why); }

  // ---- lexing -------------------------------------------------------------
  bool done() const { return at_ >= s_.size(); }
  char peek(size_t k = 0) const { return at_ + k < s_.size() ? s_[at_ + k] : '\0'; }

  // Newlines end a rule except inside parentheses (as in llama.cpp).
  void skip_space(bool newlines) {
    while (!done()) {
      const char c = peek();
      if (c == '#') {
        while (!done() && peek() != '\n') ++at_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++at_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) { return gbnf_name_char(c); }

  std::string parse_name() {
    const size_t start = at_;
    while (!done() && name_char(peek())) ++at_;
    if (at_ == start) fail("expected a rule name");
    return std::string(s_.substr(start, at_ - start));
  }

  int32_t rule_id(const std::string& name, size_t used_at) {
    auto [it, fresh] = ids_.emplace(name, static_cast<int32_t>(names_.size()));
    if (fresh) {
      names_.push_back(name);
      defined_.push_back(false);
      first_use_.push_back(used_at);
      bodies_.emplace_back();
    }
    return it->second;
  }

  // Named after the rule it serves, with a ':' no user's rule name has.
  int32_t synthetic_rule(const std::string& base) {
    const std::string name = current_ + ":" + base + "-" + std::to_string(names_.size());
    const int32_t id = rule_id(name, at_);
    defined_[static_cast<size_t>(id)] = true;
    return id;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail("expected " + std::to_string(digits) + " hexadecimal digits");
      v = v * 16 + static_cast<uint32_t>(d);
      ++at_;
    }
    return v;
  }

  // One code point of a literal or class, escapes decoded.
  uint32_t parse_char() {
    if (done()) fail("unexpected end of the grammar");
    if (peek() == '\\') return parse_escape();
    return parse_utf8_char();
  }

  // The character a backslash escape stands for.
  uint32_t parse_escape() {
    ++at_;  // the backslash
    const char e = peek();
    ++at_;
    if (e == 'x') return parse_hex(2);
    if (e == 'u') return parse_hex(4);
    if (e == 'U') return parse_hex(8);
    // Escapes of one character, and what each stands for.
    constexpr std::string_view kEscaped = "ntr\\\"'[]-^/", kMeant = "\n\t\r\\\"'[]-^/";
    if (const size_t i = kEscaped.find(e); i != std::string_view::npos) return static_cast<unsigned char>(kMeant[i]);
    --at_, fail(std::string("unknown escape '\\") + e + "'");
  }

  // UTF-8 in the grammar text itself.
  uint32_t parse_utf8_char() {
    const auto c = static_cast<unsigned char>(peek());
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || at_ + static_cast<size_t>(len) > s_.size()) fail("the grammar is not valid UTF-8");
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<unsigned char>(s_[at_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) fail("the grammar is not valid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    at_ += static_cast<size_t>(len);
    return cp;
  }

  // ---- building -----------------------------------------------------------
  int32_t byte_set(const ByteSet& set) {
    for (size_t i = 0; i < sets_.size(); ++i)
      if (sets_[i] == set) return static_cast<int32_t>(i);
    sets_.push_back(set);
    return static_cast<int32_t>(sets_.size() - 1);
  }
  Element bytes_element(const ByteSet& set) { return {Element::Kind::bytes, byte_set(set)}; }
  static Element rule_element(int32_t id) { return {Element::Kind::rule, id}; }

  void count(size_t n) {
    elements_ += n;
    if (elements_ > limits_.max_elements)
      fail("the grammar grows past " + std::to_string(limits_.max_elements) + " elements once its repetitions are expanded");
  }

  // A set of code points as one element: a byte set when it is ASCII only,
  // else a rule whose alternatives are the UTF-8 byte sequences.
  std::vector<Element> code_points(const CodePointRanges& ranges) {
    if (ranges.empty()) fail("a character class that matches no character");
    ByteSet ascii;
    bool only_ascii = true;
    std::vector<std::vector<ByteRange>> sequences;
    for (const auto& [lo, hi] : ranges) {
      for (const std::vector<ByteRange>& seq : utf8_sequences(lo, hi)) {
        if (seq.size() == 1) ascii.add_range(seq[0].lo, seq[0].hi);
        else only_ascii = false, sequences.push_back(seq);
      }
    }
    if (only_ascii) return {bytes_element(ascii)};
    const int32_t id = synthetic_rule("char");
    auto& body = bodies_[static_cast<size_t>(id)];
    if (ascii != ByteSet{}) body.push_back({bytes_element(ascii)});
    for (const auto& seq : sequences) {
      Alternative alt;
      for (const ByteRange& r : seq) {
        ByteSet b;
        b.add_range(r.lo, r.hi);
        alt.push_back(bytes_element(b));
      }
      count(alt.size() + 1);
      body.push_back(std::move(alt));
    }
    return {rule_element(id)};
  }

  std::vector<Element> parse_literal() {
    ++at_;  // the quote
    std::vector<Element> out;
    while (peek() != '"') {
      if (done() || peek() == '\n') fail("a string literal is not closed");
      std::string utf8;
      append_utf8(utf8, parse_char());
      for (char c : utf8) {
        ByteSet b;
        b.add(static_cast<uint8_t>(c));
        out.push_back(bytes_element(b));
      }
    }
    ++at_;
    count(out.size());
    return out;
  }

  std::vector<Element> parse_class() {
    ++at_;  // [
    const bool negated = peek() == '^';
    if (negated) ++at_;
    CodePointRanges ranges;
    while (peek() != ']') {
      if (done()) fail("a character class is not closed");
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
        ++at_;
        hi = parse_char();
        if (hi < lo) fail("a character range runs backwards");
      }
      ranges.emplace_back(lo, hi);
    }
    ++at_;
    ranges = normalize(std::move(ranges));
    return code_points(negated ? complement(ranges) : ranges);
  }

  // x{min,max}; max < 0: unbounded.
  std::vector<Element> repeat(const std::vector<Element>& item, int64_t min, int64_t max) {
    if (min > limits_.max_repetition || max > limits_.max_repetition)
      fail("a repetition count above " + std::to_string(limits_.max_repetition));
    if (item.empty()) return item;  // nothing, repeated, is nothing
    // One element stands for the item (a rule when it is several).
    Element unit = item.size() == 1 ? item[0] : Element{};
    if (item.size() != 1) {
      const int32_t id = synthetic_rule("group");
      bodies_[static_cast<size_t>(id)].push_back(item);
      unit = rule_element(id);
    }
    std::vector<Element> out(static_cast<size_t>(min), unit);
    count(out.size());
    if (max < 0) {  // star ::= unit star | ε
      const int32_t star = synthetic_rule("star");
      bodies_[static_cast<size_t>(star)] = {{unit, rule_element(star)}, {}};
      count(3);
      out.push_back(rule_element(star));
      return out;
    }
    // Optional copies nest: opt_k ::= unit opt_{k-1} | ε.
    int32_t inner = -1;
    for (int64_t k = 0; k < max - min; ++k) {
      const int32_t opt = synthetic_rule("opt");
      Alternative alt{unit};
      if (inner >= 0) alt.push_back(rule_element(inner));
      bodies_[static_cast<size_t>(opt)] = {std::move(alt), {}};
      count(4);
      inner = opt;
    }
    if (inner >= 0) out.push_back(rule_element(inner));
    return out;
  }

  int64_t parse_count() {
    const size_t start = at_;
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > limits_.max_repetition) fail("a repetition count above " + std::to_string(limits_.max_repetition));
      ++at_;
    }
    if (at_ == start) fail("expected a repetition count");
    return v;
  }

  std::vector<Element> parse_postfix(std::vector<Element> item) {
    // Stacked *, + and ? fold into one (x++ is x+, x+? and x?+ are x*, ...):
    // the same language, and nested repetitions of one item would make the
    // automaton's parse stacks grow exponentially in their depth.
    const std::vector<Element> base = item;
    int64_t lo = -1, hi = 0;  // the folded repetition of `base` (lo < 0: none yet); hi < 0: unbounded
    auto fold = [&](int64_t next_lo, int64_t next_hi) {
      if (lo < 0) {
        lo = next_lo, hi = next_hi;
      } else if (!(hi == 1 && next_hi == 1)) {  // (x?)? stays x?; any other pair repeats without bound
        lo = lo == 1 && next_lo == 1 ? 1 : 0;
        hi = -1;
      }
      item = repeat(base, lo, hi);
    };
    for (;;) {
      skip_space(nesting_ > 0);
      const char c = peek();
      if (c == '*') ++at_, fold(0, -1);
      else if (c == '+') ++at_, fold(1, -1);
      else if (c == '?') ++at_, fold(0, 1);
      else if (c == '{') {
        ++at_;
        skip_space(true);
        const int64_t min = parse_count();
        int64_t max = min;
        skip_space(true);
        if (peek() == ',') {
          ++at_;
          skip_space(true);
          max = peek() == '}' ? -1 : parse_count();
          skip_space(true);
        }
        if (peek() != '}') fail("expected '}' to close a repetition");
        ++at_;
        if (max >= 0 && max < min) fail("a repetition whose maximum is below its minimum");
        return parse_postfix(repeat(item, min, max));
      } else {
        return item;
      }
    }
  }

  std::vector<Element> parse_item() {
    const char c = peek();
    if (c == '"') return parse_literal();
    if (c == '[') return parse_class();
    if (c == '.') {
      ++at_;
      return code_points({{0, 0x10FFFF}});
    }
    if (c == '(') {
      ++at_;
      ++nesting_;
      const int32_t id = synthetic_rule("group");
      std::vector<Alternative> alts = parse_alternatives();
      bodies_[static_cast<size_t>(id)] = std::move(alts);
      if (peek() != ')') fail("expected ')'");
      ++at_;
      --nesting_;
      return {rule_element(id)};
    }
    if (name_char(c)) {
      const size_t pos = at_;
      const std::string name = parse_name();
      return {rule_element(rule_id(name, pos))};
    }
    fail(std::string("unexpected '") + c + "'");
  }

  // Whether a new rule (`name ::=`) starts here.
  bool rule_starts() const {
    size_t i = at_;
    while (i < s_.size() && name_char(s_[i])) ++i;
    if (i == at_) return false;
    while (i < s_.size() && (s_[i] == ' ' || s_[i] == '\t')) ++i;
    return s_.substr(i, 3) == "::=";
  }

  Alternative parse_sequence() {
    Alternative seq;
    for (;;) {
      skip_space(nesting_ > 0);
      const char c = peek();
      if (done() || c == '|' || c == ')' || c == '\n') return seq;
      if (nesting_ == 0 && rule_starts()) return seq;
      for (const Element& e : parse_postfix(parse_item())) seq.push_back(e);
    }
  }

  std::vector<Alternative> parse_alternatives() {
    std::vector<Alternative> alts;
    alts.push_back(parse_sequence());
    for (;;) {
      // At the top level an alternative may continue on the next line with '|'.
      const size_t save = at_;
      skip_space(true);
      if (peek() == '|') {
        ++at_;
        alts.push_back(parse_sequence());
        continue;
      }
      if (nesting_ == 0) at_ = save;  // the newline ends the rule
      return alts;
    }
  }

  void parse_rule() {
    const size_t pos = at_;
    const std::string name = parse_name();
    skip_space(false);
    if (s_.substr(at_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
    at_ += 3;
    skip_space(true);
    const int32_t id = rule_id(name, pos);
    if (defined_[static_cast<size_t>(id)]) fail_at(pos, "rule '" + name + "' is defined twice");
    current_ = name;
    defined_[static_cast<size_t>(id)] = true;
    bodies_[static_cast<size_t>(id)] = parse_alternatives();
    skip_space(false);
    if (!done() && peek() != '\n' && !rule_starts()) fail(std::string("unexpected '") + peek() + "'");
  }

  // ---- checks and lowering ------------------------------------------------
  std::vector<bool> reachable(int32_t root) const {
    std::vector<bool> seen(bodies_.size(), false);
    std::vector<int32_t> todo{root};
    seen[static_cast<size_t>(root)] = true;
    while (!todo.empty()) {
      const int32_t r = todo.back();
      todo.pop_back();
      for (const Alternative& alt : bodies_[static_cast<size_t>(r)])
        for (const Element& e : alt)
          if (e.kind == Element::Kind::rule && !seen[static_cast<size_t>(e.value)])
            seen[static_cast<size_t>(e.value)] = true, todo.push_back(e.value);
    }
    return seen;
  }

  // Rules that can derive the empty string, and rules that can derive some
  // finite string at all (a fixed point each).
  std::vector<bool> fixed_point(bool nullable) const {
    std::vector<bool> yes(bodies_.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < bodies_.size(); ++r) {
        if (yes[r]) continue;
        for (const Alternative& alt : bodies_[r]) {
          const bool all = std::all_of(alt.begin(), alt.end(), [&](const Element& e) {
            return e.kind == Element::Kind::rule ? static_cast<bool>(yes[static_cast<size_t>(e.value)]) : !nullable;
          });
          if (all) {
            yes[r] = true, changed = true;
            break;
          }
        }
      }
    }
    return yes;
  }

  // A rule that reaches itself before reading anything loops for ever when
  // the reference pushes a continuation. A reference that ends its
  // alternative is a tail call (the matcher pushes nothing), so a cycle of
  // tail references only, such as ("a"?)*, is harmless; a cycle with any
  // other reference is left recursion. Cycles are the strongly connected
  // components of the "can start with" graph (Tarjan's, iterative: a chain
  // of a million rules must not overflow the stack).
  void check_left_recursion(const std::vector<bool>& live) const {
    const std::vector<bool> nullable = fixed_point(true);
    struct Edge {
      int32_t to;
      bool tail;
    };
    const size_t n = bodies_.size();
    std::vector<std::vector<Edge>> first(n);
    for (size_t r = 0; r < n; ++r)
      for (const Alternative& alt : bodies_[r])
        for (size_t k = 0; k < alt.size(); ++k) {
          const Element& e = alt[k];
          if (e.kind != Element::Kind::rule) break;
          first[r].push_back({e.value, k + 1 == alt.size()});
          if (!nullable[static_cast<size_t>(e.value)]) break;
        }
    std::vector<int32_t> index(n, -1), low(n, 0), component(n, -1), stack;
    std::vector<bool> on_stack(n, false);
    int32_t next_index = 0, components = 0;
    struct Frame {
      int32_t rule;
      size_t edge;
    };
    for (size_t root = 0; root < n; ++root) {
      if (!live[root] || index[root] >= 0) continue;
      std::vector<Frame> frames{{static_cast<int32_t>(root), 0}};
      index[root] = low[root] = next_index++;
      stack.push_back(static_cast<int32_t>(root)), on_stack[root] = true;
      while (!frames.empty()) {
        Frame& f = frames.back();
        const auto r = static_cast<size_t>(f.rule);
        if (f.edge < first[r].size()) {
          const auto to = static_cast<size_t>(first[r][f.edge++].to);
          if (index[to] < 0) {
            index[to] = low[to] = next_index++;
            stack.push_back(static_cast<int32_t>(to)), on_stack[to] = true;
            frames.push_back({static_cast<int32_t>(to), 0});
          } else if (on_stack[to]) {
            low[r] = std::min(low[r], index[to]);
          }
          continue;
        }
        if (low[r] == index[r]) {
          for (int32_t m = -1; m != f.rule;) {
            m = stack.back();
            stack.pop_back();
            on_stack[static_cast<size_t>(m)] = false;
            component[static_cast<size_t>(m)] = components;
          }
          ++components;
        }
        const int32_t done = f.rule;
        frames.pop_back();
        if (!frames.empty()) {
          const auto up = static_cast<size_t>(frames.back().rule);
          low[up] = std::min(low[up], low[static_cast<size_t>(done)]);
        }
      }
    }
    for (size_t r = 0; r < n; ++r)
      for (const Edge& e : first[r])
        if (!e.tail && component[r] >= 0 && component[r] == component[static_cast<size_t>(e.to)])
          throw GrammarError("rule '" + names_[r] +
                             "' is left-recursive (it can reach itself before reading anything); write it with "
                             "repetition or right recursion");
  }

  Grammar lower(int32_t root) {
    const std::vector<bool> live = reachable(root);
    const std::vector<bool> finite = fixed_point(false);
    for (size_t r = 0; r < bodies_.size(); ++r)
      if (live[r] && !finite[r])
        throw GrammarError("rule '" + names_[r] + "' can never end (every alternative recurses without a way out)");
    check_left_recursion(live);
    Grammar g;
    g.rule_names = names_;
    g.byte_sets = sets_;
    g.root = root;
    g.rules.resize(bodies_.size());
    for (size_t r = 0; r < bodies_.size(); ++r) {
      for (const Alternative& alt : bodies_[r]) {
        g.rules[r].push_back(static_cast<int32_t>(g.elements.size()));
        g.elements.insert(g.elements.end(), alt.begin(), alt.end());
        g.elements.push_back({Element::Kind::end, 0});
      }
    }
    return g;
  }

  std::string_view s_;
  const GrammarLimits& limits_;
  size_t at_ = 0;
  int nesting_ = 0;
  std::string current_;  // the rule being parsed
  size_t elements_ = 0;
  std::map<std::string, int32_t> ids_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::vector<std::vector<Alternative>> bodies_;
  std::vector<ByteSet> sets_;
};

}  // namespace

std::shared_ptr<const Grammar> compile_gbnf(std::string_view text, const GrammarLimits& limits, std::string_view root) {
  if (text.size() > limits.max_text_bytes)
    throw GrammarError("the grammar is " + std::to_string(text.size()) + " bytes; the limit is " +
                       std::to_string(limits.max_text_bytes));
  auto g = std::make_shared<Grammar>(Parser(text, limits).parse(root));
  g->source = std::string(text);
  g->source_hash = text_hash(text);
  return g;
}

}  // namespace troupe::grammar
