#pragma once
// Sets of code points as the byte sequences of their UTF-8 encodings, so a
// grammar's character classes can be matched a byte at a time (the splitting
// RE2 and Rust's regex use: a range of code points of one encoded length is
// cut until each byte position ranges independently).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::grammar {

using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive

struct ByteRange {
  uint8_t lo = 0, hi = 0;
};

// Sorted, merged, surrogates (U+D800..U+DFFF, never valid UTF-8) and
// anything past U+10FFFF removed.
CodePointRanges normalize(CodePointRanges ranges);
// Every code point not in `ranges` (normalized).
CodePointRanges complement(const CodePointRanges& ranges);
// The byte-range sequences whose concatenations are exactly the UTF-8
// encodings of [lo, hi] (surrogates skipped).
std::vector<std::vector<ByteRange>> utf8_sequences(uint32_t lo, uint32_t hi);
void append_utf8(std::string& out, uint32_t cp);

// A hash of a grammar's text, as hex: the key of compiled-grammar caches
// (which still compare the text itself on a hit).
std::string text_hash(std::string_view text);

}  // namespace troupe::grammar
