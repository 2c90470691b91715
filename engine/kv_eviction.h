#pragma once
// KV eviction under a budget of positions (SnapKV-style): once a sequence's
// cache outgrows its budget, each KV head of each layer keeps the positions
// its latest queries attended most, and the rest are gone from memory.
//
//   kept per (layer, KV head) = the first `sinks` positions
//                             + the `window` latest positions
//                             + the highest-scoring of the rest, up to `keep`
//   score of a position       = attention of the window's queries (every
//                               query head of the group) summed, then the
//                               maximum over `pool` neighbours, so that a
//                               kept token keeps the words around it
//
// Each head keeps its own positions: slot i of head h holds that head's i-th
// kept position, its key rotated for its original position, so a query at
// the true next position (BatchSequence::rope_offset) sees the true
// distances. The kept rows are copied as they are stored (any KV type), so
// eviction adds no rounding.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace troupe {

class KvCache;
struct ModelConfig;
namespace cpu {
class ThreadPool;
}

struct EvictionPolicy {
  int32_t budget = 0;  // positions a sequence may hold; 0 = no eviction
  int32_t sinks = 4;   // the first positions, always kept (attention sinks)
  int32_t window = 32;  // the latest positions, kept, and whose queries score the rest
  int32_t pool = 7;    // neighbours a score is pooled over (odd)

  bool on() const { return budget > 0; }
  // What an eviction keeps: the budget less room to grow before the next
  // one (an eighth, at least a window), so a decoding sequence evicts once
  // every so many tokens rather than every token.
  int32_t keep() const;
  // The least budget: keep() then chooses a window's worth at least.
  constexpr int32_t least() const { return std::max(4 * window, sinks + 2 * window + 1); }
  // Throws std::invalid_argument for a budget under least().
  void check() const;
};

// The queries of a sequence's latest `window` positions, every layer, as a
// forward computed them (turned by RoPE, scaled): what scores the positions
// an eviction chooses from. A ring by true position (slot + rope_offset), so
// an eviction, which renumbers the slots, leaves it valid. The forward fills
// it (BatchSequence::queries); rows of rejected drafts are overwritten when
// those positions are taken again, and ignored until then.
class QueryWindow {
 public:
  QueryWindow(int64_t n_layer, int64_t q_dim, int32_t window);

  int32_t window() const { return window_; }
  int64_t q_dim() const { return q_dim_; }
  void store(int64_t layer, int32_t position, const float* q);
  // The query of `position` in `layer`, or null when the ring no longer (or
  // never) held it.
  const float* find(int64_t layer, int32_t position) const;

 private:
  int64_t n_layer_, q_dim_;
  int32_t window_;
  std::vector<int32_t> positions_;  // per ring slot: the position whose queries it holds, -1 none
  std::vector<float> rows_;         // [layer][ring slot][q_dim]
};

// One head's choice: the positions of [0, length) to keep, ascending.
// `scores` covers [0, length); positions inside the sinks and the window are
// kept whatever their score. Everything when length <= keep.
std::vector<int32_t> choose_kept(std::span<const float> scores, int32_t length, int32_t keep, const EvictionPolicy& policy);

// An eviction of one sequence: its `length` slots read through `src_table`,
// `keep` of them per KV head written to slots [0, keep) through `dst_table`
// (the same table works: rows only move down). `first_position` is slot 0's
// true position's offset (BatchSequence::rope_offset): the queries in the
// window are found by slot + first_position.
struct KvEviction {
  std::span<const int32_t> src_table;
  std::span<const int32_t> dst_table;
  int32_t length = 0;
  int32_t keep = 0;
  int32_t rope_offset = 0;
  const QueryWindow* queries = nullptr;
  EvictionPolicy policy;
};

// The attention the window's queries give each of `length` slots of one KV
// head of one layer (every query head of its group, each query's softmax
// over the slots it sees), added into `scores` (length floats, zeroed by
// the caller). Returns how many queries scored; none leaves scores as they
// were.
int32_t score_slots(const KvCache& cache, const ModelConfig& config, const KvEviction& e, int64_t layer, int64_t kv_head,
                    std::span<float> scores);

// Runs an eviction on a host cache: scores, chooses and moves the rows of
// every (layer, KV head), in parallel over them. A model with local
// (sliding-window) layers is refused: their windows count slots.
void evict_kv(KvCache& cache, const ModelConfig& config, cpu::ThreadPool& pool, const KvEviction& e);

}  // namespace troupe
