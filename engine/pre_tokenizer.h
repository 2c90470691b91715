#pragma once
// Pre-tokenization for byte-level BPE: the regex a model's tokenizer splits
// text with before merges (GPT-2, Qwen2, Llama 3 patterns, chosen by
// tokenizer.ggml.pre), run by PCRE2 with its JIT where the CPU allows.
#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>

namespace troupe {

struct PreTokenizer {
  std::string_view pattern;
  bool ignore_merges = false;  // HF's BPE option: a word that is a token is used whole
};

// Throws TokenizerError naming the supported names for an unknown one.
PreTokenizer pre_tokenizer_for(std::string_view pre);

// A compiled pattern. Compiled code is read-only and shared by all threads;
// each call brings its own scratch.
class PreTokenizerRegex {
 public:
  class Scratch;
  struct ScratchDeleter {
    void operator()(Scratch* s) const;
  };
  using ScratchPtr = std::unique_ptr<Scratch, ScratchDeleter>;
  explicit PreTokenizerRegex(std::string_view pattern);  // throws TokenizerError
  ~PreTokenizerRegex();
  PreTokenizerRegex(const PreTokenizerRegex&) = delete;
  PreTokenizerRegex& operator=(const PreTokenizerRegex&) = delete;

  // Match scratch: making one costs more than matching a short prompt, so a
  // caller splitting several pieces of one text makes it once.
  ScratchPtr scratch() const;
  // Calls emit(begin, end) for each match and each unmatched gap, in order,
  // covering all of `text`.
  void split(Scratch& scratch, std::string_view text, const std::function<void(size_t, size_t)>& emit) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

}  // namespace troupe
