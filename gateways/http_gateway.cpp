#include "gateways/http_gateway.h"

#include "gateways/http_answers.h"

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
#include "service/openai_api.h"
#include "service/request_gate.h"
#include "service/troupe_api.h"
#include "gateways/web/web_page.h"

namespace troupe::gateways {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kControlTimeout = 10s;

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

void HttpGateway::start(std::shared_ptr<FrameIntake> intake, std::shared_ptr<service::IntakeBacklog> backlog,
                        std::shared_ptr<service::ServiceMetrics> metrics) {
  intake_ = std::move(intake);
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
  intake_.reset();  // the last hold on the ingestion actor: the actor system can stop
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
  if (cancel && intake_) intake_->gone(peer);
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
// when the backlog is full, else to the intake.
bool HttpGateway::submit(const std::string& peer, const std::string& client, const std::string& bytes,
                         std::string& refusal) {
  if (stopping()) return refusal = messages::error_response(1, wire::ErrorCode::shutting_down, "the server is stopping"), false;
  service::IntakeDecision d = service::classify_frame(bytes, options_.limits, *backlog_);
  if (d.lane == service::IntakeLane::answered) return refusal = d.reply, false;
  intake_->frame(ClientFrame{peer, client, bytes, d.lane == service::IntakeLane::prompt});
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

void HttpGateway::serve(const messages::HttpRequest& req, messages::HttpResponder& res) {
  const int status = route(req, res);
  if (status == 0) send_error(res, service::ApiError{404, "no such endpoint", "", "not_found"});
}

int HttpGateway::route(const messages::HttpRequest& q, messages::HttpResponder& r) {
  if (const int status = open_route(q, r)) return status;
  if (!q.path.starts_with("/v1/")) return 0;
  // Every /v1/ route: the bearer token's client (under --auth), counted by route.
  V1Call call{q, r, {}};
  return q.path.starts_with("/v1/troupe/") ? troupe_route(call) : openai_route(call);
}

// Open, as vLLM's and llama-server's are: aggregate figures, no client's content.
int HttpGateway::open_route(const messages::HttpRequest& q, messages::HttpResponder& r) {
  if (q.method != "GET") return 0;
  if (q.path == "/metrics") return count("/metrics", metrics(r));
  if (q.path == "/healthz") return r.send(200, "text/plain", "ok\n"), 200;
  if (q.path == "/readyz") return readiness(r);
  // The page is public; what it shows comes from /v1/, with the token typed into it.
  if (q.path == "/") return r.send(200, "text/html; charset=utf-8", web_page()), 200;
  return 0;
}

// A store that refuses writes leaves the server ready: it still streams
// every answer that needs no write (docs/DECISIONS.md, "Storage errors").
int HttpGateway::readiness(messages::HttpResponder& r) {
  const bool ok = ready_ && !draining_;
  std::string body = ok ? "ready\n" : draining_ ? "draining\n" : "starting\n";
  if (const auto store = metrics_ ? metrics_->store_state() : service::StoreState{}; store.known && !store.writable)
    body += "store degraded: " + store.reason + "\n";
  r.send(ok ? 200 : 503, "text/plain", body);
  return ok ? 200 : 503;
}

int HttpGateway::api(V1Call& call, const char* name, const std::function<int()>& handler) {
  return count(name, authorize(call.q, call.r, call.client) ? handler() : 401);
}

// Sessions and jobs: answered as the client (its own, or all for an admin).
int HttpGateway::answer(V1Call& call, const std::string& request) {
  const service::HttpAnswer a = service::troupe_answer(ask(request, call.client));
  call.r.send(a.status, "application/json", a.json);
  return a.status;
}

int HttpGateway::openai_route(V1Call& call) {
  const messages::HttpRequest& q = call.q;
  messages::HttpResponder& r = call.r;
  const std::string& path = q.path;
  const bool get = q.method == "GET", post = q.method == "POST", del = q.method == "DELETE";
  if (post && path == "/v1/chat/completions")
    return api(call, "/v1/chat/completions", [&] { return completion(q, r, call.client, true); });
  if (post && path == "/v1/responses") return api(call, "/v1/responses", [&] { return respond(q, r, call.client); });
  if (const std::string rid = path_id(path, "/v1/responses/"); !rid.empty() && (get || del))
    return api(call, "/v1/responses/ID", [&] { return stored_response(rid, del, r, call.client); });
  if (path.starts_with("/v1/files") || path.starts_with("/v1/batches")) return files_or_batches(q, r);
  if (post && path == "/v1/completions")
    return api(call, "/v1/completions", [&] { return completion(q, r, call.client, false); });
  if (get && path == "/v1/models") return api(call, "/v1/models", [&] { return list_models(r); });
  return 0;
}

int HttpGateway::files_or_batches(const messages::HttpRequest& q, messages::HttpResponder& r) {
  const char* name = q.path.starts_with("/v1/files") ? "/v1/files" : "/v1/batches";
  std::string who;
  if (!authorize(q, r, who)) return count(name, 401);
  const int status = batch_api(q, r, who);
  return status == 0 ? 0 : count(name, status);
}

int HttpGateway::list_models(messages::HttpResponder& r) {
  json data = json::array();
  for (const auto& m : options_.models) data.push_back({{"id", m}, {"object", "model"}, {"created", 0}, {"owned_by", "troupe"}});
  r.send(200, "application/json", json{{"object", "list"}, {"data", data}}.dump());
  return 200;
}

int HttpGateway::troupe_route(V1Call& call) {
  const messages::HttpRequest& q = call.q;
  const std::string& path = q.path;
  const bool get = q.method == "GET", post = q.method == "POST", del = q.method == "DELETE";
  if (get && path == "/v1/troupe/stats") return api(call, "/v1/troupe/stats", [&] { return troupe_stats(call); });
  if (get && path == "/v1/troupe/sessions")
    return api(call, "/v1/troupe/sessions", [&] { return answer(call, messages::list_sessions_request(1)); });
  if (const std::string sid = path_id(path, "/v1/troupe/sessions/"); !sid.empty()) {
    if (get) return api(call, "/v1/troupe/sessions/ID", [&] { return answer(call, messages::show_session_request(1, sid)); });
    if (del) return api(call, "/v1/troupe/sessions/ID", [&] { return answer(call, messages::delete_session_request(1, sid)); });
  }
  if (post && path == "/v1/troupe/jobs") return api(call, "/v1/troupe/jobs", [&] { return submit_job(call); });
  if (get && path == "/v1/troupe/jobs")
    return api(call, "/v1/troupe/jobs", [&] { return answer(call, messages::list_jobs_request(1)); });
  if (const std::string jid = path_id(path, "/v1/troupe/jobs/", "/events"); !jid.empty() && get) {
    std::string who;
    if (!authorize(q, call.r, who)) return 401;
    return job_events(jid, call.r, who);
  }
  if (const std::string jid = path_id(path, "/v1/troupe/jobs/"); !jid.empty()) {
    if (get) return api(call, "/v1/troupe/jobs/ID", [&] { return answer(call, messages::job_results_request(1, jid)); });
    if (del) return api(call, "/v1/troupe/jobs/ID", [&] { return answer(call, messages::cancel_job_request(1, jid)); });
  }
  return 0;
}

int HttpGateway::troupe_stats(V1Call& call) {
  const std::string frame = ask(messages::stats_request(1), call.client);
  const auto* resp = frame.empty() ? nullptr : messages::check_response(frame);
  if (!resp || resp->body_type() != wire::ResponseBody::StatsReply)
    return send_error(call.r, service::api_error(wire::ErrorCode::internal, "the scheduler did not answer"));
  messages::StatsFields stats = messages::read_stats(*resp->body_as_StatsReply());
  stats.draining = draining_.load();
  call.r.send(200, "application/json", service::stats_json(stats));
  return 200;
}

int HttpGateway::submit_job(V1Call& call) {
  if (draining_) return send_error(call.r, service::api_error(wire::ErrorCode::shutting_down, "the server is draining"));
  auto parsed = service::parse_job_submission(call.q.body, options_.limits.max_tokens);
  if (auto* e = std::get_if<service::ApiError>(&parsed)) return send_error(call.r, *e);
  return answer(call, std::get<messages::Bytes>(parsed));
}

int HttpGateway::count(const char* route, int status) {
  if (metrics_ && status != 0) metrics_->http_request(route, status);
  return status;
}

}  // namespace troupe::gateways
