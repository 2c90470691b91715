// Arbitrary bytes through the tokenizers a server runs: the real default
// model's byte-level BPE under each pre-tokenizer it can name, and a small
// SentencePiece vocabulary with byte fallback. The first byte picks the
// tokenizer and the flags, the rest is the text.
//
// Properties: byte-level BPE gives the bytes back exactly (decode(encode(x))
// == x, special tokens rendering as their text); every id encode returns is in
// the vocabulary; and a StreamDecoder fed any ids in range emits only valid
// UTF-8 whose concatenation is the sanitized decode.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.h"
#include "engine/unicode.h"
#include "tests/fuzz/fuzz_support.h"

using namespace troupe;

namespace {

Vocabulary sentencepiece_vocabulary() {
  Vocabulary v;
  v.model = TokenizerModel::llama;
  const auto add = [&](std::string text, float score, TokenType type = TokenType::normal) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  add("<unk>", 0, TokenType::unknown);
  add("<s>", 0, TokenType::control);
  add("</s>", 0, TokenType::control);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 0, TokenType::byte);
  }
  const std::string sp = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  add(sp, -5);
  for (const char* piece : {"h", "e", "l", "o", "w", "r", "d", "he", "ll", "hell", "\xE4\xBD\xA0"}) add(piece, -3);
  for (const char* piece : {"h", "he", "hello", "wor", "world"}) add(sp + piece, -1);
  add("<|user|>", 0, TokenType::user_defined);
  v.unk_id = 0, v.bos_id = 1, v.eos_id = 2, v.add_bos = true;
  return v;
}

Vocabulary with_pre(Vocabulary v, const char* pre) {
  v.pre = pre;
  return v;
}

struct Tokenizers {
  Vocabulary real = fuzz::qwen2_vocabulary();
  Tokenizer qwen2{real};
  Tokenizer llama3{with_pre(real, "llama-bpe")};
  Tokenizer gpt2{with_pre(real, "gpt-2")};
  Tokenizer sentencepiece{sentencepiece_vocabulary()};
  const Tokenizer& pick(uint8_t b) const {
    switch (b % 4) {
      case 0: return qwen2;
      case 1: return llama3;
      case 2: return gpt2;
      default: return sentencepiece;
    }
  }
};

const Tokenizers& tokenizers() {
  static const Tokenizers t;
  return t;
}

// Ids in range taken from the text's bytes, two at a time, so the stream
// decoder sees tokens that split characters in every way.
std::vector<int32_t> ids_from(std::string_view text, size_t vocab) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < text.size(); i += 2)
    ids.push_back(static_cast<int32_t>((static_cast<uint8_t>(text[i]) << 8 | static_cast<uint8_t>(text[i + 1])) % vocab));
  return ids;
}

void check_stream_decoder(const Tokenizer& tok, std::span<const int32_t> ids) {
  StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.push(id);
    if (!fuzz::valid_utf8(piece)) fuzz::fail("StreamDecoder::push emitted invalid UTF-8");
    streamed += piece;
  }
  const std::string rest = stream.finish();
  if (!fuzz::valid_utf8(rest)) fuzz::fail("StreamDecoder::finish emitted invalid UTF-8");
  streamed += rest;
  if (streamed != sanitize_utf8(tok.decode(ids))) fuzz::fail("the streamed text is not the sanitized decode");
}

}  // namespace

// Loading happens before the first input, so it is not timed as one.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Tokenizers& all = tokenizers();
  const Tokenizer& tok = all.pick(flags);
  const bool byte_level = &tok != &all.sentencepiece;
  const bool parse_special = flags & 0x10;
  const bool add_bos = (flags & 0x20) && tok.bos() != kNoToken;

  const std::vector<int32_t> ids = tok.encode(text, add_bos, parse_special);
  for (int32_t id : ids)
    if (id < 0 || static_cast<size_t>(id) >= tok.size()) fuzz::fail("encode returned an id outside the vocabulary");
  const std::string back = tok.decode(ids);
  if (byte_level && !add_bos && back != text) fuzz::fail("byte-level BPE did not give the bytes back");

  check_stream_decoder(tok, ids);
  check_stream_decoder(tok, ids_from(text, tok.size()));
  return 0;
}
