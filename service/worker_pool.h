#pragma once
// The workers a front end runs its model on (`serve --worker`, and those
// that join): which may join, and the KV pool they make together. A request
// moves between them as pages and tokens, so they serve the same model with
// the same page shape; the front end plans with the smallest pool among them.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/kv_type.h"
#include "messages/step_frames.h"

namespace troupe::service {

struct PooledWorker {
  std::string endpoint;
  std::string model;
  uint64_t process = 0;  // StepResult.process: one process is one worker, whatever its endpoints
  int32_t kv_pages = 0;
  int32_t kv_local_pages = 0;
};

class WorkerPool {
 public:
  // The front end's own model file: its path (for messages), fingerprint and vocabulary size.
  WorkerPool(std::string model_path, uint64_t model_fingerprint, int32_t n_vocab)
      : model_path_(std::move(model_path)), fingerprint_(model_fingerprint), n_vocab_(n_vocab) {}

  // Why the worker at `endpoint` cannot join (empty: it can): another model
  // or vocabulary, the process of a worker already here, another page size
  // or KV type than those before it, or less KV than the server's context.
  std::string refusal(const std::string& endpoint, const messages::WorkerInfo& worker) const;
  void add(const std::string& endpoint, const messages::WorkerInfo& worker);
  bool has(const std::string& endpoint) const;
  // Set once the service runs: later workers must hold a whole context.
  void set_max_context(int64_t tokens) { max_context_ = tokens; }

  const std::vector<PooledWorker>& workers() const { return workers_; }
  int32_t kv_pages() const { return kv_pages_; }              // the smallest worker's
  int32_t kv_local_pages() const { return kv_local_pages_; }  // the smallest worker's
  int32_t page_size() const { return page_size_; }
  KvType kv_type() const { return kv_type_; }
  // Only what every worker can do.
  bool can_copy() const { return can_copy_; }
  bool can_transfer() const { return can_transfer_; }
  bool can_shift() const { return can_shift_; }
  bool can_evict() const { return can_evict_; }
  // "verifier in worker E (model, KV N pages x S tokens)", or "in N workers: ...".
  std::string describe() const;

 private:
  std::string model_path_;
  uint64_t fingerprint_ = 0;
  int32_t n_vocab_ = 0;
  int64_t max_context_ = 0;
  std::vector<PooledWorker> workers_;
  int32_t kv_pages_ = 0, kv_local_pages_ = 0, page_size_ = 0;
  KvType kv_type_ = KvType::f16;
  bool can_copy_ = true, can_transfer_ = true, can_shift_ = true, can_evict_ = true;
};

}  // namespace troupe::service
