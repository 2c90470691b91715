#include "actors/http_gateway.h"

#include <caf/send.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <set>
#include <thread>
#include <utility>
#include <stdexcept>

#include "messages/client_frames.h"
#include "messages/curve_auth.h"
#include "messages/job_frames.h"
#include "messages/session_frames.h"
#include "service/bearer_token.h"
#include "messages/file_frames.h"
#include "service/openai_api.h"
#include "service/openai_batch.h"
#include "service/openai_responses.h"
#include "service/request_gate.h"
#include "service/troupe_api.h"
#include "actors/web/web_page.h"

namespace troupe::actors {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kControlTimeout = 10s;

int send_error(messages::HttpResponder& res, const service::ApiError& e, const messages::HttpHeaders& extra = {}) {
  res.send(e.status, "application/json", e.json(), extra);
  return e.status;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "/v1/troupe/jobs/ID[/events]" and the like: the id between `prefix` and
// `suffix` ("" when the path is not of that shape, or the id holds a '/').
std::string path_id(const std::string& path, std::string_view prefix, std::string_view suffix = "") {
  if (path.size() <= prefix.size() + suffix.size() || path.compare(0, prefix.size(), prefix) != 0 ||
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    return {};
  std::string id = path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
  return id.find('/') == std::string::npos ? id : std::string();
}

// Waits for the mailbox's next frame; false when `deadline` passed first.
bool next_frame(HttpGateway::Mailbox& box, std::string& frame, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(box.mutex);
  if (!box.arrived.wait_until(lock, deadline, [&] { return !box.frames.empty(); })) return false;
  frame = std::move(box.frames.front());
  box.frames.pop_front();
  return true;
}

}  // namespace

HttpGateway::HttpGateway(HttpOptions options) : options_(std::move(options)) {
  const auto colon = options_.address.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("--http takes HOST:PORT, not '" + options_.address + "'");
  std::string host = options_.address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  int port = 0;
  try {
    port = std::stoi(options_.address.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535) throw std::invalid_argument("--http: '" + options_.address + "' has no valid port");
  // The largest body a ZeroMQ client may send; 413 past it, before it is read.
  options_.server.max_body_bytes = options_.limits.max_message_bytes;
  server_ = std::make_unique<messages::HttpServer>(host, port, options_.server,
                                                   [this](const messages::HttpRequest& q, messages::HttpResponder& r) {
                                                     serve(q, r);
                                                   });
}

HttpGateway::~HttpGateway() { stop(); }

void HttpGateway::start(ingestion_actor ingestion, std::shared_ptr<service::IntakeBacklog> backlog,
                        std::shared_ptr<service::ServiceMetrics> metrics) {
  ingestion_ = std::move(ingestion);
  backlog_ = std::move(backlog);
  metrics_ = std::move(metrics);
  ready_ = true;
  server_->start();
}

void HttpGateway::stop() {
  if (stopping_.exchange(true)) return;
  {
    std::lock_guard lock(mutex_);  // wake every waiting handler: they see no frame and end
    for (auto& [peer, box] : mailboxes_) box->arrived.notify_all();
  }
  server_->stop();
  ingestion_ = ingestion_actor();
}

std::pair<std::string, std::shared_ptr<HttpGateway::Mailbox>> HttpGateway::open() {
  std::string peer("\0http/", 6);
  peer += std::to_string(next_++);
  auto box = std::make_shared<Mailbox>();
  std::lock_guard lock(mutex_);
  mailboxes_[peer] = box;
  return {peer, box};
}

void HttpGateway::close(const std::string& peer, bool cancel) {
  {
    std::lock_guard lock(mutex_);
    mailboxes_.erase(peer);
  }
  // The connection went before its answer ended: as a dead ZeroMQ client,
  // its request ends and its pages go back.
  if (cancel && ingestion_) caf::anon_send(ingestion_, gone_atom::value, peer);
}

void HttpGateway::deliver(const std::string& peer, const messages::Bytes& frame) {
  std::shared_ptr<Mailbox> box;
  {
    std::lock_guard lock(mutex_);
    auto it = mailboxes_.find(peer);
    if (it == mailboxes_.end()) return;
    box = it->second;
  }
  std::lock_guard lock(box->mutex);
  box->frames.push_back(frame);
  box->arrived.notify_one();
}

// As the ZeroMQ gateway routes a frame (service/intake.h): refused at once
// when the backlog is full, else to ingestion.
bool HttpGateway::submit(const std::string& peer, const std::string& client, const std::string& bytes,
                         std::string& refusal) {
  if (stopping()) return refusal = messages::error_response(1, wire::ErrorCode::shutting_down, "the server is stopping"), false;
  service::IntakeDecision d = service::classify_frame(bytes, options_.limits, *backlog_);
  if (d.lane == service::IntakeLane::answered) return refusal = d.reply, false;
  if (d.lane == service::IntakeLane::prompt)
    caf::anon_send(ingestion_, request_atom::value, peer, client, bytes, true);
  else
    caf::anon_send<caf::message_priority::high>(ingestion_, request_atom::value, peer, client, bytes, false);
  return true;
}

std::string HttpGateway::ask(const std::string& bytes, const std::string& client) {
  auto [peer, box] = open();
  std::string frame;
  if (submit(peer, client, bytes, frame) && !next_frame(*box, frame, std::chrono::steady_clock::now() + kControlTimeout))
    frame.clear();
  close(peer, false);
  return frame;  // a refusal, the answer, or "" when none came
}

// `Authorization: Bearer TOKEN`, as OpenAI's clients send their api_key.
bool HttpGateway::authorize(const messages::HttpRequest& req, messages::HttpResponder& res, std::string& client) {
  client.clear();
  if (!options_.clients) {
    client = "host:" + req.peer_address;  // its fair share without authentication, as over ZeroMQ's TCP
    return true;
  }
  const std::string header = req.header("Authorization");
  const messages::ClientPolicy* who = nullptr;
  if (const std::string_view token = service::bearer_token(header); !token.empty())
    who = options_.clients->by_http_token(std::string(token));
  if (who) {
    client = who->name;
    return true;
  }
  send_error(res, service::ApiError{401,
                                    header.empty() ? "this server takes requests with a bearer token (Authorization: "
                                                     "Bearer TOKEN; `troupe keygen --http-token`)"
                                                   : "the bearer token is not one this server admits",
                                    "", "invalid_api_key"},
             {{"WWW-Authenticate", "Bearer"}});
  return false;
}

int HttpGateway::completion(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client,
                            bool chat) {
  if (draining_) return send_error(res, service::api_error(wire::ErrorCode::shutting_down, "the server is draining"));
  auto parsed = service::parse_completion(req.body, chat, req.header("X-Troupe-Session"), options_.models,
                                          options_.limits.max_tokens);
  if (auto* e = std::get_if<service::ApiError>(&parsed)) return send_error(res, *e);
  const service::CompletionCall call = std::get<service::CompletionCall>(std::move(parsed));
  auto [peer, box] = open();
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(unix_now()) + "-" + peer.substr(6);
  service::CompletionReply reply(call, id, unix_now(), options_.tokenizer.get());
  std::string first;
  if (const int status = start_request(peer, *box, client, call.request, reply, res, first)) return status;
  return relay(peer, *box, first, reply, call.stream, res);
}

int HttpGateway::start_request(const std::string& peer, Mailbox& box, const std::string& client,
                               const messages::Bytes& request, service::FrameReply& reply, messages::HttpResponder& res,
                               std::string& first) {
  if (!submit(peer, client, request, first)) {
    close(peer, false);
    std::string ignored;
    reply.take(first, ignored);
    return send_error(res, reply.error());
  }
  if (!first_frame(box, res, first)) {
    close(peer, true);
    return send_error(res, service::api_error(wire::ErrorCode::shutting_down, "the server is stopping"));
  }
  return 0;
}

// A client that leaves while its request waits ends it, as a dead ZeroMQ client.
bool HttpGateway::first_frame(Mailbox& box, messages::HttpResponder& res, std::string& frame) {
  for (auto deadline = std::chrono::steady_clock::now() + 1h; std::chrono::steady_clock::now() < deadline;) {
    if (next_frame(box, frame, std::chrono::steady_clock::now() + 1s)) return true;
    if (stopping() || !res.connected()) return false;
  }
  return false;
}

int HttpGateway::relay(const std::string& peer, Mailbox& box, const std::string& first, service::FrameReply& reply,
                       bool stream, messages::HttpResponder& res) {
  using Step = service::FrameReply::Step;
  // The first frame decides the status: Accepted, or the Error refusing it.
  std::string sse;
  auto step = reply.take(first, sse);
  if (step == Step::failed) {
    close(peer, false);
    return send_error(res, reply.error());
  }
  if (!stream) {
    std::string frame;
    while (step == Step::more) {
      if (!next_frame(box, frame, std::chrono::steady_clock::now() + 1s)) {
        if (stopping() || !res.connected()) break;
        continue;
      }
      step = reply.take(frame, sse);
    }
    close(peer, step == Step::more);
    if (step == Step::failed) return send_error(res, reply.error());
    if (step != Step::done)
      return send_error(res, service::api_error(wire::ErrorCode::shutting_down, "the server is stopping"));
    res.send(200, "application/json", reply.whole());
    return 200;
  }
  // Streaming: each wake-up writes what arrived; a client that is gone ends the request.
  if (!res.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}})) {
    close(peer, true);
    return 200;
  }
  std::string frame;
  bool open_connection = true;
  while (open_connection) {
    if (!sse.empty() && !res.write(sse)) open_connection = false;
    sse.clear();
    if (!open_connection || step != Step::more) break;
    if (next_frame(box, frame, std::chrono::steady_clock::now() + 200ms)) step = reply.take(frame, sse);
    else if (stopping() || !res.connected()) open_connection = false;
  }
  close(peer, step == Step::more);
  if (!open_connection) return 200;
  if (step == Step::done) res.write(reply.sse_end());
  else if (step == Step::failed) res.write(reply.sse_error());  // e.g. the server drains mid-stream
  res.end_stream();
  return 200;
}

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
  res.send(200, "application/json", json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump());
  return 200;
}

namespace {

// The answer's body when it is one of `type`; otherwise (an Error, none) the
// HTTP error it makes, in `error`.
const wire::Response* answered(const std::string& frame, wire::ResponseBody type, service::ApiError& error) {
  const auto* r = frame.empty() ? nullptr : messages::check_response(frame);
  if (r && r->body_type() == type) return r;
  if (!r) error = service::ApiError{504, "the server did not answer in time", "", "timeout"};
  else if (const auto* e = r->body_as_Error())
    error = service::api_error(e->code(), e->message() ? e->message()->str() : "");
  else error = service::ApiError{500, "an unexpected answer", "", "internal"};
  return nullptr;
}
// The answer points into the frame: never a temporary's.
const wire::Response* answered(std::string&& frame, wire::ResponseBody type, service::ApiError& error) = delete;

}  // namespace

// POST /v1/files: a multipart upload (purpose batch), stored before it is answered.
int HttpGateway::upload(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client) {
  auto form = service::read_multipart(req.header("Content-Type"), req.body);
  if (auto* e = std::get_if<service::ApiError>(&form)) return send_error(res, *e);
  auto& fields = std::get<0>(form);
  const auto purpose = fields.find("purpose"), file = fields.find("file");
  if (purpose == fields.end() || purpose->second.data != "batch")
    return send_error(res, service::ApiError{400, "troupe stores files for batches: purpose must be batch", "purpose",
                                             "invalid_field"});
  if (file == fields.end() || file->second.data.empty())
    return send_error(res, service::ApiError{400, "the upload has no file, or an empty one", "file", "invalid_field"});
  // The frame that stores it must fit the server's message limit, as the HTTP body did.
  if (file->second.data.size() + 1024 > options_.limits.max_message_bytes)
    return send_error(res, service::ApiError{413, "the file has " + std::to_string(file->second.data.size()) +
                                                     " bytes; this server stores files of at most " +
                                                     std::to_string(options_.limits.max_message_bytes - 1024),
                                             "file", "too_long"});
  service::ApiError error;
  const std::string frame = ask(messages::put_file_request(1, "batch", file->second.filename, file->second.data), client);
  const auto* r = answered(frame, wire::ResponseBody::FileInfo, error);
  if (!r) return send_error(res, error);
  res.send(200, "application/json", service::file_object(messages::read_file_info(r->body_as_FileInfo())));
  return 200;
}

// POST /v1/batches: the input file read and every line checked, then one durable job.
int HttpGateway::create_batch(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client) {
  if (draining_) return send_error(res, service::api_error(wire::ErrorCode::shutting_down, "the server is draining"));
  std::string input;
  auto note = service::batch_annotation(req.body, input);
  if (auto* e = std::get_if<service::ApiError>(&note)) return send_error(res, *e);
  service::ApiError error;
  const std::string frame = ask(messages::get_file_request(1, input, true), client);
  const auto* r = answered(frame, wire::ResponseBody::FileInfo, error);
  if (!r) {
    error.param = "input_file_id";
    return send_error(res, error);
  }
  const auto* data = r->body_as_FileInfo()->data();
  const std::string_view jsonl = data ? std::string_view(reinterpret_cast<const char*>(data->data()), data->size()) : "";
  const std::string endpoint = nlohmann::json::parse(std::get<std::string>(note))["endpoint"];
  auto lines = service::read_batch_lines(jsonl, endpoint, options_.models, options_.limits.max_tokens,
                                         options_.limits.max_job_items);
  if (auto* e = std::get_if<service::ApiError>(&lines)) return send_error(res, *e);
  const auto& l = std::get<service::BatchLines>(lines);
  const messages::Bytes submit = messages::submit_requests_job(1, l.custom_ids, l.requests, std::get<std::string>(note));
  if (submit.size() > options_.limits.max_message_bytes)
    return send_error(res, service::ApiError{413, "the batch's requests take " + std::to_string(submit.size()) +
                                                      " bytes; at most " +
                                                      std::to_string(options_.limits.max_message_bytes),
                                             "input_file_id", "too_long"});
  const std::string submitted = ask(submit, client);
  const auto* accepted = answered(submitted, wire::ResponseBody::JobAccepted, error);
  if (!accepted) return send_error(res, error);
  res.send(200, "application/json", service::batch_object(messages::read_job_summary(accepted->body_as_JobAccepted()->job())));
  return 200;
}

// An output or error file: the batch's stored results, as JSONL.
int HttpGateway::batch_file(const std::string& job, bool errors, messages::HttpResponder& res, const std::string& client) {
  service::ApiError error;
  const std::string results_frame = ask(messages::job_results_request(1, job), client);
  const auto* r = answered(results_frame, wire::ResponseBody::JobReply, error);
  if (!r) return send_error(res, error);
  const auto summary = messages::read_job_summary(r->body_as_JobReply()->job());
  std::vector<messages::JobItemFields> results;
  if (const auto* list = r->body_as_JobReply()->results())
    for (const auto* x : *list) results.push_back(messages::read_job_item(x));
  if (!service::is_batch(summary)) return send_error(res, service::ApiError{404, "no such file", "", "not_found"});
  res.send(200, "application/jsonl", service::batch_results(summary, results, errors, options_.models.empty() ? "" : options_.models.front()));
  return 200;
}

int HttpGateway::batch_api(const messages::HttpRequest& q, messages::HttpResponder& r, const std::string& client) {
  const std::string& path = q.path;
  const bool get = q.method == "GET", post = q.method == "POST", del = q.method == "DELETE";
  service::ApiError error;
  // A job's answer as the batch it is (a plain job is no batch).
  auto batch_answer = [&](const std::string& frame, wire::ResponseBody type) {
    const auto* a = answered(frame, type, error);
    if (!a) return send_error(r, error);
    const auto job = messages::read_job_summary(type == wire::ResponseBody::JobReply ? a->body_as_JobReply()->job()
                                                                                       : a->body_as_JobAccepted()->job());
    if (!service::is_batch(job)) return send_error(r, service::ApiError{404, "no such batch", "", "not_found"});
    r.send(200, "application/json", service::batch_object(job));
    return 200;
  };
  // Asks, and answers 200 with what `body` makes of the answer (else the answer's error).
  const auto reply = [&](const messages::Bytes& request, wire::ResponseBody type, const char* content_type,
                         const std::function<std::string(const wire::Response&)>& body) {
    const std::string frame = ask(request, client);
    const auto* a = answered(frame, type, error);
    if (!a) return send_error(r, error);
    r.send(200, content_type, body(*a));
    return 200;
  };
  using Body = wire::ResponseBody;
  if (path == "/v1/files") {
    if (post) return upload(q, r, client);
    if (!get) return 0;
    return reply(messages::list_files_request(1), Body::FileList, "application/json",
                 [](const wire::Response& a) { return service::file_list(*a.body_as_FileList()); });
  }
  if (const std::string id = path_id(path, "/v1/files/", "/content"); !id.empty() && get) {
    bool errors = false;
    if (const std::string job = service::job_of_output(id, errors); !job.empty()) return batch_file(job, errors, r, client);
    return reply(messages::get_file_request(1, id, true), Body::FileInfo, "application/octet-stream",
                 [](const wire::Response& a) {
                   const auto* data = a.body_as_FileInfo()->data();
                   return data ? std::string(data->begin(), data->end()) : std::string();
                 });
  }
  if (const std::string id = path_id(path, "/v1/files/"); !id.empty() && del)
    return reply(messages::delete_file_request(1, id), Body::Ack, "application/json", [&](const wire::Response&) {
      return nlohmann::json{{"id", id}, {"object", "file"}, {"deleted", true}}.dump();
    });
  if (const std::string id = path_id(path, "/v1/files/"); !id.empty() && get)
    return reply(messages::get_file_request(1, id, false), Body::FileInfo, "application/json",
                 [](const wire::Response& a) { return service::file_object(messages::read_file_info(a.body_as_FileInfo())); });
  if (path == "/v1/batches") {
    if (post) return create_batch(q, r, client);
    if (!get) return 0;
    return reply(messages::list_jobs_request(1), Body::JobList, "application/json",
                 [](const wire::Response& a) { return service::batch_list(*a.body_as_JobList()); });
  }
  if (const std::string id = path_id(path, "/v1/batches/", "/cancel"); !id.empty() && post) {
    const std::string job = service::job_of_batch(id);
    if (job.empty()) return send_error(r, service::ApiError{404, "no such batch", "", "not_found"});
    return batch_answer(ask(messages::cancel_job_request(1, job), client), wire::ResponseBody::JobReply);
  }
  if (const std::string id = path_id(path, "/v1/batches/"); !id.empty() && get) {
    const std::string job = service::job_of_batch(id);
    if (job.empty()) return send_error(r, service::ApiError{404, "no such batch", "", "not_found"});
    return batch_answer(ask(messages::job_status_request(1, job), client), wire::ResponseBody::JobReply);
  }
  return 0;
}

int HttpGateway::metrics(messages::HttpResponder& res) {
  service::Snapshot now;
  const std::string frame = ask(messages::stats_request(1), options_.clients ? service::kGatewayStats : "");
  const auto* r = frame.empty() ? nullptr : messages::check_response(frame);
  if (!r || r->body_type() != wire::ResponseBody::StatsReply) {
    res.send(503, "text/plain", "# the scheduler did not answer\n");
    return 503;
  }
  // Read whole: a figure copied field by field here is one /metrics can lose (the tiers were).
  now.stats = messages::read_stats(*r->body_as_StatsReply());
  now.stats.draining = draining_ || now.stats.draining;
  std::string text = metrics_->prometheus(now);
  const messages::HttpServerCounts c = server_->counts();
  text += service::http_front_door_metrics({c.open, c.refused_connections, c.header_timeouts, c.body_timeouts,
                                            c.idle_closed, c.too_large, c.bad_requests});
  res.send(200, "text/plain; version=0.0.4; charset=utf-8", text);
  return 200;
}

// Job events: the job's results read every half second, each new item an
// `item` event, then `end` with the job once it is no longer running.
int HttpGateway::job_events(const std::string& id, messages::HttpResponder& res, const std::string& client) {
  const service::HttpAnswer first = service::troupe_answer(ask(messages::job_results_request(1, id), client));
  if (first.status != 200) {
    res.send(first.status, "application/json", first.json);
    return first.status;
  }
  if (!res.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return 200;
  std::set<int> seen;
  std::string body = first.json;
  for (;;) {
    if (body.empty()) {
      std::this_thread::sleep_for(500ms);
      if (!res.connected() || stopping()) return 200;
      body = service::troupe_answer(ask(messages::job_results_request(1, id), client)).json;
    }
    json j = json::parse(std::exchange(body, {}), nullptr, false);
    if (j.is_discarded() || j.contains("error")) return 200;
    std::string out;
    json summary = j;
    summary.erase("results");
    for (const auto& item : j.value("results", json::array()))
      if (seen.insert(item.value("index", -1)).second) {
        json e = item;
        e["job"] = summary;
        out += "event: item\ndata: " + e.dump() + "\n\n";
      }
    const bool ended = j.value("state", "running") != "running";
    if (ended) out += "event: end\ndata: " + summary.dump() + "\n\n";
    if (!out.empty() && !res.write(out)) return 200;
    if (ended) {
      res.end_stream();
      return 200;
    }
  }
}

namespace {


}  // namespace

void HttpGateway::serve(const messages::HttpRequest& req, messages::HttpResponder& res) {
  const int status = route(req, res);
  if (status == 0) send_error(res, service::ApiError{404, "no such endpoint", "", "not_found"});
}

int HttpGateway::route(const messages::HttpRequest& q, messages::HttpResponder& r) {
  const std::string& path = q.path;
  const bool get = q.method == "GET", post = q.method == "POST", del = q.method == "DELETE";
  // Open, as vLLM's and llama-server's are: aggregate figures, no client's content.
  if (get && path == "/metrics") return count("/metrics", metrics(r));
  if (get && path == "/healthz") return r.send(200, "text/plain", "ok\n"), 200;
  // A store that refuses writes leaves the server ready: it still streams
  // every answer that needs no write (docs/DECISIONS.md, "Storage errors").
  if (get && path == "/readyz") {
    const bool ok = ready_ && !draining_;
    std::string body = ok ? "ready\n" : draining_ ? "draining\n" : "starting\n";
    if (const auto store = metrics_ ? metrics_->store_state() : service::StoreState{}; store.known && !store.writable)
      body += "store degraded: " + store.reason + "\n";
    r.send(ok ? 200 : 503, "text/plain", body);
    return ok ? 200 : 503;
  }
  // The page is public; what it shows comes from /v1/, with the token typed into it.
  if (get && path == "/") return r.send(200, "text/html; charset=utf-8", web_page()), 200;
  if (path.rfind("/v1/", 0) != 0) return 0;

  // Every /v1/ route: the bearer token's client (under --auth), counted by route.
  std::string client;
  const auto api = [&](const char* name, const std::function<int()>& handler) {
    return count(name, authorize(q, r, client) ? handler() : 401);
  };
  // Sessions and jobs: answered as the client (its own, or all for an admin).
  const auto answer = [&](const std::string& request) {
    const service::HttpAnswer a = service::troupe_answer(ask(request, client));
    r.send(a.status, "application/json", a.json);
    return a.status;
  };
  if (post && path == "/v1/chat/completions") return api("/v1/chat/completions", [&] { return completion(q, r, client, true); });
  if (post && path == "/v1/responses") return api("/v1/responses", [&] { return respond(q, r, client); });
  if (const std::string rid = path_id(path, "/v1/responses/"); !rid.empty() && (get || del))
    return api("/v1/responses/ID", [&] { return stored_response(rid, del, r, client); });
  if (path.starts_with("/v1/files") || path.starts_with("/v1/batches")) {
    std::string who;
    if (!authorize(q, r, who)) return count(path.starts_with("/v1/files") ? "/v1/files" : "/v1/batches", 401);
    const int status = batch_api(q, r, who);
    return status == 0 ? 0 : count(path.starts_with("/v1/files") ? "/v1/files" : "/v1/batches", status);
  }
  if (post && path == "/v1/completions") return api("/v1/completions", [&] { return completion(q, r, client, false); });
  if (get && path == "/v1/models")
    return api("/v1/models", [&] {
      json data = json::array();
      for (const auto& m : options_.models) data.push_back({{"id", m}, {"object", "model"}, {"created", 0}, {"owned_by", "troupe"}});
      r.send(200, "application/json", json{{"object", "list"}, {"data", data}}.dump());
      return 200;
    });
  if (get && path == "/v1/troupe/stats")
    return api("/v1/troupe/stats", [&] {
      const std::string frame = ask(messages::stats_request(1), client);
      const auto* resp = frame.empty() ? nullptr : messages::check_response(frame);
      if (!resp || resp->body_type() != wire::ResponseBody::StatsReply)
        return send_error(r, service::api_error(wire::ErrorCode::internal, "the scheduler did not answer"));
      messages::StatsFields stats = messages::read_stats(*resp->body_as_StatsReply());
      stats.draining = draining_.load();
      r.send(200, "application/json", service::stats_json(stats));
      return 200;
    });
  if (get && path == "/v1/troupe/sessions")
    return api("/v1/troupe/sessions", [&] { return answer(messages::list_sessions_request(1)); });
  if (const std::string sid = path_id(path, "/v1/troupe/sessions/"); !sid.empty()) {
    if (get) return api("/v1/troupe/sessions/ID", [&] { return answer(messages::show_session_request(1, sid)); });
    if (del) return api("/v1/troupe/sessions/ID", [&] { return answer(messages::delete_session_request(1, sid)); });
  }
  if (post && path == "/v1/troupe/jobs")
    return api("/v1/troupe/jobs", [&] {
      if (draining_) return send_error(r, service::api_error(wire::ErrorCode::shutting_down, "the server is draining"));
      auto parsed = service::parse_job_submission(q.body, options_.limits.max_tokens);
      if (auto* e = std::get_if<service::ApiError>(&parsed)) return send_error(r, *e);
      return answer(std::get<messages::Bytes>(parsed));
    });
  if (get && path == "/v1/troupe/jobs") return api("/v1/troupe/jobs", [&] { return answer(messages::list_jobs_request(1)); });
  if (const std::string jid = path_id(path, "/v1/troupe/jobs/", "/events"); !jid.empty() && get) {
    std::string who;
    if (!authorize(q, r, who)) return 401;
    return job_events(jid, r, who);
  }
  if (const std::string jid = path_id(path, "/v1/troupe/jobs/"); !jid.empty()) {
    if (get) return api("/v1/troupe/jobs/ID", [&] { return answer(messages::job_results_request(1, jid)); });
    if (del) return api("/v1/troupe/jobs/ID", [&] { return answer(messages::cancel_job_request(1, jid)); });
  }
  return 0;
}

int HttpGateway::count(const char* route, int status) {
  if (metrics_ && status != 0) metrics_->http_request(route, status);
  return status;
}

}  // namespace troupe::actors
