#include "actors/http_gateway.h"

#include <caf/send.hpp>
#include <httplib.h>
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
#include "service/openai_api.h"
#include "service/request_gate.h"
#include "service/troupe_api.h"
#include "actors/web/web_page.h"

namespace troupe::actors {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kControlTimeout = 10s;

void send_error(httplib::Response& res, const service::ApiError& e) {
  res.status = e.status;
  res.set_content(e.json(), "application/json");
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
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

HttpGateway::HttpGateway(HttpOptions options) : options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  const auto colon = options_.address.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("--http takes HOST:PORT, not '" + options_.address + "'");
  std::string host = options_.address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(options_.address.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535) throw std::invalid_argument("--http: '" + options_.address + "' has no valid port");
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // The largest body a ZeroMQ client may send; httplib answers 413 past it.
  server_->set_payload_max_length(options_.limits.max_message_bytes);
  server_->set_keep_alive_max_count(1000);
  server_->set_read_timeout(30, 0);
  server_->set_write_timeout(30, 0);
  routes();
  if (port == 0) {
    port_ = server_->bind_to_any_port(host);
    if (port_ < 0) throw std::runtime_error("--http: cannot bind " + host);
  } else {
    if (!server_->bind_to_port(host, port)) throw std::runtime_error("--http: cannot bind " + options_.address + " (in use?)");
    port_ = port;
  }
}

HttpGateway::~HttpGateway() { stop(); }

void HttpGateway::start(ingestion_actor ingestion, std::shared_ptr<service::IntakeBacklog> backlog,
                        std::shared_ptr<service::ServiceMetrics> metrics) {
  ingestion_ = std::move(ingestion);
  backlog_ = std::move(backlog);
  metrics_ = std::move(metrics);
  ready_ = true;
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

void HttpGateway::stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  {
    std::lock_guard lock(mutex_);  // wake every waiting handler: they see no frame and end
    for (auto& [peer, box] : mailboxes_) box->arrived.notify_all();
  }
  thread_.join();
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
  if (!ingestion_) return refusal = messages::error_response(1, wire::ErrorCode::shutting_down, "the server is stopping"), false;
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
bool HttpGateway::authorize(const httplib::Request& req, httplib::Response& res, std::string& client) const {
  client.clear();
  if (!options_.clients) return true;
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  const messages::ClientPolicy* who = nullptr;
  if (header.size() > kBearer.size() && std::string_view(header).substr(0, kBearer.size()) == kBearer)
    who = options_.clients->by_http_token(header.substr(kBearer.size()));
  if (who) {
    client = who->name;
    return true;
  }
  res.set_header("WWW-Authenticate", "Bearer");
  send_error(res, service::ApiError{401,
                                    header.empty() ? "this server takes requests with a bearer token (Authorization: "
                                                     "Bearer TOKEN; `troupe keygen --http-token`)"
                                                   : "the bearer token is not one this server admits",
                                    "", "invalid_api_key"});
  return false;
}

void HttpGateway::completion(const httplib::Request& req, httplib::Response& res, const std::string& client,
                             bool chat) {
  if (draining_) return send_error(res, service::api_error(wire::ErrorCode::shutting_down, "the server is draining"));
  auto parsed = service::parse_completion(req.body, chat, req.get_header_value("X-Troupe-Session"), options_.models,
                                          options_.limits.max_tokens);
  if (auto* e = std::get_if<service::ApiError>(&parsed)) return send_error(res, *e);
  const service::CompletionCall call = std::get<service::CompletionCall>(std::move(parsed));
  auto [peer, box] = open();
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(unix_now()) + "-" + peer.substr(6);
  auto reply = std::make_shared<service::CompletionReply>(call, id, unix_now());
  std::string refusal;
  if (!submit(peer, client, call.request, refusal)) {
    close(peer, false);
    std::string ignored;
    reply->take(refusal, ignored);
    return send_error(res, reply->error());
  }
  // The first frame decides the status: Accepted, or the Error refusing it.
  std::string first;
  bool got = false;
  for (auto deadline = std::chrono::steady_clock::now() + 1h; !got && std::chrono::steady_clock::now() < deadline;) {
    got = next_frame(*box, first, std::chrono::steady_clock::now() + 1s);
    if (!got && !ingestion_) break;
  }
  if (!got) {
    close(peer, true);
    return send_error(res, service::api_error(wire::ErrorCode::shutting_down, "the server is stopping"));
  }
  std::string sse;
  auto step = reply->take(first, sse);
  if (step == service::CompletionReply::Step::failed) {
    close(peer, false);
    return send_error(res, reply->error());
  }
  if (!call.stream) {
    std::string frame;
    while (step == service::CompletionReply::Step::more) {
      if (!next_frame(*box, frame, std::chrono::steady_clock::now() + 1s)) {
        if (!ingestion_) break;
        continue;
      }
      step = reply->take(frame, sse);
    }
    close(peer, step == service::CompletionReply::Step::more);
    if (step == service::CompletionReply::Step::failed) return send_error(res, reply->error());
    if (step != service::CompletionReply::Step::done)
      return send_error(res, service::api_error(wire::ErrorCode::shutting_down, "the server is stopping"));
    return res.set_content(reply->whole(), "application/json");
  }
  // Streaming: each wake-up writes what arrived; a client that is gone ends the request.
  auto state = std::make_shared<std::pair<service::CompletionReply::Step, std::string>>(step, std::move(sse));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  std::string p = peer;
  std::shared_ptr<Mailbox> b = box;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state, reply, b](size_t, httplib::DataSink& sink) {
        auto& [st, pending] = *state;
        std::string frame;
        while (st == service::CompletionReply::Step::more && pending.empty()) {
          if (next_frame(*b, frame, std::chrono::steady_clock::now() + 200ms)) {
            st = reply->take(frame, pending);
          } else if (!sink.is_writable() || !ingestion_) {
            return false;
          }
        }
        if (!pending.empty() && !sink.write(pending.data(), pending.size())) return false;
        pending.clear();
        if (st == service::CompletionReply::Step::done) {
          const std::string end = reply->sse_end();
          sink.write(end.data(), end.size());
          sink.done();
        } else if (st == service::CompletionReply::Step::failed) {
          // Mid-stream errors (e.g. the server drains) as OpenAI streams them: one error event.
          const std::string e = "data: " + reply->error().json() + "\n\n";
          sink.write(e.data(), e.size());
          sink.done();
        }
        return true;
      },
      [this, state, p](bool) { close(p, state->first == service::CompletionReply::Step::more); });
}

void HttpGateway::metrics(httplib::Response& res) {
  service::Snapshot now;
  const std::string frame = ask(messages::stats_request(1), options_.clients ? service::kGatewayStats : "");
  const auto* r = frame.empty() ? nullptr : messages::check_response(frame);
  if (!r || r->body_type() != wire::ResponseBody::StatsReply) {
    res.status = 503;
    return res.set_content("# the scheduler did not answer\n", "text/plain");
  }
  const auto* s = r->body_as_StatsReply();
  messages::StatsFields& f = now.stats;
  f.running = s->running(), f.waiting = s->waiting();
  f.pages_total = s->pages_total(), f.pages_used = s->pages_used(), f.pages_cached = s->pages_cached();
  f.pages_free = s->pages_free();
  f.steps = s->steps(), f.tokens_generated = s->tokens_generated();
  f.pages_spilled = s->pages_spilled(), f.pages_restored = s->pages_restored();
  f.pages_swapped_out = s->pages_swapped_out(), f.pages_swapped_in = s->pages_swapped_in();
  f.tokens_shifted = s->tokens_shifted(), f.preemptions = s->preemptions();
  if (s->expert_tokens()) f.expert_tokens.assign(s->expert_tokens()->begin(), s->expert_tokens()->end());
  f.local_pages_total = s->local_pages_total(), f.local_pages_used = s->local_pages_used();
  f.draining = draining_ || s->draining();
  res.set_content(metrics_->prometheus(now), "text/plain; version=0.0.4; charset=utf-8");
}

void HttpGateway::routes() {
  httplib::Server& s = *server_;
  // Every /v1/ route: the bearer token's client (under --auth), counted by route.
  using Handler = std::function<void(const httplib::Request&, httplib::Response&, const std::string& client)>;
  auto api = [this](const char* route, Handler handler) {
    return [this, route, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
      std::string client;
      if (authorize(req, res, client)) handler(req, res, client);
      if (metrics_) metrics_->http_request(route, res.status == -1 ? 200 : res.status);
    };
  };
  s.Post("/v1/chat/completions", api("/v1/chat/completions", [this](auto& q, auto& r, auto& c) { completion(q, r, c, true); }));
  s.Post("/v1/completions", api("/v1/completions", [this](auto& q, auto& r, auto& c) { completion(q, r, c, false); }));
  s.Get("/v1/models", api("/v1/models", [this](const httplib::Request&, httplib::Response& r, const std::string&) {
          json data = json::array();
          for (const auto& m : options_.models)
            data.push_back({{"id", m}, {"object", "model"}, {"created", 0}, {"owned_by", "troupe"}});
          r.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
        }));
  s.Get("/v1/troupe/stats", api("/v1/troupe/stats", [this](const httplib::Request&, httplib::Response& r, const std::string& c) {
          const std::string frame = ask(messages::stats_request(1), c);
          const auto* resp = frame.empty() ? nullptr : messages::check_response(frame);
          if (!resp || resp->body_type() != wire::ResponseBody::StatsReply)
            return send_error(r, service::api_error(wire::ErrorCode::internal, "the scheduler did not answer"));
          const auto* st = resp->body_as_StatsReply();
          r.set_content(json{{"model", st->model() ? st->model()->str() : ""},
                             {"running", st->running()},
                             {"waiting", st->waiting()},
                             {"pages_total", st->pages_total()},
                             {"pages_used", st->pages_used()},
                             {"pages_cached", st->pages_cached()},
                             {"pages_free", st->pages_free()},
                             {"local_pages_total", st->local_pages_total()},
                             {"local_pages_used", st->local_pages_used()},
                             {"steps", st->steps()},
                             {"tokens_generated", st->tokens_generated()},
                             {"pages_spilled", st->pages_spilled()},
                             {"pages_restored", st->pages_restored()},
                             {"preemptions", st->preemptions()},
                             {"draining", draining_.load()}}
                            .dump(),
                        "application/json");
        }));
  // Sessions and jobs: answered as the client (its own, or all for an admin).
  auto answer = [this](httplib::Response& r, const std::string& request, const std::string& client) {
    const service::HttpAnswer a = service::troupe_answer(ask(request, client));
    r.status = a.status;
    r.set_content(a.json, "application/json");
  };
  s.Get("/v1/troupe/sessions", api("/v1/troupe/sessions", [answer](auto&, auto& r, auto& c) {
          answer(r, messages::list_sessions_request(1), c);
        }));
  s.Get(R"(/v1/troupe/sessions/([^/]+))", api("/v1/troupe/sessions/ID", [answer](auto& q, auto& r, auto& c) {
          answer(r, messages::show_session_request(1, q.matches[1].str()), c);
        }));
  s.Delete(R"(/v1/troupe/sessions/([^/]+))", api("/v1/troupe/sessions/ID", [answer](auto& q, auto& r, auto& c) {
             answer(r, messages::delete_session_request(1, q.matches[1].str()), c);
           }));
  s.Post("/v1/troupe/jobs", api("/v1/troupe/jobs", [this, answer](auto& q, auto& r, auto& c) {
           if (draining_) return send_error(r, service::api_error(wire::ErrorCode::shutting_down, "the server is draining"));
           auto parsed = service::parse_job_submission(q.body, options_.limits.max_tokens);
           if (auto* e = std::get_if<service::ApiError>(&parsed)) return send_error(r, *e);
           answer(r, std::get<messages::Bytes>(parsed), c);
         }));
  s.Get("/v1/troupe/jobs", api("/v1/troupe/jobs", [answer](auto&, auto& r, auto& c) {
          answer(r, messages::list_jobs_request(1), c);
        }));
  s.Get(R"(/v1/troupe/jobs/([^/]+))", api("/v1/troupe/jobs/ID", [answer](auto& q, auto& r, auto& c) {
          answer(r, messages::job_results_request(1, q.matches[1].str()), c);
        }));
  s.Delete(R"(/v1/troupe/jobs/([^/]+))", api("/v1/troupe/jobs/ID", [answer](auto& q, auto& r, auto& c) {
             answer(r, messages::cancel_job_request(1, q.matches[1].str()), c);
           }));
  // Job events: the job's results read every half second, each new item an
  // `item` event, then `end` with the job once it is no longer running.
  s.Get(R"(/v1/troupe/jobs/([^/]+)/events)", [this](const httplib::Request& q, httplib::Response& r) {
    std::string client;
    if (!authorize(q, r, client)) return;
    const std::string id = q.matches[1].str();
    const service::HttpAnswer first = service::troupe_answer(ask(messages::job_results_request(1, id), client));
    if (first.status != 200) {
      r.status = first.status;
      return r.set_content(first.json, "application/json");
    }
    r.set_header("Cache-Control", "no-cache");
    auto seen = std::make_shared<std::set<int>>();
    auto pending = std::make_shared<std::string>(first.json);
    r.set_chunked_content_provider("text/event-stream", [this, id, client, seen, pending](size_t, httplib::DataSink& sink) {
      std::string body = std::exchange(*pending, {});
      if (body.empty()) {
        std::this_thread::sleep_for(500ms);
        if (!sink.is_writable() || !ingestion_) return false;
        body = service::troupe_answer(ask(messages::job_results_request(1, id), client)).json;
      }
      json j = json::parse(body, nullptr, false);
      if (j.is_discarded() || j.contains("error")) return false;
      std::string out;
      json summary = j;
      summary.erase("results");
      for (const auto& item : j.value("results", json::array()))
        if (seen->insert(item.value("index", -1)).second) {
          json e = item;
          e["job"] = summary;
          out += "event: item\ndata: " + e.dump() + "\n\n";
        }
      const bool ended = j.value("state", "running") != "running";
      if (ended) out += "event: end\ndata: " + summary.dump() + "\n\n";
      if (!out.empty() && !sink.write(out.data(), out.size())) return false;
      if (ended) sink.done();
      return true;
    });
  });
  // Open, as vLLM's and llama-server's are: aggregate figures, no client's content.
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
    metrics(r);
    if (metrics_) metrics_->http_request("/metrics", r.status == -1 ? 200 : r.status);
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& r) { r.set_content("ok\n", "text/plain"); });
  s.Get("/readyz", [this](const httplib::Request&, httplib::Response& r) {
    const bool ok = ready_ && !draining_;
    r.status = ok ? 200 : 503;
    r.set_content(ok ? "ready\n" : draining_ ? "draining\n" : "starting\n", "text/plain");
  });
  // The page is public; what it shows comes from /v1/, with the token typed into it.
  s.Get("/", [](const httplib::Request&, httplib::Response& r) {
    r.set_content(std::string(web_page()), "text/html; charset=utf-8");
  });
  // Anything else: OpenAI's error object, not httplib's bare status.
  s.set_error_handler([](const httplib::Request&, httplib::Response& r) {
    if (!r.body.empty()) return;
    const std::string why = r.status == 413 ? "the request body is larger than the server takes"
                            : r.status == 404 ? "no such endpoint"
                                              : "the request could not be served";
    service::ApiError e{r.status, why, "", r.status == 413 ? "too_long" : r.status == 404 ? "not_found" : ""};
    r.set_content(e.json(), "application/json");
  });
}

}  // namespace troupe::actors
