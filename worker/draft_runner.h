#pragma once
// The draft model's work, outside any actor: one DraftPlan
// (messages/draft.fbs) becomes the draft model's batched drafts
// (engine/speculation/model_drafter.h), with their q for sampled requests,
// answered as a DraftResult. The draft actor and `troupe worker --role
// draft` both run it; it links no actor framework.
#include <memory>
#include <string>

#include "engine/backend.h"

namespace troupe::worker {

class DraftRunner {
 public:
  // `name`: what the draft model is called (reported in every DraftResult).
  DraftRunner(std::shared_ptr<Backend> backend, std::string name);
  ~DraftRunner();
  DraftRunner(const DraftRunner&) = delete;
  DraftRunner& operator=(const DraftRunner&) = delete;

  std::string run(const std::string& plan_bytes);  // DraftPlan bytes -> DraftResult bytes, never throws

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::worker
