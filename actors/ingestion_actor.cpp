#include "actors/ingestion_actor.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>

#include "actors/client_gateway.h"
#include "actors/clock.h"
#include "actors/local_messages.h"

namespace troupe::actors {
namespace {

// A request's speculation against the server's default. Sampled requests
// with logprobs or n > 1 do not speculate (their per-token outputs are not
// defined for accepted drafts, and their forks share pages). False when the
// request asks for a draft model that this server does not have.
bool resolve_speculation(AdmitRequest& a, wire::Speculation s, int32_t max_draft, const IngestionConfig& cfg) {
  switch (s) {
    case wire::Speculation::off: a.speculation = SpeculationMode::off; break;
    case wire::Speculation::ngram: a.speculation = SpeculationMode::ngram; break;
    case wire::Speculation::draft: a.speculation = SpeculationMode::draft; break;
    case wire::Speculation::auto_: a.speculation = SpeculationMode::automatic; break;
    default: a.speculation = cfg.speculation;
  }
  a.max_draft = max_draft > 0 ? max_draft : cfg.max_draft;
  if (a.logprobs || a.samples > 1) a.speculation = SpeculationMode::off;
  return a.speculation != SpeculationMode::draft || cfg.draft_model;
}

constexpr const char* kNoDraftModel =
    "speculation: this server has no draft model (serve --draft-model NAME); use ngram or auto";

// Why a request that names its draft model cannot have it here ("" when it can).
std::string draft_model_mismatch(const flatbuffers::String* wanted, const IngestionConfig& cfg) {
  if (!wanted || wanted->size() == 0) return "";
  const std::string name = wanted->str();
  if (std::find(cfg.draft_names.begin(), cfg.draft_names.end(), name) != cfg.draft_names.end()) return "";
  if (cfg.draft_names.empty()) return "draft_model: this server has no draft model";
  return "draft_model: this server drafts with " + cfg.draft_names.front() + ", not " + name;
}

Priority priority_of(wire::Priority p) {
  switch (p) {
    case wire::Priority::chat: return Priority::chat;
    case wire::Priority::batch: return Priority::batch;
    default: return Priority::interactive;
  }
}


// The checks every tokenized request passes, then the scheduler. A session
// turn refused here frees its session.
void admit_checked(caf::event_based_actor* self, const IngestionConfig& cfg, AdmitRequest admit) {
  ClientGateway& gw = *cfg.gateway;
  const uint64_t id = admit.client_id;
  std::string problem;
  wire::ErrorCode code = wire::ErrorCode::invalid_field;
  if (admit.samples > cfg.max_samples) {
    problem = "n: " + std::to_string(admit.samples) + " samples; this server's backend serves at most " +
              std::to_string(cfg.max_samples);
  } else if (admit.prompt.empty()) {
    problem = "prompt: no tokens";
  } else if (static_cast<int64_t>(admit.prompt.size()) >= cfg.max_context) {
    code = wire::ErrorCode::too_long;
    problem = "the prompt has " + std::to_string(admit.prompt.size()) + " tokens; the context holds " +
              std::to_string(cfg.max_context);
    if (!admit.session_id.empty()) problem += " (session '" + admit.session_id + "' has outgrown it)";
  }
  if (!problem.empty()) {
    gw.send(admit.peer, messages::error_response(id, code, problem));
    if (!admit.session_id.empty()) self->send(cfg.persistence, session_release_atom::value, admit.session_id);
    return;
  }
  self->send(cfg.scheduler, admit_atom::value, std::move(admit));
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
        admit.accepted_ns = steady_ns();
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
              if (!resolve_speculation(admit, g->speculation(), g->max_draft(), *cfg))
                return gw.send(peer, messages::error_response(id, wire::ErrorCode::invalid_field, kNoDraftModel));
              if (const std::string why = draft_model_mismatch(g->draft_model(), *cfg); !why.empty())
                return gw.send(peer, messages::error_response(id, wire::ErrorCode::invalid_field, why));
              break;
            }
            case wire::RequestBody::ChatTurn: {
              const auto* t = req->body_as_ChatTurn();
              std::vector<ChatMessage> chat;
              for (const auto* m : *t->messages()) chat.push_back({m->role()->str(), m->content()->str()});
              admit.sampling = messages::read_sampling(t->sampling());
              admit.priority = priority_of(t->priority());
              admit.logprobs = t->logprobs();
              admit.samples = t->n();
              if (!resolve_speculation(admit, t->speculation(), t->max_draft(), *cfg))
                return gw.send(peer, messages::error_response(id, wire::ErrorCode::invalid_field, kNoDraftModel));
              if (const std::string why = draft_model_mismatch(t->draft_model(), *cfg); !why.empty())
                return gw.send(peer, messages::error_response(id, wire::ErrorCode::invalid_field, why));
              if (t->session_id() && t->session_id()->size() > 0) {
                admit.session_id = t->session_id()->str();
                admit.turn_messages = std::move(chat);
                const std::string sid = admit.session_id;
                self->request(cfg->persistence, caf::infinite, session_begin_atom::value, sid)
                    .then(
                        [self, cfg, admit](SessionStart& start) mutable {
                          if (start.error != wire::ErrorCode::none) {
                            cfg->gateway->send(admit.peer, messages::error_response(admit.client_id, start.error, start.message));
                            return;
                          }
                          try {
                            std::vector<ChatMessage> all = std::move(start.history);
                            all.insert(all.end(), admit.turn_messages.begin(), admit.turn_messages.end());
                            admit.prompt = encode_chat(*cfg->tokenizer, cfg->chat_format, all, true);
                            // Stored pages serve the prefix the new prompt shares with the stored history.
                            size_t same = 0;
                            while (same < admit.prompt.size() && same < start.kv_tokens.size() &&
                                   admit.prompt[same] == start.kv_tokens[same])
                              ++same;
                            const auto pages = static_cast<int32_t>(same / static_cast<size_t>(cfg->page_size));
                            admit.persisted_pages = std::min(pages, start.kv_stored);
                            start.kv_data.resize(std::min(start.kv_data.size(), static_cast<size_t>(admit.persisted_pages)));
                            admit.restore_pages = std::move(start.kv_data);
                          } catch (const std::exception& e) {
                            cfg->gateway->send(admit.peer, messages::error_response(admit.client_id, wire::ErrorCode::invalid_field,
                                                                                    std::string("prompt: ") + e.what()));
                            self->send(cfg->persistence, session_release_atom::value, admit.session_id);
                            return;
                          }
                          admit_checked(self, *cfg, std::move(admit));
                        },
                        [cfg, peer = admit.peer, id](caf::error&) {
                          cfg->gateway->send(peer, messages::error_response(id, wire::ErrorCode::internal,
                                                                            "the session store is unreachable"));
                        });
                return;
              }
              admit.prompt = encode_chat(*cfg->tokenizer, cfg->chat_format, chat, true);
              break;
            }
            case wire::RequestBody::ListSessions: self->send(cfg->persistence, list_sessions_atom::value, peer, id); return;
            case wire::RequestBody::ShowSession:
              self->send(cfg->persistence, show_session_atom::value, peer, id, req->body_as_ShowSession()->session_id()->str());
              return;
            case wire::RequestBody::DeleteSession:
              self->send(cfg->persistence, delete_session_atom::value, peer, id,
                         req->body_as_DeleteSession()->session_id()->str());
              return;
            case wire::RequestBody::SubmitJob: {
              const auto* j = req->body_as_SubmitJob();
              JobSubmission sub;
              sub.peer = peer;
              sub.client_id = id;
              for (const auto* item : *j->items()) sub.items.push_back(item->str());
              if (j->template_()) sub.item_template = j->template_()->str();
              sub.sampling = messages::read_sampling(j->sampling());
              sub.priority = j->priority();
              self->send(cfg->jobs, submit_job_atom::value, std::move(sub));
              return;
            }
            case wire::RequestBody::JobStatus:
              self->send(cfg->jobs, job_query_atom::value, peer, id, JobQuery::status, req->body_as_JobStatus()->job_id()->str());
              return;
            case wire::RequestBody::JobResults:
              self->send(cfg->jobs, job_query_atom::value, peer, id, JobQuery::results, req->body_as_JobResults()->job_id()->str());
              return;
            case wire::RequestBody::CancelJob:
              self->send(cfg->jobs, job_query_atom::value, peer, id, JobQuery::cancel, req->body_as_CancelJob()->job_id()->str());
              return;
            case wire::RequestBody::ListJobs:
              self->send(cfg->jobs, job_query_atom::value, peer, id, JobQuery::list, std::string());
              return;
            default: return;  // check_request admits no other body
          }
        } catch (const std::exception& e) {
          gw.send(peer, messages::error_response(id, wire::ErrorCode::invalid_field, std::string("prompt: ") + e.what()));
          return;
        }
        admit_checked(self, *cfg, std::move(admit));
      },
      [=](gone_atom, const std::string& peer) { self->send(cfg->scheduler, gone_atom::value, peer); },
  };
}

}  // namespace troupe::actors
