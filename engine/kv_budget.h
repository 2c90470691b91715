#pragma once
// One sequence's KV under an eviction budget (engine/kv_eviction.h), for a
// caller that runs it step by step (the generator, `troupe perplexity`):
// when a step would take the cache past the budget, the sequence is cut to
// the policy's keep() first, in place, and its later tokens take slots that
// many fewer than their positions.
//
// A prompt longer than the budget is read whole (its pages held while it is
// read) and cut when the next step asks for room: the queries that choose
// are then the prompt's last ones, a question after a document.
#include <cstdint>
#include <optional>

#include "engine/kv_eviction.h"

namespace troupe {

class Backend;
class KvSequence;
struct BatchSequence;

class KvBudget {
 public:
  // Throws std::invalid_argument for a policy too small, std::runtime_error
  // for a backend (or model) without eviction. An off policy costs nothing.
  KvBudget(Backend& backend, const EvictionPolicy& policy);

  bool on() const { return policy_.on(); }
  const EvictionPolicy& policy() const { return policy_; }
  int32_t evicted() const { return evicted_; }  // positions gone: a token's slot is its position less this
  int32_t evictions() const { return evictions_; }
  int32_t slot(int32_t position) const { return position - evicted_; }

  // Before a step that adds `incoming` slots to the `held` the sequence
  // holds: if they would pass the budget, the sequence keeps keep() slots.
  void make_room(KvSequence& seq, int32_t held, int32_t incoming);
  // A step's view of the sequence: its RoPE offset and query window.
  void mark(BatchSequence& s);

 private:
  Backend* backend_;
  EvictionPolicy policy_;
  std::optional<QueryWindow> queries_;
  int32_t evicted_ = 0, evictions_ = 0;
};

}  // namespace troupe
