#pragma once
// Persistence: the only actor that touches the RocksDB store. It runs
// detached, on its own thread, so a sync write (~0.2 ms, far more on a slow
// disk) never holds up the scheduler or the engine step. Sessions follow
// persistence::SessionTurns (one turn at a time, Done only once durable,
// spilled KV valid for the history later turns keep); job writes answer
// the job actor with their outcome. Retention sweeps run here too, in
// slices between the turns (persistence::Sweeper).
#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "actors/interfaces.h"
#include "persistence/files.h"
#include "persistence/jobs.h"
#include "persistence/response_cache.h"
#include "persistence/retention.h"
#include "persistence/session_turns.h"
#include "persistence/store.h"
#include "service/metrics.h"

namespace troupe::actors {

class Replies;

struct PersistenceState {
  std::shared_ptr<persistence::Store> store;
  std::shared_ptr<Replies> replies;
  std::unique_ptr<persistence::SessionTurns> sessions;
  std::unique_ptr<persistence::JobBook> jobs;
  std::unique_ptr<persistence::FileBook> files;
  // Retention: a pass in slices, each its own message so turns queued
  // meanwhile go first; the job actor is told of the jobs it deleted.
  std::unique_ptr<persistence::Sweeper> sweeper;
  std::chrono::milliseconds sweep_interval{60000};
  job_actor job_watcher;
  int64_t sweep_started_ns = 0;
  int sweep_slices = 0;
  int64_t next_sweep_ms = 0;  // steady clock: when the next pass is due
  int64_t last_pass_ms = 0;   // ... and when the last one ended
  // A compaction running on its thread (none starts beside it).
  std::shared_ptr<std::atomic<bool>> compacting = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<service::ServiceMetrics> metrics;  // the stored-sessions gauge; may be null
  std::unique_ptr<persistence::ResponseCache> responses;  // null: no response cache tier
  bool store_writable = true;  // as last reported (its changes are logged)
  std::string store_reason;
};

struct RetentionOptions {
  persistence::RetentionPolicy policy;  // not enabled(): no sweeps
  persistence::ResponseCachePolicy responses;  // the response cache tier (max_bytes 0: none)
  std::chrono::milliseconds interval{0};  // between passes; 0: persistence::default_sweep_interval_ms
};

// Every stored session read through once, so that damage is reported as the
// server starts (before it says it is listening), not first when a client
// continues one; on stderr, with the way to repair it.
void report_damaged_sessions(persistence::Store& store);

persistence_actor::behavior_type persistence_role(persistence_actor::stateful_pointer<PersistenceState> self,
                                                  std::shared_ptr<persistence::Store> store,
                                                  std::shared_ptr<Replies> replies, persistence::SessionPolicy policy,
                                                  RetentionOptions retention = {},
                                                  std::shared_ptr<service::ServiceMetrics> metrics = nullptr);

}  // namespace troupe::actors
