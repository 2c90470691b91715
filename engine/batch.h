#pragma once
// The one input of a forward pass: several sequences, each contributing new
// tokens at given positions (a prefill chunk, one decode token, or a draft
// window), with the block table its KV lives in and which rows want logits.
#include <cstdint>
#include <span>
#include <vector>

namespace troupe {

class QueryWindow;

enum class LogitsWanted {
  none,  // a prefill chunk that is not the last one
  last,  // decode, or the last chunk of a prefill
  all,   // verification of a draft window: every position
};

struct BatchSequence {
  std::span<const int32_t> tokens;       // new tokens, at positions start_pos, start_pos + 1, ...
  int32_t start_pos = 0;                 // KV of [0, start_pos) is already in the cache
  std::span<const int32_t> block_table;  // pages covering [0, start_pos + tokens.size())
  LogitsWanted logits = LogitsWanted::last;
  // KV eviction (engine/kv_eviction.h): a sequence whose cache dropped
  // positions holds fewer slots than it has tokens. Its tokens go to slots
  // start_pos, ... and RoPE turns them for positions start_pos + rope_offset,
  // ...; attention reads slots. Backends without eviction refuse a nonzero one.
  int32_t rope_offset = 0;
  // Where the forward keeps this sequence's latest queries (the step's last
  // window of rows), for the next eviction to score with; null: nowhere.
  QueryWindow* queries = nullptr;
};

struct Batch {
  std::vector<BatchSequence> sequences;

  int64_t token_count() const {
    int64_t n = 0;
    for (const auto& s : sequences) n += static_cast<int64_t>(s.tokens.size());
    return n;
  }
};

// Logits of a forward pass: one row of n_vocab per wanted position, in batch
// order (sequence by sequence, position by position).
struct Logits {
  int64_t n_vocab = 0;
  std::vector<float> values;
  int64_t rows() const { return n_vocab ? static_cast<int64_t>(values.size()) / n_vocab : 0; }
  std::span<const float> row(int64_t i) const { return {values.data() + i * n_vocab, static_cast<size_t>(n_vocab)}; }
  std::span<float> row(int64_t i) { return {values.data() + i * n_vocab, static_cast<size_t>(n_vocab)}; }
};

}  // namespace troupe
