#pragma once
// Each role's interface as a typed actor: what it accepts and what it
// answers, so sending a role a message it does not take is a compile error,
// not a silent drop. Anything that may cross a process (scheduler ↔
// verifier and draft model) travels as FlatBuffers bytes (StepPlanBytes, ...),
// so those hops work over ZeroMQ unchanged; hops inside the front end carry
// the plain structs of service/ and persistence/.
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "gateways/frame_intake.h"
#include "persistence/jobs.h"
#include "persistence/session_turns.h"
#include "service/admit_request.h"
#include "service/batch_jobs.h"
#include "service/outbound.h"
#include "service/placement.h"

namespace troupe::actors {

// The step: StepPlan → StepResult, DraftPlan → DraftResult (bytes).
using step_atom = caf::atom_constant<caf::atom("step")>;
using propose_atom = caf::atom_constant<caf::atom("propose")>;
// Clients, through the gateway and ingestion (a ClientFrame).
using request_atom = caf::atom_constant<caf::atom("request")>;
using gone_atom = caf::atom_constant<caf::atom("gone")>;        // (peer): unreachable
using admit_atom = caf::atom_constant<caf::atom("admit")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;    // (peer, id, target)
using stats_atom = caf::atom_constant<caf::atom("stats")>;      // (peer, id)
using tick_atom = caf::atom_constant<caf::atom("tick")>;        // periodic housekeeping
// Graceful drain: admit nothing new (scheduler: (stop now?) -> requests still live);
// to persistence: a barrier, answered once everything sent before it is written.
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using subscriptions_atom = caf::atom_constant<caf::atom("subs")>;
// Sessions.
using session_begin_atom = caf::atom_constant<caf::atom("sbegin")>;
using session_release_atom = caf::atom_constant<caf::atom("srelease")>;
using session_commit_atom = caf::atom_constant<caf::atom("scommit")>;
using list_sessions_atom = caf::atom_constant<caf::atom("slist")>;
using show_session_atom = caf::atom_constant<caf::atom("sshow")>;
using delete_session_atom = caf::atom_constant<caf::atom("sdelete")>;
using file_atom = caf::atom_constant<caf::atom("file")>;  // a file request (persistence/files.h)
// A session's hand-off between front ends (docs/SCALE_OUT.md): a peer's
// TakeSession step (giver); a session taken from a peer (taker).
using take_session_atom = caf::atom_constant<caf::atom("stake")>;
using session_adopt_atom = caf::atom_constant<caf::atom("sadopt")>;
using peer_take_atom = caf::atom_constant<caf::atom("ptake")>;
using peer_confirm_atom = caf::atom_constant<caf::atom("pconfirm")>;
using session_idle_atom = caf::atom_constant<caf::atom("sidle")>;
using session_active_atom = caf::atom_constant<caf::atom("sactive")>;
using expire_atom = caf::atom_constant<caf::atom("sexpire")>;  // -> sessions idle long enough
// KV tiers.
using kv_spill_atom = caf::atom_constant<caf::atom("kvspill")>;
using swap_keep_atom = caf::atom_constant<caf::atom("swkeep")>;
using swap_fetch_atom = caf::atom_constant<caf::atom("swfetch")>;
using swap_drop_atom = caf::atom_constant<caf::atom("swdrop")>;
// Jobs.
using submit_job_atom = caf::atom_constant<caf::atom("jsubmit")>;
using job_query_atom = caf::atom_constant<caf::atom("jquery")>;
using job_item_atom = caf::atom_constant<caf::atom("jitem")>;  // (item request id, response bytes)
using job_create_atom = caf::atom_constant<caf::atom("jcreate")>;
using job_result_atom = caf::atom_constant<caf::atom("jresult")>;
using job_header_atom = caf::atom_constant<caf::atom("jheader")>;
using job_load_atom = caf::atom_constant<caf::atom("jload")>;
using job_get_atom = caf::atom_constant<caf::atom("jget")>;  // (job id): one ended job, read back
using summarize_atom = caf::atom_constant<caf::atom("summarize")>;      // a session's summary to write
using session_summary_atom = caf::atom_constant<caf::atom("ssummary")>;  // ... and to store
// Retention (persistence/retention.h).
using response_find_atom = caf::atom_constant<caf::atom("rfind")>;    // (key) -> CacheLookup
using response_store_atom = caf::atom_constant<caf::atom("rstore")>;  // (key, answer)
using escalate_atom = caf::atom_constant<caf::atom("escalate")>;  // a request (or its cancel) to the next tier
// The escalation budget's figures (service/escalation_budget.h), kept across restarts.
using budget_load_atom = caf::atom_constant<caf::atom("bload")>;
using budget_store_atom = caf::atom_constant<caf::atom("bstore")>;
using ended_atom = caf::atom_constant<caf::atom("ended")>;        // requests that left a tier for good
using tiers_atom = caf::atom_constant<caf::atom("tiers")>;        // the tiers' schedulers, to their router
// Data-parallel workers (service/placement.h): a scheduler's load after its
// steps, and its worker lost or back, to the router; the heartbeat's tick.
using load_atom = caf::atom_constant<caf::atom("load")>;
using worker_atom = caf::atom_constant<caf::atom("worker")>;
using heartbeat_atom = caf::atom_constant<caf::atom("heartbeat")>;
using join_atom = caf::atom_constant<caf::atom("join")>;  // (tier, scheduler): a worker joined
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;          // the next slice; (job actor): start sweeping
using jobs_swept_atom = caf::atom_constant<caf::atom("jswept")>;   // (job ids) the store no longer holds
using store_health_atom = caf::atom_constant<caf::atom("storehlth")>;  // the store's health, on a timer

// The hops that may cross a process carry FlatBuffers bytes, named by what
// they hold (messages/step_frames.h, messages/draft_frames.h): a result can
// never be sent where a plan is taken.
struct StepPlanBytes {
  messages::Bytes bytes;
};
struct StepResultBytes {
  messages::Bytes bytes;
};
struct DraftPlanBytes {
  messages::Bytes bytes;
};
struct DraftResultBytes {
  messages::Bytes bytes;
};


// The jobs the store holds, and why any could not be read ("" when none).
struct JobRecords {
  std::vector<persistence::JobRecord> jobs;
  std::string damage;
};

// The target verifier, in process or a `troupe worker` behind a socket.
using verifier_actor = caf::typed_actor<caf::replies_to<step_atom, StepPlanBytes>::with<StepResultBytes>>;

// The draft model, in process or a `troupe worker --role draft`.
using draft_actor = caf::typed_actor<caf::replies_to<propose_atom, DraftPlanBytes>::with<DraftResultBytes>>;

// Batch jobs (declared before persistence, which tells it of swept jobs).
using job_actor = caf::typed_actor<
    caf::reacts_to<submit_job_atom, service::JobSubmission>,
    caf::reacts_to<job_query_atom, std::string, uint64_t, service::JobQuery, std::string, persistence::Principal>,
    caf::reacts_to<subscriptions_atom>,  // event subscriptions to admit (CURVE: only one's own jobs)
    caf::reacts_to<job_item_atom, uint64_t, std::string>,
    caf::reacts_to<summarize_atom, service::SummaryTask>,
    caf::reacts_to<tick_atom>,
    caf::reacts_to<drain_atom>,  // admit no more items: those left run after a restart
    caf::reacts_to<jobs_swept_atom, std::vector<std::string>>>;

// The only actor touching RocksDB. Writes answer "" when durable, else why not.
using persistence_actor = caf::typed_actor<
    caf::replies_to<session_begin_atom, std::string, persistence::Principal>::with<persistence::SessionStart>,
    caf::reacts_to<session_release_atom, std::string>,
    caf::reacts_to<session_commit_atom, persistence::SessionCommit>,  // sends the Done once durable
    caf::replies_to<kv_spill_atom, persistence::KvSpill>::with<int32_t>,  // pages written
    caf::reacts_to<list_sessions_atom, std::string, uint64_t, persistence::Principal>,
    caf::reacts_to<show_session_atom, std::string, uint64_t, std::string, persistence::Principal>,
    caf::reacts_to<delete_session_atom, std::string, uint64_t, std::string, persistence::Principal>,
    caf::reacts_to<file_atom, std::string, uint64_t, std::string, persistence::Principal>,
    // (peer, id, the step): answered with SessionRecords, an Ack or an Error
    caf::reacts_to<take_session_atom, std::string, uint64_t, messages::TakeSessionFields>,
    // A session begun as new here but handed over by a peer: stored, then begun again.
    caf::replies_to<session_adopt_atom, std::string, persistence::SessionHandOff, persistence::Principal>::with<
        persistence::SessionStart>,
    caf::replies_to<job_create_atom, persistence::JobRecord>::with<std::string>,
    caf::replies_to<job_result_atom, persistence::JobRecord, messages::JobItemFields>::with<std::string>,
    caf::replies_to<job_header_atom, persistence::JobRecord>::with<std::string>,
    caf::replies_to<job_load_atom>::with<JobRecords>,
    caf::replies_to<job_get_atom, std::string>::with<JobRecords>,  // none or one, or the damage
    caf::reacts_to<session_summary_atom, service::SummaryResult>,
    caf::replies_to<response_find_atom, std::string>::with<persistence::CacheLookup>,
    caf::reacts_to<response_store_atom, std::string, persistence::CachedAnswer>,
    caf::replies_to<budget_load_atom>::with<std::string>,  // "" when none is stored
    caf::reacts_to<budget_store_atom, std::string>,
    caf::reacts_to<sweep_atom, job_actor>,  // swept jobs are told to it
    caf::reacts_to<sweep_atom>,
    caf::reacts_to<store_health_atom>,
    caf::replies_to<drain_atom>::with<bool>>;

// The KV-page allocator: what becomes of page contents between steps.
using kv_allocator_actor = caf::typed_actor<
    caf::reacts_to<kv_spill_atom, persistence::KvSpill>,
    caf::reacts_to<swap_keep_atom, service::SwappedPages>,
    caf::replies_to<swap_fetch_atom, uint64_t>::with<service::SwappedPages>,
    caf::reacts_to<swap_drop_atom, uint64_t>,
    caf::reacts_to<session_idle_atom, service::SessionPages>,
    caf::reacts_to<session_active_atom, std::string>,
    caf::replies_to<expire_atom>::with<std::vector<service::SessionPages>>,
    caf::replies_to<stats_atom>::with<uint64_t>>;  // pages spilled to the store

using scheduler_actor = caf::typed_actor<
    caf::reacts_to<admit_atom, service::AdmitRequest>,
    caf::reacts_to<cancel_atom, std::string, uint64_t, uint64_t>,
    caf::reacts_to<gone_atom, std::string>,
    caf::reacts_to<stats_atom, std::string, uint64_t>,
    caf::replies_to<drain_atom, bool>::with<int32_t>,
    caf::reacts_to<tick_atom>,        // idle sessions' pages go back to the pool
    caf::reacts_to<heartbeat_atom>>;  // a worker's scheduler probes it

// The schedulers behind a router: per tier, smallest first, one per worker.
using TierSchedulers = std::vector<std::vector<scheduler_actor>>;

// In front of the schedulers of a server with model tiers or several
// workers (service/tier_router.h): to ingestion and jobs it is the scheduler.
using tier_router_actor = scheduler_actor::extend<
    caf::reacts_to<escalate_atom, service::AdmitRequest>,  // escalated, or moved off a lost worker
    caf::reacts_to<escalate_atom, std::string, uint64_t, uint64_t>,  // a cancel that came after its request moved
    caf::reacts_to<ended_atom, std::vector<service::Outbound::Ended>>,
    caf::reacts_to<load_atom, int32_t, int32_t, service::ReplicaLoad>,  // (tier, worker, load)
    caf::reacts_to<worker_atom, int32_t, int32_t, bool>,                // (tier, worker, up)
    caf::reacts_to<join_atom, int32_t, scheduler_actor>,                // a worker joined: its scheduler
    caf::reacts_to<tiers_atom, TierSchedulers>>;

using ingestion_actor = caf::typed_actor<
    caf::reacts_to<request_atom, gateways::ClientFrame>,
    caf::reacts_to<drain_atom>,
    caf::reacts_to<gone_atom, std::string>>;

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::StepPlanBytes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::StepResultBytes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::DraftPlanBytes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::DraftResultBytes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::gateways::ClientFrame)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::service::AdmitRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<troupe::service::Outbound::Ended>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::TierSchedulers)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::service::ReplicaLoad)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::service::JobSubmission)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::service::JobQuery)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::service::SummaryTask)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::service::SummaryResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::service::SwappedPages)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::service::SessionPages)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<troupe::service::SessionPages>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::persistence::SessionStart)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::persistence::SessionHandOff)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::messages::TakeSessionFields)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::persistence::Principal)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::persistence::SessionCommit)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::persistence::KvSpill)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::persistence::CacheLookup)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::persistence::CachedAnswer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::persistence::JobRecord)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::JobRecords)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::messages::JobItemFields)
