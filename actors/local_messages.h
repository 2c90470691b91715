#pragma once
// What travels between the front-end actors of one process (gateway,
// ingestion, scheduler): atoms and plain structs. Anything that may cross a
// process (scheduler ↔ verifier/draft) travels as FlatBuffers bytes instead
// (messages/step.fbs), so those hops work over ZeroMQ unchanged.
#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/speculation/controller.h"
#include "engine/schedule/batch_planner.h"
#include "messages/client_frames.h"
#include "messages/job_frames.h"

namespace troupe::actors {

using request_atom = caf::atom_constant<caf::atom("request")>;  // (peer, bytes) from a client
using gone_atom = caf::atom_constant<caf::atom("gone")>;        // (peer): the client is unreachable
using admit_atom = caf::atom_constant<caf::atom("admit")>;      // AdmitRequest
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;    // (peer, id, target)
using stats_atom = caf::atom_constant<caf::atom("stats")>;      // (peer, id)
using step_atom = caf::atom_constant<caf::atom("step")>;        // StepPlan bytes -> StepResult bytes
using propose_atom = caf::atom_constant<caf::atom("propose")>;  // draft proposals
// Sessions (persistence actor).
using session_begin_atom = caf::atom_constant<caf::atom("sbegin")>;    // (session id) -> SessionStart
using session_release_atom = caf::atom_constant<caf::atom("srelease")>;  // (session id): the turn ended unsaved
using session_commit_atom = caf::atom_constant<caf::atom("scommit")>;  // SessionCommit
using kv_spill_atom = caf::atom_constant<caf::atom("kvspill")>;      // KvSpill
using tick_atom = caf::atom_constant<caf::atom("tick")>;               // periodic housekeeping
using list_sessions_atom = caf::atom_constant<caf::atom("slist")>;      // (peer, id)
using show_session_atom = caf::atom_constant<caf::atom("sshow")>;      // (peer, id, session id)
using delete_session_atom = caf::atom_constant<caf::atom("sdelete")>;  // (peer, id, session id)
// Jobs (job actor, and its writes through the persistence actor).
using submit_job_atom = caf::atom_constant<caf::atom("jsubmit")>;  // JobSubmission
using job_query_atom = caf::atom_constant<caf::atom("jquery")>;    // (peer, id, JobQuery, job id)
using job_item_atom = caf::atom_constant<caf::atom("jitem")>;      // (item client id, response bytes) from the scheduler
using job_create_atom = caf::atom_constant<caf::atom("jcreate")>;  // JobRecord -> error text ("" when durable)
using job_result_atom = caf::atom_constant<caf::atom("jresult")>;  // (JobRecord, JobItemFields) -> error text
using job_header_atom = caf::atom_constant<caf::atom("jheader")>;  // JobRecord -> error text
using job_load_atom = caf::atom_constant<caf::atom("jload")>;      // -> JobList (every stored job)

// A validated, tokenized Generate or ChatTurn on its way to the scheduler.
struct AdmitRequest {
  std::string peer;  // ZeroMQ routing id of the client connection
  uint64_t client_id = 0;
  std::vector<int32_t> prompt;
  messages::SamplingFields sampling;
  Priority priority = Priority::interactive;
  bool logprobs = false;
  bool ignore_eos = false;
  int32_t samples = 1;  // n parallel samples
  SpeculationMode speculation = SpeculationMode::off;  // resolved against the server's default
  int32_t max_draft = 0;
  int64_t accepted_ns = 0;  // steady clock, for queue time and TTFT
  // A session turn: the session it appends to and the turn's new messages.
  std::string session_id;
  std::vector<ChatMessage> turn_messages;
  // Set for requests the server makes itself (batch job items): responses go
  // to this actor as (job_item, client_id, bytes) instead of to a socket.
  caf::actor sink;
  // A session turn whose leading pages are already stored: how many, and
  // those to restore (their data; fewer when some are still in memory).
  int32_t persisted_pages = 0;
  std::vector<std::string> restore_pages;
};

// Peers of requests the server makes itself. ZeroMQ's own routing ids are 5
// bytes starting with 0x00 and a client's chosen id may not start with
// 0x00, so a longer id starting with 0x00 is never a client's.
inline std::string internal_peer(const std::string& name) { return std::string(1, '\0').append("troupe/").append(name); }
inline bool is_internal_peer(const std::string& peer) { return peer.size() > 5 && peer[0] == '\0'; }

// The persistence actor's answer to session_begin: the stored history (empty
// for a new session), or why the turn cannot start.
struct SessionStart {
  wire::ErrorCode error = wire::ErrorCode::none;
  std::string message;
  std::vector<ChatMessage> history;
  // Stored KV of the session's token history: kv_data[i] holds the page of
  // kv_tokens[i * page_size, (i + 1) * page_size). Empty when the session
  // was active in this process recently (its pages are still in memory),
  // or none is stored for this model and layout.
  std::vector<int32_t> kv_tokens;
  std::vector<std::string> kv_data;
  int32_t kv_stored = 0;  // stored pages of kv_tokens (kv_data may be empty)
};

// Pages of a session's token history leaving memory for the store.
struct KvSpill {
  std::string session_id;
  std::vector<int32_t> tokens;     // the history its pages hold (full pages)
  int32_t first = 0;               // index of the first page in `data`
  std::vector<std::string> data;   // engine/kv_page_codec.h
};

// A finished session turn, to be made durable before its Done is sent.
struct SessionCommit {
  std::string peer;
  uint64_t client_id = 0;
  std::string session_id;
  std::vector<ChatMessage> messages;  // the turn's new messages, then the answer
  std::vector<int32_t> tokens;        // prompt + answer
  messages::SamplingFields sampling;
  messages::DoneFields done;
};

// A validated SubmitJob.
struct JobSubmission {
  std::string peer;
  uint64_t client_id = 0;
  std::vector<std::string> items;
  std::string item_template;
  messages::SamplingFields sampling;
  wire::Priority priority = wire::Priority::batch;
};

enum class JobQuery : uint8_t { status, results, cancel, list };

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::AdmitRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::SessionStart)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::SessionCommit)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::KvSpill)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::JobSubmission)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::JobQuery)
