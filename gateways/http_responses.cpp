// The Responses API's routes of the HTTP gateway (service/openai_responses.h
// translates; here the chain is resolved against the session store).
#include "gateways/http_gateway.h"

#include "gateways/http_answers.h"
#include "messages/client_validation.h"
#include "messages/session_frames.h"
#include "service/openai_responses.h"
#include "service/troupe_api.h"

namespace troupe::gateways {

namespace {

// A show_session answer: the chain's Session, or the error as HTTP's (an
// unknown chain is a response not found).
const wire::Session* read_chain(const std::string& frame, const std::string& id, service::ApiError& error) {
  const auto* r = frame.empty() ? nullptr : messages::check_response(frame);
  if (r && r->body_type() == wire::ResponseBody::Session) return r->body_as_Session();
  if (!r) error = service::ApiError{504, "the session store did not answer in time", "", "timeout"};
  else if (const auto* e = r->body_as_Error(); e && e->code() == wire::ErrorCode::unknown_session)
    error = service::ApiError{404, "no stored response '" + id + "'", "", "not_found"};
  else error = service::api_error(r->body_as_Error() ? r->body_as_Error()->code() : wire::ErrorCode::internal,
                                  r->body_as_Error() && r->body_as_Error()->message() ? r->body_as_Error()->message()->str() : "");
  return nullptr;
}

// The session points into the frame: never a temporary's.
const wire::Session* read_chain(std::string&& frame, const std::string& id, service::ApiError& error) = delete;

int32_t chain_turns(const wire::Session& s) { return s.turn_messages() ? static_cast<int32_t>(s.turn_messages()->size()) : 0; }

}  // namespace

// A chain continues on its session while the response it names is the
// latest; from an earlier one (or when the latest moved on meanwhile) it
// forks: a new chain whose first turn carries the history. Not stored: a
// one-off conversation with that history.
int HttpGateway::respond(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client) {
  if (draining_) return send_error(res, service::api_error(wire::ErrorCode::shutting_down, "the server is draining"));
  auto parsed = service::parse_responses(req.body, options_.models, options_.limits.max_tokens);
  if (auto* e = std::get_if<service::ApiError>(&parsed)) return send_error(res, *e);
  service::ResponsesCall call = std::get<service::ResponsesCall>(std::move(parsed));
  for (int attempt = 0;; ++attempt) {
    messages::ChatTurnFields turn = call.chat.turn;
    service::ResponseId id{service::new_chain(), call.store ? 0 : -1};
    bool continuing = false;
    if (!call.previous.empty()) {
      const auto prev = service::read_response_id(call.previous);
      const service::ApiError missing{404, "no stored response '" + call.previous + "'", "previous_response_id", "not_found"};
      if (!prev || prev->turn < 0) return send_error(res, missing);
      service::ApiError error;
      const std::string frame = ask(messages::show_session_request(1, prev->chain), client);
      const wire::Session* chain = read_chain(frame, call.previous, error);
      if (!chain) return send_error(res, error.status == 404 ? missing : error);
      const int32_t turns = chain_turns(*chain);
      if (prev->turn >= turns) return send_error(res, missing);
      continuing = call.store && prev->turn == turns - 1 && attempt == 0;
      if (continuing) {
        id = {prev->chain, turns};
      } else {
        auto history = service::chain_history(*chain, prev->turn, options_.chat_format);
        turn.messages.insert(turn.messages.begin(), history.begin(), history.end());
      }
    }
    if (id.turn >= 0) turn.session_id = id.chain, turn.expected_turns = id.turn;
    call.chat.request = messages::chat_request(1, turn);
    service::ResponsesReply reply(call, id.str(), unix_now(), options_.tokenizer.get());
    auto [peer, box] = open();
    std::string first;
    if (const int status = start_request(peer, *box, client, call.chat.request, reply, res, first)) return status;
    // The chain's latest turn is taken (running, or it moved on): a fork.
    const auto* r = messages::check_response(first);
    if (continuing && r && r->body_type() == wire::ResponseBody::Error &&
        r->body_as_Error()->code() == wire::ErrorCode::session_busy) {
      close(peer, false);
      continue;
    }
    return relay(peer, *box, first, reply, call.chat.stream, res);
  }
}

int HttpGateway::stored_response(const std::string& id, bool remove, messages::HttpResponder& res, const std::string& client) {
  const auto rid = service::read_response_id(id);
  const service::ApiError missing{404, "no stored response '" + id + "'", "", "not_found"};
  if (!rid || rid->turn < 0) return send_error(res, missing);
  service::ApiError error;
  const std::string frame = ask(messages::show_session_request(1, rid->chain), client);
  const wire::Session* chain = read_chain(frame, id, error);
  if (!chain) return send_error(res, error);
  const auto body = service::stored_response(*chain, *rid, options_.chat_format);
  if (!body) return send_error(res, missing);
  if (!remove) return res.send(200, "application/json", *body), 200;
  // A response's successors hold it in their context: its whole chain goes (docs/HTTP.md).
  const service::HttpAnswer a = service::troupe_answer(ask(messages::delete_session_request(1, rid->chain), client));
  if (a.status != 200) return res.send(a.status, "application/json", a.json), a.status;
  res.send(200, "application/json", nlohmann::json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump());
  return 200;
}

}  // namespace troupe::gateways
