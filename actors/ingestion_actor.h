#pragma once
// Ingestion: the first actor a client's bytes meet. It verifies and
// validates each Request (messages/client_validation.h), answers Ping and
// malformed input itself, tokenizes prompts (applying the model's chat
// template to ChatTurns), refuses prompts longer than the context, and hands
// the rest to the scheduler. A session turn first fetches the session's
// history from the persistence actor; session and job queries go to the
// persistence and job actors. One bad client never affects another: every
// failure is an Error frame to that client alone.
#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/speculation/controller.h"
#include "engine/tokenizer.h"
#include "messages/client_validation.h"

namespace troupe::actors {

class ClientGateway;

struct IngestionConfig {
  std::shared_ptr<const Tokenizer> tokenizer;
  ChatFormat chat_format = ChatFormat::chatml;
  messages::ClientLimits limits;
  int64_t max_context = 4096;
  int32_t max_samples = 16;  // 1 when the verifier's backend cannot copy KV pages
  int32_t page_size = 16;
  SpeculationMode speculation = SpeculationMode::off;  // the server's default
  int32_t max_draft = 8;
  bool draft_model = false;  // the server has a draft model (speculation draft is possible)
  std::vector<std::string> draft_names;  // what requests may call it: the name given to serve, the model's own name
  std::shared_ptr<ClientGateway> gateway;
  caf::actor scheduler;
  caf::actor persistence;  // sessions
  caf::actor jobs;         // batch jobs
};

caf::behavior ingestion_actor(caf::event_based_actor* self, IngestionConfig config);

}  // namespace troupe::actors
