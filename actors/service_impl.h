#pragma once
// Inside actors/service.cpp's Service: what it holds, and the steps that
// start it, in three files: service_open.cpp opens the models and workers
// (and admits workers that join), service_spawn.cpp spawns and wires the
// actors, service.cpp starts, describes, drains and stops the whole.
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "actors/service.h"
#include "actors/draft_actor.h"
#include "actors/ingestion_actor.h"
#include "actors/job_actor.h"
#include "actors/kv_allocator_actor.h"
#include "actors/persistence_actor.h"
#include "actors/remote_worker_actor.h"
#include "actors/replies.h"
#include "actors/scheduler_actor.h"
#include "actors/session_peers.h"
#include "actors/tier_router_actor.h"
#include "actors/verifier_actor.h"
#include "gateways/client_gateway.h"
#include "gateways/http_gateway.h"
#include "gateways/join_listener.h"
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
#include "service/spill_codec.h"
#include "service/worker_pool.h"
#include "worker/front_shares.h"
#include "worker/join_announcer.h"

namespace troupe::actors {

// The verifier's side as the front end sees it: in this process or in a worker.
struct VerifierSide {
  const GgufFile* file = nullptr;
  ModelConfig config;
  int32_t kv_pages = 0, page_size = 0;
  int32_t kv_local_pages = 0;  // a sliding-window model's local slots (engine/page_pool.h)
  bool can_copy = false, can_transfer = false, can_shift = false;
  // KV eviction (--kv-budget, a request's kv_budget): the local engine's
  // answer; workers are taken to be CPU ones (a CUDA worker fails the step).
  bool can_evict = false;
  KvType kv_type = KvType::f16;
  std::string text;
  // The verifier's workers (`serve --worker`, one or more): each its own KV pool.
  std::vector<service::PooledWorker> workers;
};

// How often a worker's scheduler probes it while idle or lost.
inline constexpr std::chrono::milliseconds kWorkerHeartbeat{1000};

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
  std::shared_ptr<gateways::ClientGateway> gateway;
  std::shared_ptr<gateways::HttpGateway> http;
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
  // `replicas` and `pool` against the listener's thread.
  std::unique_ptr<gateways::JoinListener> join_listener;
  session_peers_actor peers;  // other front ends to take sessions from (--peer); null: none
  std::mutex workers_lock;
  std::condition_variable first_join;
  std::optional<service::WorkerPool> pool;  // every worker, given at start or joined; none in process
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
    if (pool)
      for (const auto& w : pool->workers()) let_go(w.endpoint, std::chrono::milliseconds(500));
    for (const auto& t : small_tiers)
      if (!t.worker.empty()) let_go(t.worker, std::chrono::milliseconds(500));
  }
  std::optional<std::string> first_worker;
  service::SchedulerConfig replica_config;  // what a joining worker's scheduler starts from
  SchedulerLinks links_template;
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
  void spawn_persistence(const persistence::SessionPolicy& policy);
  void spawn_router(const VerifierSide& v, const persistence::SessionPolicy& policy);
  service::SchedulerConfig scheduler_config(const VerifierSide& v, const persistence::SessionPolicy& policy,
                                            const PlannerLimits& limits) const;
  TierSchedulers spawn_small_tiers(const service::SchedulerConfig& sc, const PlannerLimits& limits);
  service::GateConfig gate_config(const VerifierSide& v, const persistence::SessionPolicy& policy,
                                  const PlannerLimits& limits, ChatFormat chat_format) const;
  void spawn_jobs(const service::GateConfig& gc, const PlannerLimits& limits, ChatFormat chat_format);
  void spawn_peers();
  void spawn_replica(const std::string& endpoint, int32_t kv_pages, int32_t kv_local_pages, bool joined_later);
  VerifierSide pooled_side(VerifierSide v) const;
  std::optional<std::string> admit_worker(const std::string& endpoint, uint64_t instance);
};

// Keys and clients, before anything binds.
}  // namespace troupe::actors
