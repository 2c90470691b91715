#pragma once
// The "admit request" hop of a request's path (client Request → AdmitRequest
// → StepPlan → StepResult → token delta): a validated, tokenized Generate or
// ChatTurn on its way from ingestion, or from the job runner, to the
// scheduler.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/chat_tools.h"
#include "engine/schedule/batch_planner.h"
#include "engine/speculation/controller.h"
#include "messages/client_frames.h"
#include "service/cascade.h"
#include "service/context_window.h"

namespace troupe::service {

class ResponseStream;

struct AdmitRequest {
  std::string peer;  // ZeroMQ routing id of the client connection, or an internal_peer()
  uint64_t client_id = 0;
  // Who asked, for fair shares: the authenticated client's name (or a
  // batch job's owner); empty: the connection itself (peer).
  std::string tenant;
  uint32_t weight = 1;  // its share's weight
  std::vector<int32_t> prompt;
  messages::SamplingFields sampling;
  Priority priority = Priority::interactive;
  bool logprobs = false;
  int32_t top_logprobs = 0;  // with logprobs: most likely tokens reported per position
  bool ignore_eos = false;
  int32_t samples = 1;  // n parallel samples
  SpeculationMode speculation = SpeculationMode::off;  // resolved against the server's default
  int32_t max_draft = 0;
  int64_t accepted_ns = 0;  // steady clock, for queue time and TTFT
  // A session turn: the session it appends to and the turn's new messages.
  std::string session_id;
  std::vector<ChatMessage> turn_messages;
  std::vector<int32_t> pinned_messages;  // of turn_messages, those the client pinned (ascending)
  // A session turn whose leading pages are already stored: how many, and
  // those to restore (their data; fewer when some are still in memory).
  int32_t persisted_pages = 0;
  std::vector<std::string> restore_pages;
  // What the restored pages hold when it is not the prompt's prefix (the
  // session's stored token history, whose KV a window shift reuses).
  std::vector<int32_t> restore_tokens;
  // A session past its window: which KV of restore_tokens (or of the pages
  // still cached for them) moves to which positions of the prompt.
  KvReuse reuse;
  ContextPolicy policy = ContextPolicy::refuse;
  int32_t window_first_turn = 0;  // the first stored turn the prompt kept
  // Turns the window dropped past the summary: a summary of turns
  // [0, summarize_through) is to be written (summarize policy).
  std::vector<ChatMessage> summary_messages;
  int32_t summarize_through = 0;
  // The response cache tier: what it did, and (a miss) the key its answer is stored under.
  wire::ResponseCacheOutcome response_cache = wire::ResponseCacheOutcome::not_asked;
  std::string response_cache_key;
  // Cascade routing (service/cascade.h): the tier it runs on and what may
  // move it, and (a session turn) how many of the session's turns escalated.
  Route route;
  int32_t session_escalations = 0;
  // A request a smaller tier escalated: its client's stream so far, which
  // this tier continues, and the prompt it was first given (its prompt
  // here is that prompt and the tokens written so far).
  std::shared_ptr<ResponseStream> carried;
  int32_t first_prompt_tokens = 0;
  // Failover: the replica whose worker was lost (-1: none). It continues on
  // another replica of the same tier, from its prompt and the tokens sent.
  int32_t moved_from = -1;
  bool unplaced = false;  // no worker of its tier is up: the scheduler refuses it
  // A chat turn with tools (service/tool_gate.h): those written into its
  // prompt, and the format its answer's calls are read in (set when it may
  // call). A session turn's tool results are matched to the stored calls
  // once its history is read: the ids they answer, and the calls this turn
  // itself brought.
  std::vector<ToolSpec> tools;
  std::optional<ChatFormat> tool_format;
  uint64_t tool_seed = 0;  // its calls' ids derive from it (service/tool_gate.h)
  std::vector<std::string> tool_results, turn_call_ids;
  // Suffix speculation (service/suffix_history.h): earlier outputs of its
  // session or job, oldest first, for a scope tree this server may not hold
  // (a session's answers the prompt no longer shows, a resumed job's
  // finished items); used only where the scope has no tree yet.
  std::vector<std::vector<int32_t>> suffix_seed;
};

// Peers of requests the server makes itself (batch job items): their
// responses go to the job runner, not to a socket. ZeroMQ's own routing ids
// are 5 bytes starting with 0x00 and a client's chosen id may not start
// with 0x00, so a longer id starting with 0x00 is never a client's.
inline std::string internal_peer(const std::string& name) { return std::string(1, '\0').append("troupe/").append(name); }
inline bool is_internal_peer(const std::string& peer) { return peer.rfind(std::string("\0troupe/", 8), 0) == 0; }
// A batch job's items are asked by this peer; job_of_peer reads the id back ("": not a job's).
inline std::string job_peer(const std::string& job_id) { return internal_peer("job/" + job_id); }
inline std::string job_of_peer(const std::string& peer) {
  const std::string prefix = internal_peer("job/");
  return peer.rfind(prefix, 0) == 0 ? peer.substr(prefix.size()) : std::string();
}

}  // namespace troupe::service
