#pragma once
// A byte-level BPE vocabulary learned from a built-in English and code corpus,
// in GGUF's encoding (GPT-2 byte-to-unicode token texts, "a b" merges), for
// synthetic models.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/vocabulary.h"

namespace troupe {

struct TrainedVocabulary {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // 1 normal, 3 control, 5 unused
  std::vector<std::string> merges;
  int32_t eos_id = -1;  // <|endoftext|>
  int32_t im_start_id = -1;
  int32_t im_end_id = -1;
};

// 256 byte tokens, n_merges learned merges, then the ChatML control tokens;
// padded with unused tokens up to n_vocab when n_vocab is larger.
TrainedVocabulary train_synthetic_vocabulary(int32_t n_merges, int64_t n_vocab);

// It as a tokenizer's Vocabulary, with the special ids synthetic models
// write: end of turn <|im_end|>, BOS and padding <|endoftext|>.
Vocabulary synthetic_vocabulary(const TrainedVocabulary& t);

// GPT-2's reversible map from bytes to printable code points, as UTF-8.
std::string byte_to_token_text(uint8_t byte);

}  // namespace troupe
