#pragma once
// Persistence: the only actor that touches the RocksDB store
// (persistence/). It runs detached, on its own thread, so a sync write
// (~0.2 ms, far more on a slow disk) never holds up the scheduler or the
// engine step. It keeps chat sessions, serialises turns of one session
// (one at a time), and sends a session turn's Done only once the turn is
// durable; a turn that cannot be written is answered storage_failed instead,
// and the session stays at its last acknowledged turn. It also writes what
// the job actor asks and answers with the outcome. KV pages spilled by the
// scheduler are stored per session; a session's next turn after a restart
// (or a long idle) gets them back with its history.
#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/model_identity.h"
#include "persistence/jobs.h"
#include "persistence/store.h"

namespace troupe::actors {

class ClientGateway;

struct PersistenceConfig {
  std::shared_ptr<persistence::Store> store;
  std::shared_ptr<ClientGateway> gateway;
  std::string model_name;  // recorded with each turn
  uint64_t model_fingerprint = 0;
  // KV tiers: spilled pages are kept and restored when set.
  bool kv = false;
  KvIdentity kv_identity;
  int32_t page_size = 16;
  int64_t page_bytes = 0;  // one encoded page (engine/kv_page_codec.h)
  // A session that ended a turn in this process more recently than this
  // still has its pages in memory (the scheduler drops them after the same
  // time): its next turn needs no restore.
  int64_t idle_ms = 300000;
};

struct PersistenceState;
caf::behavior persistence_actor(caf::stateful_actor<std::shared_ptr<PersistenceState>>* self, PersistenceConfig config);

using JobRecords = std::vector<persistence::JobRecord>;

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::persistence::JobRecord)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::JobRecords)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::messages::JobItemFields)
