#pragma once
// What the fuzz targets share: the real tokenizers they run (loaded once per
// process), a strict UTF-8 check written apart from engine/unicode so it can
// disagree with the code under test, and a failure that libFuzzer records.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "engine/gguf_file.h"
#include "engine/synthetic_vocabulary.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"

namespace troupe::fuzz {

// A property broke: say which and abort, so libFuzzer keeps the input.
[[noreturn]] inline void fail(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "fuzz property failed: %s %.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// The real default model's vocabulary (tests/fixtures/qwen2-vocab.gguf).
inline Vocabulary qwen2_vocabulary() {
  return load_vocabulary(GgufFile::open(TROUPE_SOURCE_DIR "/tests/fixtures/qwen2-vocab.gguf"));
}

// The synthetic models' vocabulary (ChatML control tokens included), as the
// service's unit tests build it: small, so per-input work stays cheap.
inline std::shared_ptr<const Tokenizer> synthetic_tokenizer() {
  static const auto tok = [] {
    return std::make_shared<const Tokenizer>(synthetic_vocabulary(train_synthetic_vocabulary(256, 0)));
  }();
  return tok;
}

// RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      n = 1, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      n = 2, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      n = 3, cp = b & 0x07, min = 0x10000;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace troupe::fuzz
