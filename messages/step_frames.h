#pragma once
// Building and checking the scheduler ↔ verifier messages (messages/step.fbs).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "messages/client_frames.h"
#include "messages/step_generated.h"

namespace troupe::messages {

struct SliceSpec {
  uint64_t sequence_id = 0;
  int32_t start = 0;
  std::span<const int32_t> tokens;
  std::span<const int32_t> block_table;
  bool wants_token = false;
  const SamplingFields* sampling = nullptr;  // with the first slice the worker sees of a sequence,
  std::span<const int32_t> history;          // and the tokens before `start`
  bool logprobs = false;
  int32_t drafts = 0;  // the last `drafts` tokens are a verify window's drafts
};

struct SampledToken {
  uint64_t sequence_id = 0;
  int32_t token = 0;
  float logprob = 0;
  std::vector<int32_t> accepted;  // accepted drafts, before `token`
};

struct PageBytes {
  int32_t page = 0;
  std::string data;  // engine/kv_page_codec.h format
};

// copies: (src, dst) page pairs, copied before the forward; exports and
// imports: see StepPlan in step.fbs.
Bytes step_plan(uint64_t step, std::span<const SliceSpec> slices, std::span<const uint64_t> forget,
                std::span<const std::pair<int32_t, int32_t>> copies = {}, std::span<const int32_t> exports = {},
                std::span<const PageBytes> imports = {}, std::span<const int32_t> swap_outs = {},
                uint8_t export_codec = 0);
struct WorkerInfo {
  int32_t kv_pages = 0;
  int32_t page_size = 0;
  int32_t n_vocab = 0;
  std::string model;
  bool can_copy_pages = false;
  bool can_transfer_pages = false;
};

Bytes step_result(uint64_t step, std::span<const SampledToken> sampled, std::string_view error, double forward_ms,
                  const WorkerInfo& worker = {}, std::span<const PageBytes> exported = {},
                  std::span<const PageBytes> swapped = {});

// Verified views (nullptr when the bytes are not such a message).
const wire::step::StepPlan* check_step_plan(std::string_view bytes);
const wire::step::StepResult* check_step_result(std::string_view bytes);

}  // namespace troupe::messages
