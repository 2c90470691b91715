#pragma once
// Persistence: the only actor that touches the RocksDB store. It runs
// detached, on its own thread, so a sync write (~0.2 ms, far more on a slow
// disk) never holds up the scheduler or the engine step. Sessions follow
// persistence::SessionTurns (one turn at a time, Done only once durable,
// spilled KV valid for the history later turns keep); job writes answer
// the job actor with their outcome.
#include <memory>
#include <string>

#include "actors/interfaces.h"
#include "persistence/jobs.h"
#include "persistence/session_turns.h"
#include "persistence/store.h"

namespace troupe::actors {

class Replies;

struct PersistenceState {
  std::shared_ptr<persistence::Store> store;
  std::shared_ptr<Replies> replies;
  std::unique_ptr<persistence::SessionTurns> sessions;
  std::unique_ptr<persistence::JobBook> jobs;
};

persistence_actor::behavior_type persistence_role(persistence_actor::stateful_pointer<PersistenceState> self,
                                                  std::shared_ptr<persistence::Store> store,
                                                  std::shared_ptr<Replies> replies, persistence::SessionPolicy policy);

}  // namespace troupe::actors
