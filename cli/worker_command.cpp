// troupe worker: a role of the service as its own process. It loads the
// model on its backend and, until SIGINT or SIGTERM, answers one `troupe
// serve` front end: as the target verifier (--role verifier, StepPlans of
// messages/step.fbs, for `serve --worker ENDPOINT`) or as the draft model
// (--role draft, DraftPlans of messages/draft.fbs, for `serve
// --draft-worker ENDPOINT`).
#include <CLI/CLI.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <zmq.hpp>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "cli/model_path.h"
#include "cli/server_auth.h"
#include "messages/curve_auth.h"
#include "messages/zmq_sockets.h"
#include "worker/draft_runner.h"
#include "worker/step_runner.h"

namespace troupe::cli {
namespace {

std::atomic<bool> stop_requested{false};
void on_stop_signal(int) { stop_requested = true; }

struct WorkerArgs {
  std::string model;
  std::string listen = "tcp://127.0.0.1:7701";
  BackendOptions backend;
  BackendNames names;  // --device, --weights, --kv-type, --rope-*
  int64_t kv_tokens = 32768;
  std::string role = "verifier";
  ServerAuthArgs auth;
};

int run_worker(WorkerArgs& a) {
  BackendOptions o = a.backend;
  apply_backend_names(o, a.names);
  o.kv_pages = static_cast<int32_t>((a.kv_tokens + o.page_size - 1) / o.page_size);
  std::shared_ptr<Backend> backend = open_backend(resolve_model(a.model), o);
  std::function<std::string(const std::string&)> answer;
  if (a.role == "draft") {
    answer = [runner = std::make_shared<worker::DraftRunner>(backend, a.model)](const std::string& plan) {
      return runner->run(plan);
    };
  } else {
    answer = [runner = std::make_shared<worker::StepRunner>(backend)](const std::string& plan) { return runner->run(plan); };
  }
  check_server_auth(a.auth);
  if (a.auth.mode == "none" && !a.auth.insecure && !messages::is_loopback_endpoint(a.listen))
    throw std::invalid_argument(a.listen + " is not a loopback endpoint: serve it with --auth curve (keys from `troupe keygen`; "
                                "the front end's .key in --clients-dir), or give --insecure");
  zmq::context_t ctx(1);
  messages::SocketLimits limits;
  limits.max_message_bytes = 256 << 20;  // a step plan carries the whole batch
  // Under CURVE only the front ends in --clients-dir reach the worker: the
  // handler is bound before the socket and closed after it.
  std::unique_ptr<messages::ZapHandler> zap;
  messages::CurveKeys curve;
  if (a.auth.mode == "curve") {
    curve = messages::server_curve(a.auth.server_key);
    zap = std::make_unique<messages::ZapHandler>(
        ctx, std::make_shared<const messages::ClientDirectory>(messages::ClientDirectory::read(a.auth.clients_dir)));
  }
  zmq::socket_t socket = messages::bind_router(ctx, a.listen, limits, curve);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  std::fprintf(stderr, "troupe worker (%s): listening on %s; %s\n", a.role.c_str(), a.listen.c_str(),
               backend->describe().c_str());
  std::fflush(stderr);
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  while (!stop_requested) {
    try {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(200)) == 0) continue;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    zmq::message_t id, plan;
    if (!socket.recv(id, zmq::recv_flags::dontwait) || !socket.get(zmq::sockopt::rcvmore)) continue;
    if (!socket.recv(plan, zmq::recv_flags::none)) continue;
    const std::string result = answer(plan.to_string());
    try {
      socket.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      socket.send(zmq::buffer(result), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // The front end went away mid-step; it will start over with a new connection.
    }
  }
  std::fprintf(stderr, "troupe worker: stopping\n");
  return 0;
}

}  // namespace

Run add_worker(CLI::App& app) {
  auto a = std::make_shared<WorkerArgs>();
  CLI::App* cmd = app.add_subcommand(
      "worker", "Run the target verifier (or the draft model) for a `troupe serve --worker (--draft-worker)` front end");
  cmd->add_option("--model,-m", a->model, "Model name or GGUF path")->required();
  cmd->add_option("--role", a->role, "verifier: score and sample each step; draft: propose drafts with this model")
      ->check(CLI::IsMember({"verifier", "draft"}))
      ->capture_default_str();
  cmd->add_option("--listen", a->listen, "ZeroMQ endpoint to bind")->capture_default_str();
  a->backend.threads = default_threads();
  add_backend_flags(*cmd, a->backend, a->names);
  cmd->add_option("--kv-tokens", a->kv_tokens, "KV cache capacity in tokens")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 26))
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", a->backend.max_batch_tokens, "Largest step in tokens (CUDA buffers)")
      ->capture_default_str();
  add_server_auth_options(cmd, a->auth);
  return [a] { return run_worker(*a); };
}

}  // namespace troupe::cli
