#pragma once
// Building the client protocol's buffers (messages/client.fbs): requests as
// a client sends them, responses as the server streams them. Each function
// returns one finished buffer, ready for a socket frame or a CAF message.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"
#include "messages/client_generated.h"

namespace troupe::messages {

// A finished buffer. std::string, because CAF carries it between actors as a
// built-in type and ZeroMQ frames take it as is.
using Bytes = std::string;

// A string field of a buffer as std::string ("" where it is absent).
inline std::string text_of(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

// Sampling fields as they travel (defaults equal the schema's).
// Sampling.constraint as plain data (wire::ConstraintKind values).
struct ConstraintFields {
  uint8_t kind = 0;  // wire::ConstraintKind
  std::string text;
  std::vector<std::string> choices;
  bool operator==(const ConstraintFields&) const = default;
};

// The engine's SamplingParams (the wire's repeat_penalty is repetition_penalty
// here), and what a request adds to them.
struct SamplingFields : SamplingParams {
  int32_t max_tokens = 256;
  std::vector<std::string> stop;
  std::string tier;                // cascade routing (service/cascade.h); empty: the server's default
  float escalate_threshold = 0.0f;  // 0: the server's default
  std::string escalate_class;       // the budget rule's workload class; empty: the job's or the request's shape
  ConstraintFields constraint;
  int32_t kv_budget = 0;  // KV positions kept once the prompt is read; 0: the server's (serve --kv-budget)
  // The constraint lowered to GBNF by the service when it admits the
  // request (empty: none); what the step plan sends the worker.
  std::string grammar;
};

SamplingFields read_sampling(const wire::Sampling* s);  // null gives the defaults
flatbuffers::Offset<wire::Sampling> build_sampling(flatbuffers::FlatBufferBuilder& fbb, const SamplingFields& s);
// A finished builder's buffer as Bytes.
Bytes finish_bytes(flatbuffers::FlatBufferBuilder& fbb);
Bytes request_bytes(uint64_t id, wire::RequestBody type, flatbuffers::Offset<void> body, flatbuffers::FlatBufferBuilder& fbb);
Bytes response_bytes(uint64_t id, wire::ResponseBody type, flatbuffers::Offset<void> body,
                     flatbuffers::FlatBufferBuilder& fbb);

Bytes generate_request(uint64_t id, std::string_view prompt, const SamplingFields& s,
                       wire::Priority priority = wire::Priority::interactive, bool special = false, bool logprobs = false,
                       bool ignore_eos = false, int32_t n = 1,
                       wire::Speculation speculation = wire::Speculation::server_default, int32_t max_draft = 0,
                       std::string_view draft_model = {},
                       wire::ContextPolicy policy = wire::ContextPolicy::server_default, bool response_cache = false,
                       int32_t top_logprobs = 0);
// A tool call (ChatMessage.tool_calls, Done.tool_calls).
struct ToolCallFields {
  std::string id, name, arguments;
  bool operator==(const ToolCallFields&) const = default;
};

struct ChatMessageFields {
  ChatMessageFields() = default;
  ChatMessageFields(std::string r, std::string c, std::vector<ToolCallFields> calls = {}, std::string call_id = {})
      : role(std::move(r)), content(std::move(c)), tool_calls(std::move(calls)), tool_call_id(std::move(call_id)) {}
  std::string role, content;
  std::vector<ToolCallFields> tool_calls;
  std::string tool_call_id;
  bool pinned = false;  // kept verbatim in the session's later prompts (client.fbs)
};

// A ChatTurn's tools: OpenAI tool objects as JSON text, and which calls it may make.
struct ChatToolsFields {
  std::vector<std::string> tools;
  wire::ToolChoice choice = wire::ToolChoice::auto_;
  std::string name;  // choice named
  bool parallel = true;
};

struct ChatTurnFields {
  std::string session_id;
  std::vector<ChatMessageFields> messages;
  SamplingFields sampling;
  wire::Priority priority = wire::Priority::chat;
  bool logprobs = false;
  wire::Speculation speculation = wire::Speculation::server_default;
  int32_t max_draft = 0;
  std::string draft_model;
  wire::ContextPolicy policy = wire::ContextPolicy::server_default;
  int32_t n = 1;
  bool response_cache = false;
  ChatToolsFields tools;
  int32_t top_logprobs = 0;
  int32_t expected_turns = -1;  // a session turn: the turns the session must hold (-1: any)
};
Bytes chat_request(uint64_t id, const ChatTurnFields& turn);
Bytes chat_request(uint64_t id, std::string_view session_id,
                   std::span<const std::pair<std::string, std::string>> messages,  // (role, content)
                   const SamplingFields& s, wire::Priority priority = wire::Priority::chat, bool logprobs = false,
                   wire::Speculation speculation = wire::Speculation::server_default, int32_t max_draft = 0,
                   std::string_view draft_model = {}, wire::ContextPolicy policy = wire::ContextPolicy::server_default,
                   int32_t n = 1, bool response_cache = false);
Bytes cancel_request(uint64_t id, uint64_t target);
Bytes stats_request(uint64_t id);
Bytes ping_request(uint64_t id, uint64_t nonce);

struct DoneFields {
  wire::FinishReason reason = wire::FinishReason::length;
  int32_t sample = 0;
  int32_t prompt_tokens = 0, cached_prompt_tokens = 0, completion_tokens = 0;
  double queue_ms = 0, ttft_ms = 0, per_token_ms = 0, total_ms = 0;
  bool speculated = false;
  std::string spec_source;
  int32_t spec_drafted = 0, spec_accepted = 0, spec_windows = 0;
  wire::ResponseCacheOutcome response_cache = wire::ResponseCacheOutcome::not_asked;
  std::vector<std::pair<std::string, int32_t>> tiers;  // (tier, tokens it wrote), in order
  std::vector<ToolCallFields> tool_calls;
};

struct TierStatsFields {
  std::string name;
  uint64_t requests = 0, escalated_in = 0, escalations = 0, tokens = 0, forward_tokens = 0, steps = 0;
  uint64_t drafted = 0, accepted = 0;
  int32_t running = 0, waiting = 0, pages_used = 0, pages_total = 0;
  uint64_t check_failures = 0;  // job items whose answer from this tier failed their job's check
};

struct WorkerStatsFields {
  std::string endpoint, tier;
  bool up = true;
  uint64_t requests = 0, moved_in = 0, moved_out = 0, lost = 0, tokens = 0, forward_tokens = 0, steps = 0;
  int32_t running = 0, waiting = 0, pages_used = 0, pages_total = 0;
  double step_ms = 0;
};

struct SpeculationSourceFields {
  std::string source;
  uint64_t drafted = 0, accepted = 0, windows = 0;
};

struct EscalationClassFields {
  std::string name;
  int32_t judged = 0;
  float share = 0, threshold = 0;
  bool operator==(const EscalationClassFields&) const = default;
};

struct StatsFields {
  int32_t running = 0, waiting = 0;
  int32_t pages_total = 0, pages_used = 0, pages_cached = 0, pages_free = 0;
  float live_token_fraction = 0;
  uint64_t steps = 0, tokens_generated = 0;
  std::string model;
  double engine_ms = 0, busy_ms = 0;
  uint64_t pages_spilled = 0, pages_restored = 0, pages_swapped_out = 0, pages_swapped_in = 0;
  uint64_t tokens_shifted = 0, preemptions = 0;
  uint64_t kv_evictions = 0, kv_positions_evicted = 0;
  bool draining = false;
  std::vector<TierStatsFields> tiers;
  std::vector<WorkerStatsFields> workers;
  std::vector<uint64_t> expert_tokens;
  int32_t local_pages_total = 0, local_pages_used = 0;  // sliding-window layers' slots
  std::string store_degraded;  // why the store refuses writes; empty: it takes them
  std::vector<SpeculationSourceFields> speculation;
  uint64_t suffix_tree_bytes = 0, suffix_tree_tokens = 0;
  int32_t suffix_trees = 0;
  std::vector<EscalationClassFields> escalation_classes;
};

Bytes accepted_response(uint64_t id, int32_t prompt_tokens, int32_t queue_position, uint64_t tool_call_seed = 0);
// `top_ids`/`top_logprobs`: N per token id (empty: none asked).
Bytes tokens_response(uint64_t id, std::string_view text, std::span<const int32_t> token_ids,
                      std::span<const float> logprobs = {}, int32_t sample = 0, std::span<const int32_t> top_ids = {},
                      std::span<const float> top_logprobs = {});
Bytes done_response(uint64_t id, const DoneFields& d);
Bytes error_response(uint64_t id, wire::ErrorCode code, std::string_view message);
Bytes pong_response(uint64_t id, uint64_t nonce);
Bytes stats_response(uint64_t id, const StatsFields& s);
// A StatsReply read whole (tiers, workers and experts too): what stats_response wrote.
StatsFields read_stats(const wire::StatsReply& s);

}  // namespace troupe::messages
