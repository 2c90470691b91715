#include "actors/service.h"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <stdexcept>
#include <cstdlib>
#include <unistd.h>

#include "actors/client_gateway.h"
#include "actors/http_gateway.h"
#include "actors/draft_actor.h"
#include "actors/ingestion_actor.h"
#include "actors/job_actor.h"
#include "actors/join_listener.h"
#include "actors/kv_allocator_actor.h"
#include "actors/persistence_actor.h"
#include "actors/remote_worker_actor.h"
#include "actors/replies.h"
#include "actors/scheduler_actor.h"
#include "actors/session_peers.h"
#include "actors/tier_router_actor.h"
#include "actors/verifier_actor.h"
#include "engine/chat_template.h"
#include "engine/gguf_file.h"
#include "engine/kv_page_codec.h"
#include "engine/model_config.h"
#include "engine/model_identity.h"
#include "engine/page_pool.h"
#include "engine/speculation/model_drafter.h"
#include "engine/vocabulary.h"
#include "service/clock.h"
#include "service/request_gate.h"
#include "worker/front_shares.h"
#include "worker/join_announcer.h"

namespace troupe::actors {
namespace {

// The verifier's side as the front end sees it: in this process or in a worker.
struct VerifierSide {
  const GgufFile* file = nullptr;
  ModelConfig config;
  int32_t kv_pages = 0, page_size = 0;
  int32_t kv_local_pages = 0;  // a sliding-window model's local slots (engine/page_pool.h)
  bool can_copy = false, can_transfer = false, can_shift = false;
  KvType kv_type = KvType::f16;
  std::string text;
  // The verifier's workers (`serve --worker`, one or more): each its own KV pool.
  struct Worker {
    std::string endpoint;
    int32_t kv_pages = 0;
    int32_t kv_local_pages = 0;
  };
  std::vector<Worker> workers;
};

// How often a worker's scheduler probes it while idle or lost.
constexpr std::chrono::milliseconds kWorkerHeartbeat{1000};

// The engine's threads own the cores; the actors on CAF's pool (scheduler,
// ingestion, jobs, the KV allocator) wake a few times per step. CAF's
// default work-stealing pool runs max(cores, 4) workers that poll while
// idle (yield, then 50 us sleeps), which took ~4 % of the CPU under load,
// and every tick taken from an engine thread stalls both at the step's
// barrier. Work sharing blocks idle workers on a condition variable; two of
// them keep a long tokenization in ingestion from delaying the scheduler.
void configure_actor_pool(caf::actor_system_config& config) {
  config.set("scheduler.policy", caf::atom("sharing"));
  config.set("scheduler.max-threads", size_t{2});
}


}  // namespace

struct Service::Impl {
  ServiceOptions options;
  std::shared_ptr<Backend> backend;        // in-process verifier only
  std::shared_ptr<Backend> draft_backend;  // in-process draft model only
  std::string backend_text, draft_text;
  std::vector<std::string> draft_names;  // what requests may call the draft model
  std::unique_ptr<GgufFile> file;        // split topology: tokenizer and config only
  std::shared_ptr<const Tokenizer> tokenizer;
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::shared_ptr<ClientGateway> gateway;
  std::shared_ptr<HttpGateway> http;
  std::shared_ptr<service::ServiceMetrics> metrics = std::make_shared<service::ServiceMetrics>();
  std::shared_ptr<Replies> replies;
  std::shared_ptr<persistence::Store> store;
  std::shared_ptr<EventSocket> events;
  verifier_actor verifier;
  draft_actor drafter;
  scheduler_actor scheduler_handle;
  ingestion_actor ingestion_handle;
  std::shared_ptr<service::IntakeBacklog> backlog;
  persistence_actor persistence_handle;
  kv_allocator_actor allocator;
  job_actor jobs;
  // Cascade tiers below the last (this struct's verifier and scheduler are
  // the last tier's), and the router in front of them all.
  struct SmallTier {
    std::string name;
    std::shared_ptr<Backend> backend;  // in process; null: in a `troupe worker`
    std::string worker;
    std::unique_ptr<GgufFile> file;    // a worker's tier: its model's tokenizer and config, read here
    int32_t kv_pages = 0, page_size = 0;
    int64_t context_limit = 0;  // ModelConfig::context_limit()
    bool can_transfer = false, can_shift = false;
    uint64_t fingerprint = 0;
    verifier_actor verifier;
    kv_allocator_actor allocator;
    scheduler_actor scheduler;
  };
  std::vector<SmallTier> small_tiers;
  // The model's verifier, KV allocator and scheduler: one, or one per worker
  // (the first is also `verifier`, `allocator` and `scheduler_handle`).
  struct Replica {
    verifier_actor verifier;
    kv_allocator_actor allocator;
    scheduler_actor scheduler;
  };
  std::vector<Replica> replicas;
  // Workers that join by themselves (--join-listen). The lock guards
  // `replicas` and `joined` against the listener's thread.
  std::unique_ptr<JoinListener> join_listener;
  session_peers_actor peers;  // other front ends to take sessions from (--peer); null: none
  std::mutex workers_lock;
  std::condition_variable first_join;
  struct Joined {
    std::string endpoint;
    uint64_t process = 0;  // the worker process's id (StepResult.process)
  };
  std::vector<Joined> joined;  // every worker: given at start or joined
  bool serving = false;        // replicas can be added
  // This front end's id in its step plans: a worker that several front ends
  // share keeps each one's pages apart by it (worker/front_shares.h).
  const uint64_t front_id = worker::random_id();
  // A worker's share of its pool, taken by a query that then refuses it, is let go at once.
  void let_go(const std::string& endpoint, std::chrono::milliseconds wait = std::chrono::seconds(2)) {
    release_worker({endpoint, worker_curve}, wait, front_id);
  }
  // A worker shared by several front ends may still hold the share of one
  // that crashed: it frees it after 3 s of silence, so a restarted front end
  // asks again for a while before it gives up.
  messages::WorkerInfo query_worker_waiting(const std::string& endpoint) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(6);
    for (bool told = false;; std::this_thread::sleep_for(std::chrono::milliseconds(250))) {
      try {
        return query_worker({endpoint, worker_curve}, options.worker_timeout, front_id);
      } catch (const WorkerRefused& e) {
        if (std::chrono::steady_clock::now() >= until) throw;
        if (!std::exchange(told, true)) {
          std::fprintf(stderr, "troupe serve: waiting for a share of a worker's pool: %s\n", e.what());
          std::fflush(stderr);
        }
      }
    }
  }
  // After the actors are gone (or a start that failed): no plan goes out any
  // more, so the workers' shares are free for other front ends now, not
  // after they miss this one's heartbeats.
  ~Impl() {
    for (const auto& j : joined) let_go(j.endpoint, std::chrono::milliseconds(500));
    for (const auto& t : small_tiers)
      if (!t.worker.empty()) let_go(t.worker, std::chrono::milliseconds(500));
  }
  std::optional<std::string> first_worker;
  uint64_t model_fingerprint = 0;
  service::SchedulerConfig replica_config;  // what a joining worker's scheduler starts from
  SchedulerLinks links_template;
  int64_t max_context = 0;
  std::shared_ptr<service::TierTable> tier_table;  // null: one model
  tier_router_actor router;
  scheduler_actor front;  // what ingestion and jobs send to: the router, or the one scheduler
  bool kv_spill = false;
  messages::CurveKeys curve, worker_curve;                 // this server's pair; its pair toward workers
  std::shared_ptr<const messages::ClientDirectory> clients;  // null: no CURVE

  void open_auth();
  VerifierSide open_verifier();
  void open_draft_model();
  void open_tiers(const VerifierSide& v);
  persistence::SessionPolicy session_policy(const VerifierSide& v);
  void spawn(const VerifierSide& v, const persistence::SessionPolicy& policy, const PlannerLimits& limits);
  void spawn_replica(const std::string& endpoint, int32_t kv_pages, int32_t kv_local_pages, bool joined_later);
  std::string check_worker(const VerifierSide& v, const std::string& endpoint, const messages::WorkerInfo& w) const;
  std::optional<std::string> admit_worker(const std::string& endpoint, uint64_t instance);
  VerifierSide shape;  // the workers' KV shape, which a joining one must match
  // Requests have a choice of worker: several given, or more may join.
  bool several_workers() const { return options.workers.size() > 1 || !options.join_listen.empty(); }
};

// Keys and clients, before anything binds; a non-loopback endpoint without
// CURVE is refused unless the operator says --insecure.
void Service::Impl::open_auth() {
  const ServiceOptions& o = options;
  if (o.server_key.empty() != o.clients_dir.empty())
    throw std::invalid_argument("--auth curve needs both --server-key (this server's .secret) and --clients-dir");
  if (!o.server_key.empty()) {
    curve = messages::server_curve(o.server_key);
    clients = std::make_shared<const messages::ClientDirectory>(messages::ClientDirectory::read(o.clients_dir));
  } else if (!o.insecure) {
    if (!o.http.empty() && !messages::is_loopback_endpoint("tcp://" + o.http))
      throw std::invalid_argument("--http " + o.http + " is not a loopback address: serve it with --auth curve (bearer "
                                  "tokens from `troupe keygen --http-token`), or give --insecure to serve it to anyone "
                                  "who reaches it");
    for (const std::string& e : {o.listen, o.events})
      if (!messages::is_loopback_endpoint(e))
        throw std::invalid_argument(e + " is not a loopback endpoint: serve it with --auth curve (keys from `troupe keygen`), "
                                    "or give --insecure to serve it to anyone who reaches it");
  }
  if (!o.worker_key.empty()) {
    if (o.server_key.empty()) throw std::invalid_argument("--worker-key needs --server-key: the pair this server shows workers");
    worker_curve = messages::client_curve(o.server_key, o.worker_key);
  }
}

std::filesystem::path default_data_dir() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "troupe";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".local/share/troupe";
  return std::filesystem::current_path() / "troupe-data";
}

VerifierSide Service::Impl::open_verifier() {
  VerifierSide v;
  if (options.workers.empty() && options.join_listen.empty()) {
    BackendOptions bo = options.backend;
    bo.kv_pages = static_cast<int32_t>((options.kv_tokens + bo.page_size - 1) / bo.page_size);
    bo.max_batch_tokens = std::max<int64_t>(bo.max_batch_tokens, options.planner.token_budget);
    // A sliding-window model keeps local layers' KV for the windows of the
    // sequences that can run at once (engine/kv_cache.h).
    bo.window_sequences = options.planner.max_running;
    bo.window_chunk = options.planner.token_budget;
    backend = open_backend(options.model_path, bo);
    v = {&backend->file(),
         backend->config(),
         backend->pages().capacity(),
         backend->page_size(),
         backend->pages().local_capacity(),
         backend->can_copy_pages(),
         backend->can_transfer_pages(),
         backend->can_shift_kv(),
         backend->kv_type(),
         backend->describe(),
         {}};
    return v;
  }
  file = std::make_unique<GgufFile>(GgufFile::open(options.model_path));
  v.file = file.get();
  v.config = read_model_config(*file, options.backend.overrides);
  model_fingerprint = file_fingerprint(*file);
  if (!options.join_listen.empty()) {
    if (!options.insecure && !clients && !messages::is_loopback_endpoint(options.join_listen))
      throw std::invalid_argument("--join-listen " + options.join_listen +
                                  " is not a loopback endpoint: serve it with --auth curve (the workers' keys in "
                                  "--clients-dir), or give --insecure to let anyone who reaches it add a worker");
    join_listener = std::make_unique<JoinListener>(
        options.join_listen, [this](const std::string& e, uint64_t i) { return admit_worker(e, i); }, curve, clients);
  }
  if (options.workers.empty()) {  // --join-listen alone: the first worker to join
    std::unique_lock<std::mutex> g(workers_lock);
    std::fprintf(stderr, "troupe serve: waiting for a worker to join at %s\n", options.join_listen.c_str());
    std::fflush(stderr);
    first_join.wait(g, [&] { return first_worker.has_value(); });
    options.workers.push_back(*first_worker);
  }
  v.can_copy = v.can_transfer = v.can_shift = true;
  for (const std::string& endpoint : options.workers) {
    const bool twice = std::count(options.workers.begin(), options.workers.end(), endpoint) > 1;
    if (twice) throw std::invalid_argument("--worker " + endpoint + " is given twice; each worker serves one front end once");
    const messages::WorkerInfo w = query_worker_waiting(endpoint);
    const std::string why = check_worker(v, endpoint, w);
    if (!why.empty()) {
      let_go(endpoint);
      throw std::runtime_error(why);
    }
    v.kv_pages = v.workers.empty() ? w.kv_pages : std::min(v.kv_pages, w.kv_pages);
    v.kv_local_pages = v.workers.empty() ? w.kv_local_pages : std::min(v.kv_local_pages, w.kv_local_pages);
    v.page_size = w.page_size;
    v.kv_type = static_cast<KvType>(w.kv_type);
    v.can_copy = v.can_copy && w.can_copy_pages;
    v.can_transfer = v.can_transfer && w.can_transfer_pages;
    v.can_shift = v.can_shift && w.can_shift_kv;
    v.workers.push_back({endpoint, w.kv_pages, w.kv_local_pages});
    joined.push_back({endpoint, w.process});
    v.text += std::string(v.text.empty() ? "" : ", ") + endpoint + " (" + w.model + ", KV " + std::to_string(w.kv_pages) +
              " pages x " + std::to_string(w.page_size) + " tokens)";
  }
  v.text = (v.workers.size() == 1 ? "verifier in worker " : "verifier in " + std::to_string(v.workers.size()) + " workers: ") + v.text;
  return v;
}

// Why a worker cannot serve this front end ("" if it can): another model,
// the process of a worker it already has, or another KV shape than the
// workers before it (a request moves between them as pages and tokens).
std::string Service::Impl::check_worker(const VerifierSide& v, const std::string& endpoint,
                                        const messages::WorkerInfo& w) const {
  if (w.model_fingerprint != 0 && w.model_fingerprint != model_fingerprint)
    return "the worker at " + endpoint + " serves another model (" + w.model + ") than " + options.model_path +
           "; every worker must load the front end's model file";
  if (w.n_vocab != v.config.n_vocab)
    return "the worker at " + endpoint + " serves a model with " + std::to_string(w.n_vocab) + " tokens; " +
           options.model_path + " has " + std::to_string(v.config.n_vocab);
  if (w.process != 0)
    for (const Joined& j : joined)
      if (j.process == w.process && j.endpoint != endpoint)
        return "--worker " + endpoint + " and " + j.endpoint + " are the same worker process";
  if (!v.workers.empty() && (w.page_size != v.page_size || static_cast<KvType>(w.kv_type) != v.kv_type))
    return "the worker at " + endpoint + " keeps KV pages of " + std::to_string(w.page_size) + " tokens (" +
           kv_type_name(static_cast<KvType>(w.kv_type)) + "), the one at " + v.workers.front().endpoint + " of " +
           std::to_string(v.page_size) + " (" + kv_type_name(v.kv_type) +
           "); a request moves between workers, so they need the same page size and KV type";
  if (max_context > 0 && int64_t{w.kv_pages} * w.page_size < max_context)
    return "the worker at " + endpoint + " holds " + std::to_string(int64_t{w.kv_pages} * w.page_size) +
           " tokens of KV, less than this server's context of " + std::to_string(max_context) +
           "; give it more --kv-tokens";
  return "";
}

// A worker announced itself on the join socket (JoinListener's thread).
std::optional<std::string> Service::Impl::admit_worker(const std::string& endpoint, uint64_t instance) {
  std::unique_lock<std::mutex> g(workers_lock);
  for (const Joined& j : joined)
    if (j.endpoint == endpoint) return std::string();  // ours already; its scheduler notices a restart
  if (!serving && first_worker) return std::nullopt;  // starting with the first: ask again later
  messages::WorkerInfo w;
  try {
    w = query_worker({endpoint, worker_curve}, std::min<std::chrono::milliseconds>(options.worker_timeout, std::chrono::seconds(10)),
                     front_id);
  } catch (const WorkerRefused&) {
    return std::nullopt;  // no share of its pool free for this front end yet: ask again later
  } catch (const std::exception& e) {
    return std::string(e.what()) + " (the endpoint it gave with --advertise)";
  }
  if (w.process != 0 && instance != 0 && w.process != instance) {
    let_go(endpoint);
    return "another worker process answers at " + endpoint + " than the one that announced it";
  }
  if (!serving) {  // the first: the service starts with it
    VerifierSide v;
    v.config = read_model_config(*file, options.backend.overrides);
    const std::string why = check_worker(v, endpoint, w);
    if (!why.empty()) {
      let_go(endpoint);
      return why;
    }
    first_worker = endpoint;
    first_join.notify_all();
    return std::string();
  }
  const std::string why = check_worker(shape, endpoint, w);
  if (!why.empty()) {
    let_go(endpoint);
    std::fprintf(stderr, "troupe serve: refused a worker: %s\n", why.c_str());
    std::fflush(stderr);
    return why;
  }
  spawn_replica(endpoint, w.kv_pages, w.kv_local_pages, true);
  joined.push_back({endpoint, w.process});
  shape.workers.push_back({endpoint, w.kv_pages, w.kv_local_pages});
  std::fprintf(stderr, "troupe serve: worker %s joined (%s, KV %d pages x %d tokens); %zu workers\n", endpoint.c_str(),
               w.model.c_str(), w.kv_pages, w.page_size, replicas.size());
  std::fflush(stderr);
  return std::string();
}

// The draft model: its tokens must be the model's, or its drafts mean nothing.
void Service::Impl::open_draft_model() {
  if (!options.draft_model_path.empty() && !options.draft_worker.empty())
    throw std::invalid_argument("give a draft model or a draft worker, not both");
  if (several_workers() && (!options.draft_model_path.empty() || !options.draft_worker.empty()))
    throw std::invalid_argument("a draft model with several --worker (or --join-listen) is not supported yet (one draft model cannot serve "
                                "several workers' sequences); --speculation ngram drafts on each worker");
  if (!options.draft_model_path.empty()) {
    BackendOptions bo = options.backend;
    const int64_t tokens = options.draft_kv_tokens > 0 ? options.draft_kv_tokens : options.kv_tokens;
    bo.kv_pages = static_cast<int32_t>((tokens + bo.page_size - 1) / bo.page_size);
    draft_backend = open_backend(options.draft_model_path, bo);
    const std::string why = draft_pair_mismatch(tokenizer->vocabulary(), load_vocabulary(draft_backend->file()));
    if (!why.empty()) throw std::runtime_error(options.draft_model_path + " cannot draft for this model: " + why);
    draft_text = "; draft model " + draft_backend->config().name + " in process";
    if (!options.draft_model_name.empty()) draft_names.push_back(options.draft_model_name);
    draft_names.push_back(std::filesystem::path(options.draft_model_path).stem().string());
    draft_names.push_back(draft_backend->config().name);
  } else if (!options.draft_worker.empty()) {
    const messages::DrafterInfo d = query_draft_worker({options.draft_worker, worker_curve}, options.draft_timeout);
    if (d.vocabulary != vocabulary_fingerprint(tokenizer->vocabulary()))
      throw std::runtime_error("the draft worker at " + options.draft_worker + " serves " + d.model +
                               ", whose tokens differ from this model's");
    draft_text = "; draft model " + d.model + " in worker " + options.draft_worker;
    draft_names.push_back(d.model);
  } else if (options.speculation == SpeculationMode::draft) {
    throw std::invalid_argument("--speculation draft needs --draft-model or --draft-worker");
  }
}

// The smaller tiers, each its own engine; one tokenizer across all of them
// (a request moves between tiers as tokens). The first tier's model drafts
// for the last when no draft model is given: that is the verify policy.
void Service::Impl::open_tiers(const VerifierSide& v) {
  if (options.tier_paths.empty()) return;
  if (several_workers())
    throw std::invalid_argument("--tiers with several --worker (or --join-listen) is not supported yet: the first tier drafts for the last, "
                                "and one draft model cannot serve several workers' sequences");
  tier_table = std::make_shared<service::TierTable>();
  // A tier is named as serve was given it; a path by its file name.
  const std::filesystem::path given(options.model_name);
  const std::string last_name = options.model_name.empty() ? v.config.name
                                : given.has_parent_path() || given.extension() == ".gguf" ? given.stem().string()
                                                                                           : options.model_name;
  for (size_t i = 0; i < options.tier_paths.size(); ++i) {
    BackendOptions bo = options.backend;
    bo.kv_pages = static_cast<int32_t>((options.kv_tokens + bo.page_size - 1) / bo.page_size);
    bo.max_batch_tokens = std::max<int64_t>(bo.max_batch_tokens, options.planner.token_budget);
    SmallTier t;
    t.name = i < options.tier_names.size() ? options.tier_names[i] : std::string();
    std::string config_name;
    t.worker = i < options.tier_workers.size() ? options.tier_workers[i] : std::string();
    if (t.worker.empty()) {
      t.backend = open_backend(options.tier_paths[i], bo);
      t.kv_pages = t.backend->pages().capacity();
      t.page_size = t.backend->page_size();
      t.context_limit = t.backend->config().context_limit();
      t.can_transfer = t.backend->can_transfer_pages();
      t.can_shift = t.backend->can_shift_kv();
      config_name = t.backend->config().name;
      t.fingerprint = file_fingerprint(t.backend->file());
    } else {  // the tier's engine in a worker: this process reads the file for its tokenizer only
      t.file = std::make_unique<GgufFile>(GgufFile::open(options.tier_paths[i]));
      const ModelConfig c = read_model_config(*t.file, options.backend.overrides);
      const messages::WorkerInfo w = query_worker({t.worker, worker_curve}, options.worker_timeout, front_id);
      if (w.n_vocab != c.n_vocab)
        throw std::runtime_error("--tier-workers: the worker at " + t.worker + " serves a model with " +
                                 std::to_string(w.n_vocab) + " tokens; " + options.tier_paths[i] + " has " +
                                 std::to_string(c.n_vocab));
      t.kv_pages = w.kv_pages;
      t.page_size = w.page_size;
      t.context_limit = c.context_limit();
      t.can_transfer = w.can_transfer_pages;
      t.can_shift = w.can_shift_kv;
      config_name = c.name;
      t.fingerprint = file_fingerprint(*t.file);
    }
    if (t.name.empty()) t.name = config_name;
    const std::string why =
        draft_pair_mismatch(tokenizer->vocabulary(), load_vocabulary(t.backend ? t.backend->file() : *t.file));
    if (!why.empty())
      throw std::runtime_error("--tiers: " + t.name + " and " + last_name + " have different tokenizers (" + why +
                               "); a request moves between tiers as tokens, so every tier needs the same one");
    tier_table->names.push_back(t.name);
    tier_table->aliases.push_back({t.name, std::filesystem::path(options.tier_paths[i]).stem().string(), config_name});
    small_tiers.push_back(std::move(t));
  }
  tier_table->names.push_back(last_name);
  tier_table->aliases.push_back({last_name, std::filesystem::path(options.model_path).stem().string(), v.config.name});
  tier_table->default_policy = options.tier_policy;
  tier_table->default_threshold = options.escalate_threshold > 0
                                      ? options.escalate_threshold
                                      : service::default_escalate_threshold(options.escalate_hold);
  tier_table->window = options.escalate_window;
  tier_table->within = options.escalate_within;
  tier_table->hold = options.escalate_hold;
  tier_table->escalate_for_good = options.escalate_for_good;
  messages::SamplingFields probe;
  probe.temperature = 0;
  const auto route = service::resolve_route(*tier_table, probe, 1);
  if (const auto* why = std::get_if<std::string>(&route))
    throw std::invalid_argument("--tier " + options.tier_policy + ": " + why->substr(why->find(':') + 2));
  if (options.draft_model_path.empty() && options.draft_worker.empty()) {
    options.draft_model_path = options.tier_paths.front();
    options.draft_model_name = small_tiers.front().name;
  }
}

persistence::SessionPolicy Service::Impl::session_policy(const VerifierSide& v) {
  persistence::SessionPolicy p;
  p.model_name = options.model_name.empty() ? v.config.name : options.model_name;
  const KvPageShape shape = KvPageShape::of(v.config, v.page_size, v.kv_type);
  p.kv = v.can_transfer && options.kv_spill;
  if (v.kv_type != KvType::f16) {
    // A quantized cache's pages are already small: they spill as they are.
    if (options.kv_spill_codec != 255 && options.kv_spill_codec != static_cast<uint8_t>(KvPageCodec::raw))
      throw std::runtime_error(std::string("--kv-spill-codec applies to an f16 KV cache; a ") + kv_type_name(v.kv_type) +
                               " cache spills its pages as they are");
    options.kv_spill_codec = static_cast<uint8_t>(KvPageCodec::raw);
  } else if (options.kv_spill_codec == 255) {
    // Gemma's values are not normalized: rounded to 4 or 8 bits, a restored
    // session's next answer moved off a full prefill's (docs/DECISIONS.md).
    options.kv_spill_codec = static_cast<uint8_t>(v.config.architecture == "gemma3"         ? KvPageCodec::fp16
                                                  : shape.supports(KvPageCodec::k8v4) ? KvPageCodec::k8v4
                                                                                       : KvPageCodec::int8);
  }
  const auto codec = static_cast<KvPageCodec>(options.kv_spill_codec);
  if (!shape.supports(codec))
    throw std::runtime_error("--kv-spill-codec k8v4 needs a head dimension that is a multiple of 32; this model's is " +
                             std::to_string(shape.head_dim));
  p.kv_identity = kv_identity(*v.file, v.config, v.page_size, options.kv_spill_codec, static_cast<uint8_t>(v.kv_type));
  p.model_fingerprint = p.kv_identity.model;
  p.page_size = v.page_size;
  p.page_bytes = shape.encoded_bytes(codec);
  p.idle_ms = options.session_idle.count();
  // With several workers a session's next turn may run on another worker
  // than its last (overloaded, drained, lost), whose memory lacks its pages:
  // they are always read from the store, and the scheduler adopts only
  // those its worker does not hold already.
  if (several_workers()) p.idle_ms = 0;
  kv_spill = p.kv;
  return p;
}

// One worker's verifier link, KV allocator and scheduler (the in-process
// verifier when `endpoint` is empty). A worker that joins a running service
// is then handed to the router, which places on it from its next request.
void Service::Impl::spawn_replica(const std::string& endpoint, int32_t kv_pages, int32_t kv_local_pages,
                                  bool joined_later) {
  Replica r;
  if (backend) r.verifier = system->spawn<caf::detached>(actors::verifier, backend);
  else
    r.verifier = system->spawn<caf::detached>(remote_verifier, WorkerAddress{endpoint, worker_curve}, options.worker_timeout);
  r.allocator = system->spawn(kv_allocator, persistence_handle, options.session_idle);
  service::SchedulerConfig rc = replica_config;
  rc.worker_name = endpoint;
  if (replica_config.failover) {
    rc.replica = static_cast<int32_t>(replicas.size());
    rc.kv_pages = kv_pages;
    rc.kv_local_pages = kv_local_pages;
  }
  SchedulerLinks links = links_template;
  links.verifier = r.verifier;
  links.allocator = r.allocator;
  r.scheduler = system->spawn(scheduler, rc, links);
  if (joined_later) caf::anon_send(router, join_atom::value, std::max(rc.tier, 0), r.scheduler);
  replicas.push_back(std::move(r));
}

void Service::Impl::spawn(const VerifierSide& v, const persistence::SessionPolicy& policy, const PlannerLimits& limits) {
  if (draft_backend) drafter = system->spawn<caf::detached>(actors::drafter, draft_backend, draft_names.front());
  else if (!options.draft_worker.empty())
    drafter = system->spawn<caf::detached>(remote_drafter, WorkerAddress{options.draft_worker, worker_curve}, options.draft_timeout);
  RetentionOptions retention;
  retention.policy.session_ttl_ms = options.session_ttl.count();
  retention.policy.job_ttl_ms = options.job_ttl.count();
  retention.policy.max_store_bytes = options.max_store_bytes;
  retention.policy.cap_low_water = 0.8;
  retention.policy.page_size = policy.page_size;
  retention.interval = options.sweep_interval;
  retention.responses = {options.response_cache_ttl.count(), options.response_cache_bytes};
  persistence_handle = system->spawn<caf::detached>(persistence_role, store, replies, policy, retention, metrics);

  // A router stands in front when requests have a choice: tiers, or workers.
  const size_t n_workers = std::max<size_t>(v.workers.size(), 1);
  const bool several = several_workers();
  if (tier_table || several) {
    auto table = tier_table;
    if (!table) {  // one model on several workers: one tier, as the router sees it
      table = std::make_shared<service::TierTable>();
      table->names = {policy.model_name};
      table->aliases = {{policy.model_name}};
    }
    service::PlacementConfig pc;
    pc.page_size = v.page_size;
    std::vector<std::pair<int32_t, service::PlacementConfig>> workers(static_cast<size_t>(table->last() + 1), {1, pc});
    workers.back().first = static_cast<int32_t>(n_workers);
    router = system->spawn(tier_router, std::shared_ptr<const service::TierTable>(table), replies, std::move(workers));
  }
  service::SchedulerConfig sc;
  sc.tokenizer = tokenizer;
  sc.kv_pages = v.kv_pages;
  sc.page_size = v.page_size;
  sc.planner = limits;
  sc.kv_local_pages = v.kv_local_pages;
  sc.sliding_window = static_cast<int32_t>(v.config.sliding_window);  // per replica: window iff its worker has local slots
  sc.model_name = policy.model_name;
  sc.draft_model = static_cast<bool>(drafter);
  sc.kv_transfer = policy.kv;
  sc.page_bytes = policy.page_bytes;
  sc.spill_codec = options.kv_spill_codec;
  sc.jump_forward = options.jump_forward;
  sc.kv_shift = v.can_shift;
  sc.metrics = metrics;
  sc.front = front_id;
  if (tier_table) {
    sc.tier = tier_table->last();
    sc.tier_name = tier_table->names.back();
  }
  // The model's schedulers: one, or one per worker, each with its verifier and KV allocator.
  replica_config = sc;
  replica_config.failover = several;
  links_template = {replies, verifier_actor(), drafter, persistence_handle, kv_allocator_actor(), router};
  if (!v.workers.empty()) links_template.heartbeat = kWorkerHeartbeat;
  if (v.workers.empty()) spawn_replica("", v.kv_pages, v.kv_local_pages, false);
  for (const auto& w : v.workers) spawn_replica(w.endpoint, w.kv_pages, w.kv_local_pages, false);
  std::vector<scheduler_actor> last_tier;
  for (const Replica& r : replicas) last_tier.push_back(r.scheduler);
  verifier = replicas.front().verifier;
  allocator = replicas.front().allocator;
  scheduler_handle = replicas.front().scheduler;
  front = scheduler_handle;
  if (router) {
    TierSchedulers schedulers;
    for (size_t i = 0; i < small_tiers.size(); ++i) {
      SmallTier& t = small_tiers[i];
      if (t.backend) t.verifier = system->spawn<caf::detached>(actors::verifier, t.backend);
      else t.verifier = system->spawn<caf::detached>(remote_verifier, WorkerAddress{t.worker, worker_curve}, options.worker_timeout);
      t.allocator = system->spawn(kv_allocator, persistence_handle, options.session_idle);
      service::SchedulerConfig tc = sc;
      tc.kv_pages = t.kv_pages;
      tc.page_size = t.page_size;
      tc.planner.max_context = std::min<int32_t>(limits.max_context, static_cast<int32_t>(std::min<int64_t>(
                                                                        t.context_limit, INT32_MAX)));
      tc.draft_model = false;
      tc.kv_transfer = t.can_transfer;  // swaps of preempted sequences; session pages are the last tier's
      tc.session_spill = false;
      tc.kv_shift = t.can_shift;
      tc.tier = static_cast<int32_t>(i);
      tc.tier_name = t.name;
      tc.next_tier = true;
      SchedulerLinks links{replies, t.verifier, draft_actor(), persistence_handle, t.allocator, router};
      if (!t.worker.empty()) links.heartbeat = kWorkerHeartbeat;
      tc.worker_name = t.worker;
      t.scheduler = system->spawn(scheduler, tc, links);
      schedulers.push_back({t.scheduler});
    }
    schedulers.push_back(std::move(last_tier));
    caf::anon_send(router, tiers_atom::value, std::move(schedulers));
    front = router;
  }

  const ChatFormat chat_format = detect_chat_format(tokenizer->vocabulary(), v.config.architecture);
  service::GateConfig gc;
  gc.tokenizer = tokenizer;
  gc.chat_format = chat_format;
  gc.limits = options.client;
  gc.max_context = limits.max_context;
  gc.max_samples = v.can_copy ? 16 : 1;
  gc.page_size = v.page_size;
  gc.speculation = options.speculation;
  gc.max_draft = options.max_draft;
  gc.draft_model = static_cast<bool>(drafter);
  gc.draft_names = draft_names;
  gc.clients = clients;
  gc.response_cache = options.response_cache_bytes > 0;
  gc.model_fingerprint = policy.model_fingerprint;
  // The cache's answers depend on every tier's model.
  for (const SmallTier& t : small_tiers)
    gc.model_fingerprint = (gc.model_fingerprint * 0x100000001b3ull) ^ t.fingerprint;
  gc.tiers = tier_table;
  service::BatchJobsConfig jc;
  jc.tokenizer = tokenizer;
  jc.chat_format = chat_format;
  jc.max_context = limits.max_context;
  jc.max_prompt_bytes = options.client.max_prompt_bytes;
  jc.max_in_flight = std::max(1, options.job_items_in_flight);
  jc.tiers = tier_table;
  // Items of a job of whole requests are read as the gate reads them (a gate
  // of the job actor's own: its grammar cache is not shared across threads).
  jc.read_request = [gate = std::make_shared<const service::RequestGate>(gc)](const std::string& request)
      -> std::variant<service::AdmitRequest, std::string> {
    auto a = gate->job_item(request, service::steady_ns());
    if (auto* r = std::get_if<messages::Rejection>(&a)) return r->message;
    return std::get<service::AdmitRequest>(std::move(a));
  };
  jobs = system->spawn(job_runner, jc, JobLinks{events, replies, front, persistence_handle, metrics});
  replies->set_jobs(jobs);
  // Sweeps start once the job actor, which must hear of swept jobs, exists.
  caf::anon_send(persistence_handle, sweep_atom::value, jobs);

  backlog = std::make_shared<service::IntakeBacklog>(options.intake);
  if (!options.peers.empty()) {
    SessionPeersOptions po;
    po.peers = options.peers;
    // Where the holder records the session went: the listen endpoint, or
    // for a wildcard one this host's name and the port.
    po.self = worker::advertised_endpoint(options.listen);
    if (po.self.empty()) {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      po.self = "tcp://" + std::string(host) + options.listen.substr(options.listen.rfind(':'));
    }
    // Front ends that hand sessions to each other share one key pair: each
    // is an (admin) client of the others under it.
    if (curve.enabled()) po.curve = {curve.public_key, curve.secret_key, curve.public_key};
    peers = system->spawn<caf::detached>(session_peers, std::move(po));
  }
  ingestion_handle =
      system->spawn(ingestion, gc, IngestionLinks{replies, front, persistence_handle, jobs, backlog, metrics, peers});
}

Service::Service(ServiceOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  if (s.options.events.empty()) s.options.events = messages::default_events_endpoint(s.options.listen);
  s.open_auth();
  const VerifierSide v = s.open_verifier();
  s.tokenizer = std::make_shared<Tokenizer>(load_vocabulary(*v.file));
  PlannerLimits limits = s.options.planner;
  // A sequence can never hold more KV than the whole cache: admitting one
  // that could would stall it mid-prefill. The default shrinks to fit; an
  // explicit --context that cannot is the user's mistake, told in numbers.
  const int64_t pool = int64_t{v.kv_pages} * v.page_size;
  if (limits.max_context > pool)
    throw std::invalid_argument("--context " + std::to_string(limits.max_context) + " is more than the KV pool holds: " +
                                std::to_string(pool) + " tokens (" + std::to_string(v.kv_pages) + " pages of " +
                                std::to_string(v.page_size) + "); raise --kv-tokens or lower --context");
  if (limits.max_context <= 0)
    limits.max_context = static_cast<int32_t>(std::min<int64_t>({v.config.context_limit(), 8192, pool}));
  s.options.planner = limits;
  s.open_tiers(v);
  s.open_draft_model();
  const persistence::SessionPolicy policy = s.session_policy(v);
  // The store and sockets first: a locked store or a port in use fails
  // here, before any actor starts.
  if (s.options.data_dir.empty()) s.options.data_dir = default_data_dir();
  s.store = std::make_shared<persistence::Store>(s.options.data_dir, nullptr, s.options.max_store_bytes);
  if (const std::string short_of = persistence::cap_beyond_disk(s.options.data_dir, s.options.max_store_bytes,
                                                                s.store->approximate_bytes());
      !short_of.empty())
    std::fprintf(stderr, "troupe serve: warning: %s\n", short_of.c_str());
  s.gateway = std::make_shared<ClientGateway>(s.options.listen, s.options.socket, s.curve, s.clients);
  s.replies = std::make_shared<Replies>(s.gateway);
  if (!s.options.http.empty()) {
    HttpOptions ho;
    ho.address = s.options.http;
    // Requests name the model as `troupe serve -m` was given it; a path by its file name.
    const std::filesystem::path given(s.options.model_name.empty() ? "troupe" : s.options.model_name);
    ho.models = {given.has_parent_path() || given.extension() == ".gguf" ? given.stem().string() : given.string()};
    ho.limits = s.options.client;
    ho.server = s.options.http_server;
    ho.clients = s.clients;
    ho.tokenizer = s.tokenizer;
    ho.chat_format = detect_chat_format(s.tokenizer->vocabulary(), v.config.architecture);
    s.http = std::make_shared<HttpGateway>(std::move(ho));
    s.replies->set_http(s.http);
  }
  s.events = std::make_shared<EventSocket>();
  if (s.clients) {
    s.events->zap = std::make_unique<messages::ZapHandler>(s.events->ctx, s.clients);
    s.events->clients = s.clients;
  }
  s.events->pub = messages::bind_publisher(s.events->ctx, s.options.events, s.options.socket, s.curve);
  configure_actor_pool(s.config);
  s.system = std::make_unique<caf::actor_system>(s.config);
  {
    std::lock_guard<std::mutex> g(s.workers_lock);
    s.spawn(v, policy, limits);
    s.shape = v;
    s.max_context = limits.max_context;
    s.serving = true;
  }
  s.backend_text = v.text + (s.join_listener ? "; workers join at " + s.options.join_listen : std::string());
  s.gateway->start(s.ingestion_handle, s.backlog, s.options.client);
  if (s.http) s.http->start(s.ingestion_handle, s.backlog, s.metrics);
}

Service::~Service() {
  Impl& s = *impl_;
  s.join_listener.reset();  // no worker joins a service that is going away
  if (s.gateway) s.gateway->stop();
  if (s.http) s.http->stop();
  if (s.system) {
    auto stop = [](const auto& a) {
      if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    };
    stop(s.peers);
    s.peers = session_peers_actor();
    stop(s.ingestion_handle), stop(s.jobs), stop(s.router), stop(s.scheduler_handle), stop(s.allocator),
        stop(s.persistence_handle), stop(s.verifier), stop(s.drafter);
    for (auto& t : s.small_tiers) {
      stop(t.scheduler), stop(t.allocator), stop(t.verifier);
      t.scheduler = scheduler_actor(), t.allocator = kv_allocator_actor(), t.verifier = verifier_actor();
    }
    for (auto& r : s.replicas) stop(r.scheduler), stop(r.allocator), stop(r.verifier);
    s.replicas.clear();
    s.links_template = SchedulerLinks();
    // Drop our handles: a detached actor's thread waits until its actor is
    // destroyed, and the system's destructor waits for that thread.
    s.replies->set_jobs(job_actor());
    s.ingestion_handle = ingestion_actor(), s.jobs = job_actor(), s.scheduler_handle = scheduler_actor();
    s.router = tier_router_actor(), s.front = scheduler_actor();
    s.allocator = kv_allocator_actor(), s.persistence_handle = persistence_actor();
    s.verifier = verifier_actor(), s.drafter = draft_actor();
    s.system.reset();
  }
  s.events.reset();
  s.store.reset();
}

std::string Service::describe() const {
  const Impl& s = *impl_;
  std::string tiers;
  if (s.tier_table) {
    tiers = "; tiers ";
    for (size_t i = 0; i < s.tier_table->names.size(); ++i) tiers += (i ? " < " : "") + s.tier_table->names[i];
    tiers += " (default " + s.options.tier_policy + ")";
  }
  return s.backend_text + s.draft_text + tiers + "; context " + std::to_string(s.options.planner.max_context) + " tokens, budget " +
         std::to_string(s.options.planner.token_budget) + " tokens a step; data in " + s.options.data_dir.string() +
         "; job events on " + s.options.events + (s.kv_spill ? std::string("; session KV spills to the store as ") +
                                (s.options.kv_spill_codec == 2   ? "k8v4"
                                 : s.options.kv_spill_codec == 3 ? "its own format"
                                 : s.options.kv_spill_codec == 1 ? "fp16"
                                                                 : "int8")
                                           : std::string());
}

int32_t Service::drain(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  if (!s.system) return 0;
  if (s.http) s.http->set_draining(true);
  caf::scoped_actor self{*s.system};
  caf::anon_send(s.ingestion_handle, drain_atom::value);
  caf::anon_send(s.jobs, drain_atom::value);
  auto live = [&](bool stop) {
    int32_t n = -1;
    self->request(s.front, std::chrono::seconds(30), drain_atom::value, stop)
        .receive([&](int32_t left) { n = left; }, [&](caf::error&) { n = -1; });
    return n;
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int32_t left = live(false);
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    left = live(false);
  }
  int32_t ended = 0;
  if (left > 0) {
    ended = left;
    live(true);
    // The step in flight comes back before the ended requests' pages go.
    for (int i = 0; i < 200 && live(false) > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Barriers, in the order the writes travel: scheduler -> allocator (spills) -> persistence.
  std::vector<kv_allocator_actor> allocators;
  {
    std::lock_guard<std::mutex> g(s.workers_lock);
    for (const auto& r : s.replicas) allocators.push_back(r.allocator);
  }
  for (const auto& a : allocators)
    self->request(a, std::chrono::seconds(30), stats_atom::value).receive([](uint64_t) {}, [](caf::error&) {});
  self->request(s.persistence_handle, std::chrono::seconds(60), drain_atom::value)
      .receive([](bool) {}, [](caf::error&) {});
  // Replies queued for the sockets (Done frames, errors) get out before they close.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return ended;
}

const std::string& Service::events_endpoint() const { return impl_->options.events; }

}  // namespace troupe::actors
