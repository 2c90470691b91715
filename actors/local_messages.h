#pragma once
// What travels between the front-end actors of one process (gateway,
// ingestion, scheduler): atoms and plain structs. Anything that may cross a
// process (scheduler ↔ verifier/draft) travels as FlatBuffers bytes instead
// (messages/step.fbs), so those hops work over ZeroMQ unchanged.
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/schedule/batch_planner.h"
#include "messages/client_frames.h"

namespace troupe::actors {

using request_atom = caf::atom_constant<caf::atom("request")>;  // (peer, bytes) from a client
using gone_atom = caf::atom_constant<caf::atom("gone")>;        // (peer): the client is unreachable
using admit_atom = caf::atom_constant<caf::atom("admit")>;      // AdmitRequest
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;    // (peer, id, target)
using stats_atom = caf::atom_constant<caf::atom("stats")>;      // (peer, id)
using step_atom = caf::atom_constant<caf::atom("step")>;        // StepPlan bytes -> StepResult bytes
using propose_atom = caf::atom_constant<caf::atom("propose")>;  // draft proposals
using store_atom = caf::atom_constant<caf::atom("store")>;      // persistence put
using fetch_atom = caf::atom_constant<caf::atom("fetch")>;      // persistence get

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
  int64_t accepted_ns = 0;  // steady clock, for queue time and TTFT
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::AdmitRequest)
