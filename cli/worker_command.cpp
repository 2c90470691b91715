// troupe worker: a role of the service as its own process. It loads the
// model on its backend and, until SIGINT or SIGTERM, answers one `troupe
// serve` front end: as the target verifier (--role verifier, StepPlans of
// messages/step.fbs, for `serve --worker ENDPOINT`) or as the draft model
// (--role draft, DraftPlans of messages/draft.fbs, for `serve
// --draft-worker ENDPOINT`). A verifier may announce itself to a front end
// (--join) instead of being named by it, and drains on SIGTERM: it keeps
// answering while the front end moves its requests away. Several front ends
// may share one verifier (--fronts N), each with its share of the KV pool
// (docs/SCALE_OUT.md).
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>
#include <zmq.hpp>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "cli/model_path.h"
#include "cli/server_auth.h"
#include "messages/curve_auth.h"
#include "messages/zmq_sockets.h"
#include "messages/step_frames.h"
#include "worker/draft_runner.h"
#include "worker/join_announcer.h"
#include "worker/step_loop.h"
#include "worker/step_runner.h"

namespace troupe::cli {
namespace {

std::atomic<int> stop_signals{0};
void on_stop_signal(int) { stop_signals.fetch_add(1); }

struct WorkerArgs {
  std::string model;
  std::string listen = "tcp://127.0.0.1:7701";
  BackendOptions backend;
  BackendNames names;  // --device, --weights, --kv-type, --rope-*
  int64_t kv_tokens = 32768;
  std::string role = "verifier";
  ServerAuthArgs auth;
  std::vector<std::string> join;
  std::string advertise, join_key;
  double drain_timeout = 30;
  int32_t fronts = 1;
  int32_t max_running = 64;  // the front end's (serve --max-running): sliding-window KV is sized for them
};

int run_worker(WorkerArgs& a) {
  BackendOptions o = a.backend;
  apply_backend_names(o, a.names);
  o.kv_pages = static_cast<int32_t>((a.kv_tokens + o.page_size - 1) / o.page_size);
  // A sliding-window model's local layers keep the windows of the sequences
  // one front end runs at once (several front ends: every layer everywhere).
  if (a.role == "verifier" && a.fronts == 1) o.window_sequences = a.max_running;
  std::shared_ptr<Backend> backend = open_backend(resolve_model(a.model), o);
  std::function<std::string(const std::string&)> answer;
  std::shared_ptr<worker::StepRunner> steps;
  if (a.role == "draft") {
    if (!a.join.empty()) throw std::invalid_argument("--join is for verifier workers; a draft worker is named by --draft-worker");
    if (a.fronts != 1) throw std::invalid_argument("--fronts is for verifier workers; a draft worker serves one front end");
    answer = [runner = std::make_shared<worker::DraftRunner>(backend, a.model)](const std::string& plan) {
      return runner->run(plan);
    };
  } else {
    if (static_cast<int64_t>(a.join.size()) > a.fronts)
      throw std::invalid_argument(std::to_string(a.join.size()) + " --join front ends need --fronts " +
                                  std::to_string(a.join.size()) + " or more: each front end holds a share of the KV pool");
    steps = std::make_shared<worker::StepRunner>(backend, a.fronts);
    answer = [steps](const std::string& plan) { return steps->run(plan); };
  }
  check_server_auth(a.auth);
  const std::string advertise = a.advertise.empty() ? worker::advertised_endpoint(a.listen) : a.advertise;
  if (!a.join.empty() && advertise.empty())
    throw std::invalid_argument("--listen " + a.listen + " is a wildcard address no front end can dial: give --advertise "
                                "with the endpoint the front end reaches this worker at");
  if (!a.join_key.empty() && a.auth.mode != "curve")
    throw std::invalid_argument("--join-key needs --auth curve: this worker joins with its --server-key pair");
  if (a.auth.mode == "curve" && !a.join.empty() && a.join_key.empty())
    throw std::invalid_argument("--auth curve with --join needs --join-key: the front end's public key (.key)");
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
  std::atomic<bool> refused{false};
  std::mutex why_lock;
  std::string why;
  std::vector<std::unique_ptr<worker::JoinAnnouncer>> announcers;
  for (const std::string& front : a.join) {
    worker::JoinOptions jo;
    jo.front = front;
    jo.advertise = advertise;
    jo.instance = steps->process();
    if (!a.join_key.empty()) jo.curve = messages::client_curve(a.auth.server_key, a.join_key);
    announcers.push_back(std::make_unique<worker::JoinAnnouncer>(std::move(jo), [&, front](const std::string& reason) {
      std::lock_guard<std::mutex> g(why_lock);
      if (!refused) why = "the front end at " + front + " refused this worker: " + reason;
      refused = true;
    }));
  }
  worker::StepLoop loop(socket, answer, steps, &announcers, std::chrono::duration<double>(a.drain_timeout), &refused,
                        &stop_signals);
  loop.run();
  announcers.clear();
  if (refused) {
    std::lock_guard<std::mutex> g(why_lock);
    throw std::runtime_error(why);
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
  cmd->add_option("--max-running", a->max_running,
                  "Sequences the front end runs at once (its serve --max-running): a sliding-window model (Gemma 3) "
                  "keeps its local layers' KV for that many windows, not for every token")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  add_server_auth_options(cmd, a->auth);
  cmd->add_option("--join", a->join,
                  "Announce this worker to the front end whose `serve --join-listen` is at this endpoint (again every "
                  "5 s); it dials back --advertise. Repeat it for each front end (with --fronts)");
  cmd->add_option("--fronts", a->fronts,
                  "Front ends that may share this verifier: each holds 1/N of the KV pool and its own sequences; a "
                  "share is freed when its front end stops, or after 3 s without word from it (a live one speaks every second)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--advertise", a->advertise,
                  "With --join: the endpoint the front end reaches this worker at (default: --listen, unless a "
                  "wildcard address)");
  cmd->add_option("--join-key", a->join_key,
                  "With --join and --auth curve: the front end's public key (.key); this worker joins with its "
                  "--server-key pair")
      ->check(CLI::ExistingFile);
  cmd->add_option("--drain-timeout", a->drain_timeout,
                  "Seconds a verifier keeps answering after SIGTERM while the front end moves its requests away (0: "
                  "stop at once); a second signal stops it at once")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  return [a] { return run_worker(*a); };
}

}  // namespace troupe::cli
