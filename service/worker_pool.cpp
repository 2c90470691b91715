#include "service/worker_pool.h"

#include <algorithm>

namespace troupe::service {

// A flat list of refusals, each told with the numbers that differ.
std::string WorkerPool::refusal(const std::string& endpoint, const messages::WorkerInfo& w) const {
  if (w.model_fingerprint != 0 && w.model_fingerprint != fingerprint_)
    return "the worker at " + endpoint + " serves another model (" + w.model + ") than " + model_path_ +
           "; every worker must load the front end's model file";
  if (w.n_vocab != n_vocab_)
    return "the worker at " + endpoint + " serves a model with " + std::to_string(w.n_vocab) + " tokens; " +
           model_path_ + " has " + std::to_string(n_vocab_);
  if (w.process != 0)
    for (const PooledWorker& p : workers_)
      if (p.process == w.process && p.endpoint != endpoint)
        return "--worker " + endpoint + " and " + p.endpoint + " are the same worker process";
  const auto kv_type = static_cast<KvType>(w.kv_type);
  if (!workers_.empty() && (w.page_size != page_size_ || kv_type != kv_type_))
    return "the worker at " + endpoint + " keeps KV pages of " + std::to_string(w.page_size) + " tokens (" +
           kv_type_name(kv_type) + "), the one at " + workers_.front().endpoint + " of " + std::to_string(page_size_) +
           " (" + kv_type_name(kv_type_) + "); a request moves between workers, so they need the same page size and KV type";
  if (max_context_ > 0 && int64_t{w.kv_pages} * w.page_size < max_context_)
    return "the worker at " + endpoint + " holds " + std::to_string(int64_t{w.kv_pages} * w.page_size) +
           " tokens of KV, less than this server's context of " + std::to_string(max_context_) +
           "; give it more --kv-tokens";
  return {};
}

void WorkerPool::add(const std::string& endpoint, const messages::WorkerInfo& w) {
  const bool first = workers_.empty();
  kv_pages_ = first ? w.kv_pages : std::min(kv_pages_, w.kv_pages);
  kv_local_pages_ = first ? w.kv_local_pages : std::min(kv_local_pages_, w.kv_local_pages);
  page_size_ = w.page_size;
  kv_type_ = static_cast<KvType>(w.kv_type);
  can_copy_ = can_copy_ && w.can_copy_pages;
  can_transfer_ = can_transfer_ && w.can_transfer_pages;
  can_shift_ = can_shift_ && w.can_shift_kv;
  can_evict_ = can_evict_ && w.can_evict_kv;
  workers_.push_back({endpoint, w.model, w.process, w.kv_pages, w.kv_local_pages});
}

bool WorkerPool::has(const std::string& endpoint) const {
  return std::any_of(workers_.begin(), workers_.end(), [&](const PooledWorker& p) { return p.endpoint == endpoint; });
}

std::string WorkerPool::describe() const {
  std::string text;
  for (const PooledWorker& p : workers_)
    text += std::string(text.empty() ? "" : ", ") + p.endpoint + " (" + p.model + ", KV " + std::to_string(p.kv_pages) +
            " pages x " + std::to_string(page_size_) + " tokens)";
  return (workers_.size() == 1 ? "verifier in worker " : "verifier in " + std::to_string(workers_.size()) + " workers: ") +
         text;
}

}  // namespace troupe::service
