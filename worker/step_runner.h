#pragma once
// The target verifier's work, outside any actor: one StepPlan
// (messages/step.fbs) becomes one batched forward of the model (prefill
// chunks, decode tokens and verify windows together), then every sequence
// that wants a token is sampled with its own sampler and history, and each
// verify window is accepted or cut (engine/speculation/acceptance.h). KV
// pages are exported, swapped out and imported around the forward, in the
// order the plan defines. The verifier actor and `troupe worker` both run
// it; it links no actor framework.
#include <chrono>
#include <memory>
#include <string>

#include "engine/backend.h"

namespace troupe::worker {

class StepRunner {
 public:
  // `fronts`: how many front ends may share this worker, each with its own
  // share of the KV pool (worker/front_shares.h); a share whose front end
  // fell silent for `front_idle` is free again.
  explicit StepRunner(std::shared_ptr<Backend> backend, int32_t fronts = 1,
                      std::chrono::milliseconds front_idle = std::chrono::seconds(3));
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  std::string run(const std::string& plan_bytes);  // StepPlan bytes -> StepResult bytes, never throws
  // Shutting down: every result says so (StepResult.draining), and the front
  // end moves the requests away.
  void set_draining(bool draining);
  uint64_t process() const;   // this runner's random id (StepResult.process, JoinRequest.instance)
  int32_t fronts_held() const;  // front ends holding a share of the pool now

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::worker
