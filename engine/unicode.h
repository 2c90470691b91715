#pragma once
// UTF-8 scanning and GPT-2's byte-level alphabet, the two pieces of Unicode the
// tokenizer needs itself; everything involving character properties is left
// to PCRE2.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace troupe {

inline constexpr uint32_t kReplacementCharacter = 0xFFFD;

void append_utf8(std::string& out, uint32_t codepoint);

// One step of a UTF-8 decoder. `invalid` covers one maximal ill-formed
// subpart (Unicode §3.9, "best practice for U+FFFD substitution"), so a
// decoder that emits one U+FFFD per invalid step agrees with browsers and
// Python's errors="replace".
struct Utf8Step {
  enum class Kind { complete, incomplete, invalid };
  Kind kind = Kind::invalid;
  size_t length = 0;  // bytes consumed (for `incomplete`: bytes present, all valid so far)
  uint32_t codepoint = 0;
};
Utf8Step utf8_step(std::string_view text, size_t pos);

// Copies `text`, each ill-formed subpart (including a truncated final
// sequence) replaced by U+FFFD.
std::string sanitize_utf8(std::string_view text);

// Length of the longest prefix of `text` that is whole characters or
// definitely invalid bytes, i.e. everything except a trailing sequence that
// more bytes could still complete.
size_t utf8_settled_prefix(std::string_view text);

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
// other 68 bytes are moved to U+0100 onwards so every byte has a visible,
// non-space character and a BPE vocabulary can be stored as text.
uint32_t byte_to_codepoint(uint8_t byte);
// The byte a byte-level character stands for; nullopt for any other character.
std::optional<uint8_t> codepoint_to_byte(uint32_t codepoint);

// Raw bytes → byte-level text, and back. byte_level_decode fails (nullopt) on
// text that contains a character outside the byte-level alphabet or is not
// valid UTF-8.
std::string byte_level_encode(std::string_view bytes);
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace troupe
