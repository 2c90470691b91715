#include "engine/unicode.h"

#include <array>

namespace troupe {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacementCharacter;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

Utf8Step utf8_step(std::string_view text, size_t pos) {
  using Kind = Utf8Step::Kind;
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return {Kind::complete, 1, lead};

  size_t need = 0;
  uint32_t cp = 0;
  // The second byte's range is narrower than 80..BF after some leads; this
  // rejects overlong forms, surrogates and values above U+10FFFF as early as
  // possible, which is what makes each invalid step a maximal subpart.
  uint8_t lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1, cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2, cp = lead & 0x0F;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3, cp = lead & 0x07;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return {Kind::invalid, 1, 0};
  }
  size_t i = 1;
  for (; i <= need; ++i) {
    if (pos + i >= text.size()) return {Kind::incomplete, i, 0};
    const uint8_t b = byte(pos + i);
    const uint8_t min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xBF;
    if (b < min || b > max) return {Kind::invalid, i, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Kind::complete, i, cp};
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Step step = utf8_step(text, pos);
    if (step.kind == Utf8Step::Kind::complete) {
      out.append(text.substr(pos, step.length));
    } else {
      append_utf8(out, kReplacementCharacter);
    }
    pos += step.length;
  }
  return out;
}

size_t utf8_settled_prefix(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Step step = utf8_step(text, pos);
    if (step.kind == Utf8Step::Kind::incomplete) break;
    pos += step.length;
  }
  return pos;
}

namespace {

struct ByteLevelTables {
  std::array<uint32_t, 256> to_codepoint{};
  std::array<int16_t, 324> to_byte{};  // every mapped codepoint is below 256 + 68

  ByteLevelTables() {
    to_byte.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_codepoint[b] = printable ? b : next_extra++;
      to_byte[to_codepoint[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables instance;
  return instance;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) { return tables().to_codepoint[byte]; }

std::optional<uint8_t> codepoint_to_byte(uint32_t codepoint) {
  const auto& t = tables();
  if (codepoint >= t.to_byte.size() || t.to_byte[codepoint] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.to_byte[codepoint]);
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) append_utf8(out, byte_to_codepoint(static_cast<uint8_t>(c)));
  return out;
}

std::optional<std::string> byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Step step = utf8_step(text, pos);
    if (step.kind != Utf8Step::Kind::complete) return std::nullopt;
    const auto byte = codepoint_to_byte(step.codepoint);
    if (!byte) return std::nullopt;
    out.push_back(static_cast<char>(*byte));
    pos += step.length;
  }
  return out;
}

}  // namespace troupe
