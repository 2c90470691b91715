#pragma once
// Text ⇄ token ids for a Vocabulary.
//
// Encoding a byte-level BPE (gpt2) vocabulary, as HF tokenizers does:
//
//   text ──split on special tokens──▶ raw fragments | special ids
//   fragment ──pre-tokenizer regex (PCRE2, UTF+UCP, JIT)──▶ words
//   word ──bytes → GPT-2 byte-level alphabet──▶ symbols, one per byte
//   symbols ──apply merges, lowest rank first──▶ ids
//
// No Unicode normalization is applied (HF's Qwen2 tokenizer applies NFC;
// llama.cpp does not): text that is already NFC, which is nearly all text,
// tokenizes identically.
//
// Supported `tokenizer.ggml.pre` names and the regex each selects:
//   default, gpt-2, gpt2                GPT-2's pattern
//   qwen2, deepseek-r1-qwen             Qwen2's (digits one at a time)
//   llama-bpe, llama3                   Llama 3's (digits in runs of up to 3);
//                                       a word that is itself a token skips BPE
// Any other name is rejected when the Tokenizer is built.
//
// SentencePiece (llama) vocabularies: spaces become U+2581; if
// add_space_prefix, a space is prefixed to ordinary text at the start and
// after each special token (as llama.cpp does; decode removes only the one at
// the start); symbols are merged by score, and characters without a token
// fall back to <0xAB> byte tokens.
//
// A Tokenizer is immutable after construction except for an internal,
// mutex-guarded word cache, so it may be shared between threads.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/vocabulary.h"

namespace troupe {

class Tokenizer {
 public:
  // Throws TokenizerError for an inconsistent vocabulary or an unknown
  // pre-tokenizer name.
  explicit Tokenizer(Vocabulary vocab);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // parse_special: control tokens written in the text ("<|im_start|>") become
  // their ids; otherwise they are tokenized as ordinary text. User-defined
  // tokens are always matched, as in HF tokenizers and llama.cpp. Where
  // special tokens overlap, the leftmost match wins, then the longest.
  // add_bos: prepend bos() (TokenizerError if the vocabulary has none).
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  // Concatenated token_bytes; exact bytes, which may be invalid UTF-8 when
  // the ids split a character. (SentencePiece: less the prefixed space.)
  // Throws std::out_of_range for a bad id.
  std::string decode(std::span<const int32_t> ids) const;

  // The token as stored in the vocabulary (byte-level alphabet for gpt2).
  std::string_view token_text(int32_t id) const;
  // The bytes the token stands for; control and user-defined tokens render
  // as their text.
  const std::string& token_bytes(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // Exact lookup by token_text; kNoToken if absent.
  int32_t find_token(std::string_view text) const;

  // eos, eot, eom, and tokens whose text llama.cpp treats as ending a turn
  // (<|im_end|>, <|endoftext|>, <|eot_id|>, <end_of_turn>, ..., and Qwen's
  // FIM <|fim_pad|>, <|repo_name|>, <|file_sep|>).
  bool is_end_of_generation(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const;  // ascending

  int32_t bos() const;  // kNoToken if none
  int32_t eos() const;  // kNoToken if none
  bool add_bos_by_default() const;
  bool add_eos_by_default() const;
  size_t size() const;
  const Vocabulary& vocabulary() const;

 private:
  friend class StreamDecoder;
  struct Impl;
  void check_id(int32_t id) const;
  // Appends token_bytes(id), dropping the space a SentencePiece encode
  // prefixed when the token starts the output.
  void append_piece(std::string& out, int32_t id, bool at_start) const;
  std::unique_ptr<Impl> impl_;
};

// Turns ids into text as they are generated. push() returns only whole UTF-8
// characters: bytes of a character split across tokens wait for the rest,
// and bytes that can never form a character become U+FFFD at once, so the
// concatenated output is always valid UTF-8. The tokenizer must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  std::string push(int32_t id);  // throws std::out_of_range for a bad id
  // Emits what is held (an unfinished character becomes U+FFFD) and resets.
  std::string finish();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;
  bool at_start_ = true;
};

}  // namespace troupe
