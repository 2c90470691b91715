#include "actors/ingestion_actor.h"

#include <chrono>
#include <exception>
#include <string>

#include "actors/client_gateway.h"
#include "actors/local_messages.h"

namespace troupe::actors {
namespace {

Priority priority_of(wire::Priority p) {
  switch (p) {
    case wire::Priority::chat: return Priority::chat;
    case wire::Priority::batch: return Priority::batch;
    default: return Priority::interactive;
  }
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

caf::behavior ingestion_actor(caf::event_based_actor* self, IngestionConfig config) {
  auto cfg = std::make_shared<IngestionConfig>(std::move(config));
  return {
      [=](request_atom, const std::string& peer, const std::string& bytes) {
        ClientGateway& gw = *cfg->gateway;
        messages::Rejection why;
        const wire::Request* req = messages::check_request(bytes, cfg->limits, why);
        if (!req) {
          gw.send(peer, messages::error_response(why.client_request_id, why.code, why.message));
          return;
        }
        const uint64_t id = req->client_request_id();
        AdmitRequest admit;
        admit.peer = peer;
        admit.client_id = id;
        admit.accepted_ns = now_ns();
        try {
          switch (req->body_type()) {
            case wire::RequestBody::Ping:
              gw.send(peer, messages::pong_response(id, req->body_as_Ping()->nonce()));
              return;
            case wire::RequestBody::Stats: self->send(cfg->scheduler, stats_atom::value, peer, id); return;
            case wire::RequestBody::Cancel:
              self->send(cfg->scheduler, cancel_atom::value, peer, id, req->body_as_Cancel()->target_request_id());
              return;
            case wire::RequestBody::Generate: {
              const auto* g = req->body_as_Generate();
              admit.prompt = cfg->tokenizer->encode(g->prompt()->string_view(), cfg->tokenizer->add_bos_by_default(),
                                                    g->special());
              admit.sampling = messages::read_sampling(g->sampling());
              admit.priority = priority_of(g->priority());
              admit.logprobs = g->logprobs();
              admit.ignore_eos = g->ignore_eos();
              admit.samples = g->n();
              break;
            }
            case wire::RequestBody::ChatTurn: {
              const auto* t = req->body_as_ChatTurn();
              std::vector<ChatMessage> chat;
              for (const auto* m : *t->messages()) chat.push_back({m->role()->str(), m->content()->str()});
              admit.prompt = encode_chat(*cfg->tokenizer, cfg->chat_format, chat, true);
              admit.sampling = messages::read_sampling(t->sampling());
              admit.priority = priority_of(t->priority());
              admit.logprobs = t->logprobs();
              admit.samples = t->n();
              break;
            }
            default: return;  // check_request admits no other body
          }
        } catch (const std::exception& e) {
          gw.send(peer, messages::error_response(id, wire::ErrorCode::invalid_field, std::string("prompt: ") + e.what()));
          return;
        }
        if (admit.samples > cfg->max_samples) {
          gw.send(peer, messages::error_response(id, wire::ErrorCode::invalid_field,
                                                 "n: " + std::to_string(admit.samples) + " samples; this server's backend "
                                                 "serves at most " + std::to_string(cfg->max_samples)));
          return;
        }
        if (admit.prompt.empty()) {
          gw.send(peer, messages::error_response(id, wire::ErrorCode::invalid_field, "prompt: no tokens"));
          return;
        }
        if (static_cast<int64_t>(admit.prompt.size()) >= cfg->max_context) {
          gw.send(peer, messages::error_response(id, wire::ErrorCode::too_long,
                                                 "the prompt has " + std::to_string(admit.prompt.size()) +
                                                     " tokens; the context holds " + std::to_string(cfg->max_context)));
          return;
        }
        self->send(cfg->scheduler, admit_atom::value, std::move(admit));
      },
      [=](gone_atom, const std::string& peer) { self->send(cfg->scheduler, gone_atom::value, peer); },
  };
}

}  // namespace troupe::actors
