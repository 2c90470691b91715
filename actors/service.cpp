#include "actors/service.h"

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "actors/service_impl.h"

namespace troupe::actors {
namespace {

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

std::filesystem::path default_data_dir() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "troupe";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".local/share/troupe";
  return std::filesystem::current_path() / "troupe-data";
}

Service::Service(ServiceOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  if (s.options.events.empty()) s.options.events = messages::default_events_endpoint(s.options.listen);
  service::check_service_options(s.options);
  s.open_auth();
  const VerifierSide v = s.open_verifier();
  s.tokenizer = std::make_shared<Tokenizer>(load_vocabulary(*v.file));
  PlannerLimits limits = s.options.planner;
  limits.max_context = service::fitted_context(limits.max_context, v.config.context_limit(), v.kv_pages, v.page_size);
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
  report_damaged_sessions(*s.store);
  s.gateway = std::make_shared<gateways::ClientGateway>(s.options.listen, s.options.socket, s.curve, s.clients);
  s.replies = std::make_shared<Replies>(s.gateway);
  if (!s.options.http.empty()) {
    gateways::HttpOptions ho;
    ho.address = s.options.http;
    // Requests name the model as `troupe serve -m` was given it; a path by its file name.
    const std::filesystem::path given(s.options.model_name.empty() ? "troupe" : s.options.model_name);
    ho.models = {given.has_parent_path() || given.extension() == ".gguf" ? given.stem().string() : given.string()};
    ho.limits = s.options.client;
    ho.server = s.options.http_server;
    ho.clients = s.clients;
    ho.tokenizer = s.tokenizer;
    ho.chat_format = detect_chat_format(s.tokenizer->vocabulary(), v.config.architecture);
    s.http = std::make_shared<gateways::HttpGateway>(std::move(ho));
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
    if (s.pool) s.pool->set_max_context(limits.max_context);
    s.serving = true;
  }
  s.backend_text = v.text + (s.join_listener ? "; workers join at " + s.options.join_listen : std::string());
  const auto intake = frame_intake(s.ingestion_handle);
  s.gateway->start(intake, s.backlog, s.options.client);
  if (s.http) s.http->start(intake, s.backlog, s.metrics);
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
         "; job events on " + s.options.events +
         (s.kv_spill ? std::string("; session KV spills to the store as ") +
                           service::spill_codec_description(static_cast<KvPageCodec>(s.options.kv_spill_codec))
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
