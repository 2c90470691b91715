// Service's wiring (actors/service_impl.h): every actor spawned with the
// handles it sends to.
#include <caf/send.hpp>

#include <climits>
#include <unistd.h>

#include "actors/service_impl.h"

namespace troupe::actors {

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

// The troupe, in the order each needs the ones before it: the draft model
// and persistence, the router, the model's schedulers (one per worker) and
// the smaller tiers', the job runner, then ingestion in front of them all.
void Service::Impl::spawn(const VerifierSide& v, const persistence::SessionPolicy& policy, const PlannerLimits& limits) {
  if (draft_backend) drafter = system->spawn<caf::detached>(actors::drafter, draft_backend, draft_names.front());
  else if (!options.draft_worker.empty())
    drafter = system->spawn<caf::detached>(remote_drafter, WorkerAddress{options.draft_worker, worker_curve}, options.draft_timeout);
  spawn_persistence(policy);
  spawn_router(v, policy);
  const service::SchedulerConfig sc = scheduler_config(v, policy, limits);
  // The model's schedulers: one, or one per worker, each with its verifier and KV allocator.
  replica_config = sc;
  replica_config.failover = service::several_workers(options);
  links_template = {replies, verifier_actor(), drafter, persistence_handle, kv_allocator_actor(), router};
  if (!v.workers.empty()) links_template.heartbeat = kWorkerHeartbeat;
  if (v.workers.empty()) spawn_replica("", v.kv_pages, v.kv_local_pages, false);
  for (const auto& w : v.workers) spawn_replica(w.endpoint, w.kv_pages, w.kv_local_pages, false);
  verifier = replicas.front().verifier;
  allocator = replicas.front().allocator;
  scheduler_handle = replicas.front().scheduler;
  front = scheduler_handle;
  if (router) {
    TierSchedulers schedulers = spawn_small_tiers(sc, limits);
    std::vector<scheduler_actor> last_tier;
    for (const Replica& r : replicas) last_tier.push_back(r.scheduler);
    schedulers.push_back(std::move(last_tier));
    caf::anon_send(router, tiers_atom::value, std::move(schedulers));
    front = router;
  }
  const ChatFormat chat_format = detect_chat_format(tokenizer->vocabulary(), v.config.architecture);
  const service::GateConfig gc = gate_config(v, policy, limits, chat_format);
  spawn_jobs(gc, limits, chat_format);
  backlog = std::make_shared<service::IntakeBacklog>(options.intake);
  if (!options.peers.empty()) spawn_peers();
  ingestion_handle =
      system->spawn(ingestion, gc, IngestionLinks{replies, front, persistence_handle, jobs, backlog, metrics, peers});
}

void Service::Impl::spawn_persistence(const persistence::SessionPolicy& policy) {
  RetentionOptions retention;
  retention.policy.session_ttl_ms = options.session_ttl.count();
  retention.policy.job_ttl_ms = options.job_ttl.count();
  retention.policy.max_store_bytes = options.max_store_bytes;
  retention.policy.cap_low_water = 0.8;
  retention.policy.page_size = policy.page_size;
  retention.interval = options.sweep_interval;
  retention.responses = {options.response_cache_ttl.count(), options.response_cache_bytes};
  persistence_handle = system->spawn<caf::detached>(persistence_role, store, replies, policy, retention, metrics);
}

// A router stands in front when requests have a choice: tiers, or workers.
void Service::Impl::spawn_router(const VerifierSide& v, const persistence::SessionPolicy& policy) {
  if (!tier_table && !service::several_workers(options)) return;
  auto table = tier_table;
  if (!table) {  // one model on several workers: one tier, as the router sees it
    table = std::make_shared<service::TierTable>();
    table->names = {policy.model_name};
    table->aliases = {{policy.model_name}};
  }
  service::PlacementConfig pc;
  pc.page_size = v.page_size;
  std::vector<std::pair<int32_t, service::PlacementConfig>> workers(static_cast<size_t>(table->last() + 1), {1, pc});
  workers.back().first = static_cast<int32_t>(std::max<size_t>(v.workers.size(), 1));
  router = system->spawn(tier_router, std::shared_ptr<const service::TierTable>(table), replies, std::move(workers),
                         persistence_handle, metrics);
}

// The model's schedulers start from this (the last tier's, when there are tiers).
service::SchedulerConfig Service::Impl::scheduler_config(const VerifierSide& v, const persistence::SessionPolicy& policy,
                                                         const PlannerLimits& limits) const {
  service::SchedulerConfig sc;
  sc.tokenizer = tokenizer;
  sc.kv_pages = v.kv_pages;
  sc.page_size = v.page_size;
  sc.planner = limits;
  sc.kv_local_pages = v.kv_local_pages;
  sc.sliding_window = static_cast<int32_t>(v.config.sliding_window);  // per replica: window iff its worker has local slots
  sc.model_name = policy.model_name;
  sc.draft_model = static_cast<bool>(drafter);
  sc.suffix_memory = options.suffix_memory;
  sc.kv_transfer = policy.kv;
  sc.page_bytes = policy.page_bytes;
  sc.spill_codec = options.kv_spill_codec;
  sc.jump_forward = options.jump_forward;
  sc.kv_shift = v.can_shift;
  sc.kv_evict = v.can_evict;
  sc.metrics = metrics;
  sc.front = front_id;
  if (tier_table) {
    sc.tier = tier_table->last();
    sc.tier_name = tier_table->names.back();
  }
  return sc;
}

// Each smaller tier's verifier, KV allocator and scheduler. Session pages
// are the last tier's; a smaller tier's KV moves only for its own swaps.
TierSchedulers Service::Impl::spawn_small_tiers(const service::SchedulerConfig& sc, const PlannerLimits& limits) {
  TierSchedulers schedulers;
  for (size_t i = 0; i < small_tiers.size(); ++i) {
    SmallTier& t = small_tiers[i];
    if (t.backend) t.verifier = system->spawn<caf::detached>(actors::verifier, t.backend);
    else t.verifier = system->spawn<caf::detached>(remote_verifier, WorkerAddress{t.worker, worker_curve}, options.worker_timeout);
    t.allocator = system->spawn(kv_allocator, persistence_handle, options.session_idle);
    service::SchedulerConfig tc = sc;
    tc.kv_pages = t.kv_pages;
    tc.page_size = t.page_size;
    tc.planner.max_context =
        std::min<int32_t>(limits.max_context, static_cast<int32_t>(std::min<int64_t>(t.context_limit, INT32_MAX)));
    tc.draft_model = false;
    tc.kv_transfer = t.can_transfer;
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
  return schedulers;
}

service::GateConfig Service::Impl::gate_config(const VerifierSide& v, const persistence::SessionPolicy& policy,
                                               const PlannerLimits& limits, ChatFormat chat_format) const {
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
  return gc;
}

void Service::Impl::spawn_jobs(const service::GateConfig& gc, const PlannerLimits& limits, ChatFormat chat_format) {
  service::BatchJobsConfig jc;
  jc.tokenizer = tokenizer;
  jc.chat_format = chat_format;
  jc.max_context = limits.max_context;
  jc.max_prompt_bytes = options.client.max_prompt_bytes;
  jc.max_in_flight = std::max(1, options.job_items_in_flight);
  jc.tiers = tier_table;
  jc.summary_tier = options.summary_model;
  jc.speculation = gc.speculation;
  jc.max_draft = gc.max_draft;
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
}

void Service::Impl::spawn_peers() {
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

}  // namespace troupe::actors
