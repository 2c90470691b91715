#pragma once
// A running request handed to another scheduler: the next cascade tier
// (escalate) or another replica of this tier (failover). It continues the
// same stream from `prompt` (its client's prompt and the answer sent so
// far); the stream, its sampling and its session go with it.
#include <cstdint>
#include <vector>

#include "service/admit_request.h"
#include "service/scheduled_sequence.h"

namespace troupe::service {

// `first_prompt_tokens`: the prompt its client sent (the rest of `prompt`
// is answer). max_tokens becomes what the answer has left.
AdmitRequest hand_off(const ScheduledSequence& s, std::vector<int32_t> prompt, int32_t first_prompt_tokens);

}  // namespace troupe::service
