#include "engine/kv_budget.h"

#include <stdexcept>

#include "engine/backend.h"
#include "engine/batch.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"

namespace troupe {

KvBudget::KvBudget(Backend& backend, const EvictionPolicy& policy) : backend_(&backend), policy_(policy) {
  if (!policy.on()) return;
  policy.check();
  if (!backend.can_evict_kv())
    throw std::runtime_error(backend.describe() + ": KV eviction (--kv-budget) needs the CPU backend and a model " +
                             "without sliding-window layers");
  const ModelConfig& c = backend.config();
  queries_.emplace(c.n_layer, c.q_dim(), policy.window);
}

void KvBudget::make_room(KvSequence& seq, int32_t held, int32_t incoming) {
  if (!on() || held + incoming <= policy_.budget) return;
  const int32_t keep = policy_.keep();
  if (held <= keep) return;  // a step larger than the room: nothing to cut it to
  KvEviction e;
  e.src_table = e.dst_table = seq.block_table();
  e.length = held;
  e.keep = keep;
  e.rope_offset = evicted_;
  e.queries = &*queries_;
  e.policy = policy_;
  backend_->evict_kv(e);
  seq.truncate(keep);
  evicted_ += held - keep;
  ++evictions_;
}

void KvBudget::mark(BatchSequence& s) {
  if (!on()) return;
  s.rope_offset = evicted_;
  s.queries = &*queries_;
}

}  // namespace troupe
