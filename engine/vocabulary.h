#pragma once
// A model's vocabulary as stored in GGUF metadata (the `tokenizer.*` keys),
// read into plain data. The Tokenizer builds its lookup structures from this;
// tests build a Vocabulary by hand.
//
//   key                                type          field
//   tokenizer.ggml.model               string        model ("gpt2" | "llama")
//   tokenizer.ggml.pre                 string        pre (default "default")
//   tokenizer.ggml.tokens              [string]      tokens
//   tokenizer.ggml.token_type          [int32]       token_types (default NORMAL)
//   tokenizer.ggml.scores              [float32]     scores (SentencePiece)
//   tokenizer.ggml.merges              [string]      merges, "left right" (gpt2)
//   tokenizer.ggml.{bos,eos,eot,eom,padding,unknown}_token_id  uint32
//   tokenizer.ggml.add_bos_token       bool          add_bos
//   tokenizer.ggml.add_eos_token       bool          add_eos
//   tokenizer.ggml.add_space_prefix    bool          add_space_prefix (SentencePiece)
//   tokenizer.chat_template            string        chat_template
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe {

class GgufFile;

// A vocabulary that is missing a key, contradicts itself or names a token
// that does not exist.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Numbered as GGUF stores them (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,       // <|im_start|>, <|endoftext|>: matched in text only on request
  user_defined = 4,  // added tokens that are always matched whole in text
  unused = 5,
  byte = 6,          // SentencePiece byte fallback, text "<0xAB>"
};

enum class TokenizerModel {
  gpt2,   // byte-level BPE with merges
  llama,  // SentencePiece BPE: merges chosen by score, byte fallback
};

inline constexpr int32_t kNoToken = -1;

struct Vocabulary {
  TokenizerModel model = TokenizerModel::gpt2;
  std::string pre = "default";  // pre-tokenizer name (gpt2 only)
  std::vector<std::string> tokens;
  std::vector<TokenType> token_types;  // empty, or one per token
  std::vector<float> scores;           // empty, or one per token
  std::vector<std::string> merges;     // highest priority first
  int32_t bos_id = kNoToken;
  int32_t eos_id = kNoToken;
  int32_t eot_id = kNoToken;
  int32_t eom_id = kNoToken;
  int32_t pad_id = kNoToken;
  int32_t unk_id = kNoToken;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;
  std::string chat_template;  // Jinja source; empty when the file has none

  TokenType type_of(int32_t id) const {
    return token_types.empty() ? TokenType::normal : token_types[static_cast<size_t>(id)];
  }
};

// Reads the tokenizer keys; also works on a vocab-only file (no tensors).
// Throws TokenizerError "<file>: <key>: <problem>" for a missing, mistyped or
// inconsistent key, and GgufError from the reader for a wrongly typed array.
Vocabulary load_vocabulary(const GgufFile& file);

// The cheap checks: sizes, token types, special ids in range, merges present
// for gpt2. `source` prefixes error messages. Merges are checked by
// resolve_merges, which load_vocabulary and the Tokenizer both call.
void validate_vocabulary(const Vocabulary& vocab, std::string_view source);

// Token text → id. When a text occurs twice the lower id wins.
using TokenIndex = std::unordered_map<std::string_view, int32_t>;
TokenIndex index_tokens(const Vocabulary& vocab);  // views into vocab.tokens

struct MergeRule {
  int32_t left = 0, right = 0, result = 0;
};
// Parses every merge against `index`, in rank order. Throws TokenizerError for
// a malformed line or a part (or the joined result) that is not a token.
std::vector<MergeRule> resolve_merges(const Vocabulary& vocab, const TokenIndex& index,
                                      std::string_view source);

}  // namespace troupe
