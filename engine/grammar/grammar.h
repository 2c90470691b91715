#pragma once
// A compiled grammar: GBNF (llama.cpp's grammar format) parsed and lowered to
// bytes. Rules are alternatives of sequences; every terminal is a set of
// bytes, so a character class over code points becomes alternatives of UTF-8
// byte sequences and a token of any tokenizer is matched byte by byte with no
// partial-character state. Repetitions become rules of their own.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::grammar {

// A grammar text that does not parse or cannot be compiled: the message says
// where ("line 3, column 7: ...") and what.
class GrammarError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// One element of a flattened alternative.
struct Element {
  enum class Kind : uint8_t { bytes, rule, end } kind = Kind::end;
  int32_t value = 0;  // bytes: index into Grammar::byte_sets; rule: rule id
};

struct ByteSet {
  uint64_t bits[4] = {0, 0, 0, 0};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet&) const = default;
};

struct Grammar {
  std::vector<Element> elements;            // every alternative, each closed by an `end`
  std::vector<std::vector<int32_t>> rules;  // per rule: where each alternative starts in `elements`
  std::vector<std::string> rule_names;      // for messages
  std::vector<ByteSet> byte_sets;
  int32_t root = 0;
  std::string source;       // the text it was compiled from (caches compare it on a hit)
  std::string source_hash;  // hex of the text's hash: where caches look it up
};

// Limits that keep a hostile grammar from exhausting the server.
struct GrammarLimits {
  size_t max_text_bytes = 1 << 20;    // 1 MiB
  size_t max_elements = 1 << 20;      // after lowering (repetitions expanded)
  int32_t max_repetition = 10000;     // x{m,n}: m and n at most this
};

// Parses and compiles. Refuses undefined rules, a missing root, left
// recursion (which would never end) and anything past `limits`.
std::shared_ptr<const Grammar> compile_gbnf(std::string_view text, const GrammarLimits& limits = {},
                                            std::string_view root = "root");

// Whether `text` is a whole sentence of the grammar (tests, tools).
bool matches(const Grammar& g, std::string_view text);

// The GBNF text with `prefix` before every rule name (definitions and
// references; literals, classes, counts and comments untouched), so two
// grammars can share one text: `root` becomes PREFIXroot.
std::string prefix_rule_names(std::string_view text, std::string_view prefix);

}  // namespace troupe::grammar
