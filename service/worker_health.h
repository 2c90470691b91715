#pragma once
// What a scheduler knows of the worker behind its verifier: up or lost (and
// why), the process and model it last answered as, and whether its answers
// still fit the plans this side makes. The scheduler decides what a loss
// does to its requests (service/scheduler.h); this class only tells one.
#include <cstdint>
#include <string>

namespace troupe::wire::step {
struct StepResult;
}

namespace troupe::service {

// The KV shape this side plans for: a worker that answers with another is
// not the one it planned with.
struct WorkerShape {
  std::string name;  // the worker's endpoint, for the reasons given
  int32_t kv_pages = 0;
  int32_t page_size = 0;
  int32_t kv_local_pages = 0;
};

class WorkerHealth {
 public:
  explicit WorkerHealth(WorkerShape shape) : shape_(std::move(shape)) {}

  // Why a heartbeat's answer (null: unreadable) says the worker cannot go on
  // with this side's plans; empty: it can. Learns the model and process it
  // first answers as, so a later answer from another is a loss.
  std::string probe(const wire::step::StepResult* result);
  // Why a step's result came from a lost worker: its link says so, or it
  // is a new process whose KV cache is empty. Empty: the same worker.
  std::string lost_in(const wire::step::StepResult& result);

  // Marks the worker lost; false if it already was (the reason is updated).
  bool lose(std::string why);
  // A lost worker answered fit again: up, under the process it answered as
  // (0: it cannot say, the last one stays).
  void back(uint64_t instance);
  bool down() const { return down_; }
  const std::string& reason() const { return reason_; }
  uint64_t losses() const { return losses_; }
  const WorkerShape& shape() const { return shape_; }

 private:
  std::string unfit(const wire::step::StepResult* result) const;
  std::string restarted(uint64_t instance);

  WorkerShape shape_;
  uint64_t instance_ = 0;  // its process's id for this front end's pages (0: not yet known)
  uint64_t model_ = 0;     // its model's fingerprint (0: not yet known)
  bool down_ = false;
  std::string reason_;
  uint64_t losses_ = 0;
};

}  // namespace troupe::service
