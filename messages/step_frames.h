#pragma once
// Building and checking the scheduler ↔ verifier messages (messages/step.fbs).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/kv_eviction.h"
#include "engine/kv_shift.h"
#include "messages/client_frames.h"
#include "messages/step_generated.h"

namespace troupe::messages {

// A drafter's distribution for one drafted token: (token, probability)
// pairs (the same type as engine's Sampler::Distribution).
using DraftDistribution = std::vector<std::pair<int32_t, float>>;

// Where a sequence's constrained output starts (SequenceSampling.grammar_start).
struct GrammarSpec {
  int32_t start = 0;
  bool jump_forward = true;
};

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
  std::span<const DraftDistribution> draft_q;  // the draft model's q per draft; empty: fixed drafts
  GrammarSpec grammar{};  // with `sampling`, when it has a grammar
  int32_t top_logprobs = 0;  // with logprobs: this many most likely tokens per position
  int32_t evicted = 0;       // positions its KV no longer holds (Slice.evicted)
  int32_t query_window = 0;  // latest queries the worker keeps for its next eviction
};

// One sequence's KV eviction as the step carries it (StepPlan.evictions).
struct EvictionSpec {
  uint64_t sequence_id = 0;
  std::span<const int32_t> src_table, dst_table;
  int32_t length = 0, keep = 0, rope_offset = 0;
  EvictionPolicy policy;
};

struct SampledToken {
  uint64_t sequence_id = 0;
  int32_t token = 0;
  float logprob = 0;
  std::vector<int32_t> accepted;  // accepted drafts, before `token`
  std::vector<int32_t> forced;    // jump-forward tokens after `token` (Sampled.forced)
  bool grammar_blocked = false;
  std::vector<float> logprobs;    // with logprobs: one per token given (accepted drafts, then `token`)
  std::vector<int32_t> top_ids;   // top_logprobs N: N per token given
  std::vector<float> top_logprobs;
};

struct PageBytes {
  int32_t page = 0;
  std::string data;  // engine/kv_page_codec.h format
};


// What a step does to KV pages besides its forward, in this order: exports
// and swap-outs read, imports written, copies (src, dst), shifts, evictions (see StepPlan).
struct StepKv {
  std::span<const std::pair<int32_t, int32_t>> copies;
  std::span<const int32_t> exports;
  std::span<const PageBytes> imports;
  std::span<const int32_t> swap_outs;
  uint8_t export_codec = 0;
  std::span<const KvShift> shifts;  // engine/kv_shift.h
  std::span<const std::pair<int32_t, int32_t>> local_slots;  // (page, slot or -1), StepPlan.local_slots
  std::span<const EvictionSpec> evictions;
};

// `front`: the sending front end's id (StepPlan.front; 0 where a worker has one front end).
Bytes step_plan(uint64_t step, std::span<const SliceSpec> slices, std::span<const uint64_t> forget, const StepKv& kv = {},
                uint64_t front = 0);
struct WorkerInfo {
  int32_t kv_pages = 0;
  int32_t page_size = 0;
  int32_t n_vocab = 0;
  std::string model;
  bool can_copy_pages = false;
  bool can_transfer_pages = false;
  uint8_t kv_type = 0;  // engine/kv_type.h KvType
  bool can_shift_kv = false;
  uint64_t instance = 0;  // the identity of this front end's KV pages on it (StepResult.instance)
  uint64_t model_fingerprint = 0;
  bool draining = false;  // StepResult.draining: the worker is shutting down
  uint64_t process = 0;   // the worker process's random id (StepResult.process)
  std::vector<uint64_t> expert_tokens = {};  // StepResult.expert_tokens
  int32_t kv_local_pages = 0;                // StepResult.kv_local_pages
  bool can_evict_kv = false;                 // StepResult.can_evict_kv
};

Bytes step_result(uint64_t step, std::span<const SampledToken> sampled, std::string_view error, double forward_ms,
                  const WorkerInfo& worker = {}, std::span<const PageBytes> exported = {},
                  std::span<const PageBytes> swapped = {});

// The front end lets the worker go (StepPlan.release): an empty plan.
Bytes release_plan(uint64_t front = 0);

// What the front end's link to a worker answers when no result came (StepResult.worker_lost).
Bytes worker_lost_result(std::string_view why);

// A sequence's sampling as the step and draft messages carry it.
flatbuffers::Offset<wire::step::SequenceSampling> build_sequence_sampling(flatbuffers::FlatBufferBuilder& fbb, const SamplingFields& f,
                                                                 bool logprobs, const GrammarSpec& grammar = {},
                                                                 int32_t top_logprobs = 0);

// Draft distributions, flattened into (sizes, tokens, probs) vectors.
struct DraftQOffsets {
  flatbuffers::Offset<flatbuffers::Vector<int32_t>> sizes, tokens;
  flatbuffers::Offset<flatbuffers::Vector<float>> probs;
};
DraftQOffsets build_draft_q(flatbuffers::FlatBufferBuilder& fbb, std::span<const DraftDistribution> q);
// Read back and checked: `drafts` distributions (or none when the message
// has none), each non-empty, tokens in [0, n_vocab), probabilities finite,
// non-negative and summing to 1. Throws std::invalid_argument naming the fault.
std::vector<DraftDistribution> read_draft_q(const flatbuffers::Vector<int32_t>* sizes, const flatbuffers::Vector<int32_t>* tokens,
                                            const flatbuffers::Vector<float>* probs, int32_t drafts, int32_t n_vocab);

// Verified views (nullptr when the bytes are not such a message).
const wire::step::StepPlan* check_step_plan(std::string_view bytes);
const wire::step::StepResult* check_step_result(std::string_view bytes);

}  // namespace troupe::messages
