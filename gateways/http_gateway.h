#pragma once
// The HTTP port beside the ZeroMQ socket (docs/HTTP.md): OpenAI's chat and
// completions API, Prometheus /metrics, health, and the web page. Each HTTP
// request becomes the client Request a ZeroMQ client would send, under a
// peer id of its own, and goes to the service's intake as socket frames do;
// the responses come back through Replies into that request's mailbox. So
// the scheduler never knows HTTP, and a dropped connection is a gone peer:
// its request is cancelled and its pages freed. The connections themselves
// are messages::HttpServer's: event-driven, with deadlines and caps that
// hold before any handler runs.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gateways/frame_intake.h"
#include "engine/chat_template.h"
#include "messages/client_validation.h"
#include "messages/http_server.h"
#include "service/intake.h"
#include "service/metrics.h"

namespace troupe {
class Tokenizer;
}

namespace troupe::messages {
class ClientDirectory;
}

namespace troupe::service {
class FrameReply;
}

namespace troupe::gateways {

// HTTP peers: "\0http/N", never a ZeroMQ routing id (see admit_request.h).
inline bool is_http_peer(const std::string& peer) { return peer.rfind(std::string("\0http/", 6), 0) == 0; }

struct HttpOptions {
  std::string address;  // host:port
  std::vector<std::string> models;  // names requests may ask for; the first is the served model
  messages::ClientLimits limits;
  messages::HttpServerLimits server;  // connections, deadlines, handler threads
  // Under --auth curve: the clients, whose http-token-sha256 admits a
  // bearer token to /v1/ as that client. Null: no authentication.
  std::shared_ptr<const messages::ClientDirectory> clients;
  std::shared_ptr<const Tokenizer> tokenizer;  // names the tokens of logprobs
  ChatFormat chat_format = ChatFormat::chatml;  // reads a stored answer's tool calls (Responses)
};

class HttpGateway {
 public:
  explicit HttpGateway(HttpOptions options);  // binds; throws on failure
  ~HttpGateway();
  HttpGateway(const HttpGateway&) = delete;
  HttpGateway& operator=(const HttpGateway&) = delete;

  void start(std::shared_ptr<FrameIntake> intake, std::shared_ptr<service::IntakeBacklog> backlog,
             std::shared_ptr<service::ServiceMetrics> metrics);
  void stop();
  // Thread-safe: one response frame for an HTTP peer (dropped if it is gone).
  void deliver(const std::string& peer, const messages::Bytes& frame);
  void set_draining(bool d) { draining_ = d; }
  void set_ready(bool r) { ready_ = r; }

  struct Mailbox {
    std::mutex mutex;
    std::condition_variable arrived;
    std::deque<std::string> frames;
  };

 private:
  std::pair<std::string, std::shared_ptr<Mailbox>> open();
  void close(const std::string& peer, bool cancel);
  // `client`: the authenticated client's name, "" without --auth.
  bool submit(const std::string& peer, const std::string& client, const std::string& bytes, std::string& refusal);
  // One control request and its one answer (or "" after the timeout).
  std::string ask(const std::string& bytes, const std::string& client);
  // The client a request's bearer token names ("" without --auth); false,
  // with a 401 answered, when it names none.
  bool authorize(const messages::HttpRequest& req, messages::HttpResponder& res, std::string& client);
  // Every request: its route's handler, its status counted by route.
  void serve(const messages::HttpRequest& req, messages::HttpResponder& res);
  // The answer's status, or 0 when nothing was sent.
  int route(const messages::HttpRequest& req, messages::HttpResponder& res);
  // One /v1/ request, and the client its bearer token names once authorized.
  struct V1Call {
    const messages::HttpRequest& q;
    messages::HttpResponder& r;
    std::string client;
  };
  // GET /metrics, /healthz, /readyz and the web page: no token asked.
  int open_route(const messages::HttpRequest& req, messages::HttpResponder& res);
  int readiness(messages::HttpResponder& res);
  int openai_route(V1Call& call);  // OpenAI's /v1/ API
  int troupe_route(V1Call& call);  // /v1/troupe/: stats, sessions, jobs
  // `handler`'s status once the call is authorized (else 401), counted as `name`.
  int api(V1Call& call, const char* name, const std::function<int()>& handler);
  // A troupe control request's answer, relayed as JSON.
  int answer(V1Call& call, const std::string& request);
  int files_or_batches(const messages::HttpRequest& req, messages::HttpResponder& res);
  int list_models(messages::HttpResponder& res);
  int troupe_stats(V1Call& call);
  int submit_job(V1Call& call);
  int completion(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client, bool chat);
  // POST /v1/responses (service/openai_responses.h), and GET and DELETE of one.
  int respond(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client);
  int stored_response(const std::string& id, bool remove, messages::HttpResponder& res, const std::string& client);
  // /v1/files and /v1/batches (service/openai_batch.h); 0 when the path is neither's.
  int batch_api(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client);
  int upload(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client);
  int create_batch(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client);
  int batch_file(const std::string& job, bool errors, messages::HttpResponder& res, const std::string& client);
  // Submits the request and waits for its first frame: 0, or the status of
  // the error answered (refused at the door, or the client or server gone).
  int start_request(const std::string& peer, Mailbox& box, const std::string& client, const messages::Bytes& request,
                    service::FrameReply& reply, messages::HttpResponder& res, std::string& first);
  // A submitted request's first frame (Accepted, or the Error refusing it);
  // false when the client left or the server stopped first.
  bool first_frame(Mailbox& box, messages::HttpResponder& res, std::string& frame);
  // The answer from the first frame on, whole or streamed; the peer is closed.
  int relay(const std::string& peer, Mailbox& box, const std::string& first, service::FrameReply& reply, bool stream,
            messages::HttpResponder& res);
  int job_events(const std::string& id, messages::HttpResponder& res, const std::string& client);
  int metrics(messages::HttpResponder& res);
  int count(const char* route, int status);  // recorded for /metrics; returns `status`
  bool stopping() const { return stopping_ || !intake_; }

  HttpOptions options_;
  std::unique_ptr<messages::HttpServer> server_;
  std::shared_ptr<FrameIntake> intake_;
  std::shared_ptr<service::IntakeBacklog> backlog_;
  std::shared_ptr<service::ServiceMetrics> metrics_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Mailbox>> mailboxes_;
  std::atomic<uint64_t> next_{0};
  std::atomic<bool> draining_{false}, ready_{false}, stopping_{false};
};

}  // namespace troupe::gateways
