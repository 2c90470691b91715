#pragma once
// Building and checking the scheduler ↔ draft model messages (messages/draft.fbs).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "messages/client_frames.h"
#include "messages/draft_generated.h"
#include "messages/step_frames.h"

namespace troupe::messages {

struct DraftSequenceSpec {
  uint64_t sequence_id = 0;
  int32_t start = 0;                         // the history from here on (0: all of it)
  std::span<const int32_t> tokens;
  int32_t k = 0;
  const SamplingFields* sampling = nullptr;  // with start 0
};

Bytes draft_plan(uint64_t step, std::span<const DraftSequenceSpec> sequences, std::span<const uint64_t> forget);

struct DraftProposalFields {
  uint64_t sequence_id = 0;
  std::vector<int32_t> tokens;
  std::vector<DraftDistribution> q;  // empty for greedy drafts
  bool resync = false;
};

struct DrafterInfo {
  std::string model;
  int32_t n_vocab = 0;
  uint64_t vocabulary = 0;  // engine/speculation/model_drafter.h vocabulary_fingerprint
};

Bytes draft_result(uint64_t step, std::span<const DraftProposalFields> proposals, std::string_view error, double draft_ms,
                   double round_ms, const DrafterInfo& info, double catch_up_ms = 0);

// Verified views (nullptr when the bytes are not such a message, including
// a step plan or result sent to the wrong worker: the identifier differs).
const wire::draft::DraftPlan* check_draft_plan(std::string_view bytes);
const wire::draft::DraftResult* check_draft_result(std::string_view bytes);

}  // namespace troupe::messages
