#pragma once
// What `troupe serve` is asked to run (actors/service.h starts it), and the
// checks of those options that need no model or socket: flags that contradict
// each other, endpoints served to anyone, a context the KV pool cannot hold.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/schedule/batch_planner.h"
#include "messages/client_validation.h"
#include "messages/http_server.h"
#include "service/cascade.h"
#include "messages/zmq_sockets.h"
#include "service/intake.h"
#include "service/speculation_default.h"

namespace troupe::service {

struct ServiceOptions {
  std::string listen = "tcp://127.0.0.1:7700";
  // The HTTP port (docs/HTTP.md), host:port; empty: none.
  std::string http;
  messages::HttpServerLimits http_server;  // its connections, deadlines and handler threads
  std::string model_path;
  std::string model_name;   // reported in Stats
  BackendOptions backend;   // kv_pages is derived from kv_tokens
  int64_t kv_tokens = 32768;  // KV capacity shared by all sequences
  PlannerLimits planner;      // max_context 0: the model's training context, at most 8192
  messages::ClientLimits client;
  messages::SocketLimits socket;
  // Prompts read from the socket and not yet tokenized; past either bound a
  // prompt is answered `overloaded` at once (service/intake.h).
  IntakeLimits intake;
  // Split topology: the target verifier runs in `troupe worker` at these
  // endpoints instead of in this process (which then loads only the
  // tokenizer and config from model_path). Several: data-parallel workers,
  // each its own KV pool, requests placed among them (docs/SCALE_OUT.md).
  std::vector<std::string> workers;
  std::chrono::milliseconds worker_timeout{120000};
  // Workers may also join by themselves (`troupe worker --join`) at this
  // endpoint. Without any `workers`, the service starts with the first one
  // that joins.
  std::string join_listen;
  // Other front ends (their client endpoints) that may hold sessions this
  // one's store does not: a turn for such a session takes it over from the
  // one that holds it (docs/SCALE_OUT.md, "A session's hand-off").
  std::vector<std::string> peers;
  // Where the RocksDB store (sessions, jobs) lives; created if missing.
  std::filesystem::path data_dir;
  // The job event socket (PUB); empty: derived from `listen` (tcp port + 1,
  // or the ipc path + ".events").
  std::string events;
  int32_t job_items_in_flight = 4;  // job items in the scheduler at once
  // KV tiers: a session turn's pages are spilled to the store (INT8) and
  // restored for its next turn after a restart or a long idle.
  bool kv_spill = true;
  // KvPageCodec of spilled pages: int8 (0), k8v4 (2), or 255: k8v4 where
  // the head dim allows it (a multiple of 32), else int8.
  uint8_t kv_spill_codec = 255;
  // Constrained requests: tokens their grammar forces are appended without
  // a decode step each (jump-forward); off for measuring its gain.
  bool jump_forward = true;
  std::chrono::milliseconds session_idle{300000};  // then a session's cached pages are freed
  // Retention (persistence/retention.h); 0: kept for ever, no cap.
  std::chrono::milliseconds session_ttl{0};  // since the session's last turn
  std::chrono::milliseconds job_ttl{0};      // since the job ended
  int64_t max_store_bytes = 0;
  std::chrono::milliseconds sweep_interval{0};  // 0: a tenth of the shortest TTL, within [1 s, 60 s]
  // The response cache tier (persistence/response_cache.h): answers to
  // requests that ask for it, kept this long, within this many bytes (0: none).
  int64_t response_cache_bytes = 256ll << 20;
  std::chrono::milliseconds response_cache_ttl{3600 * 1000};
  // Authentication (messages/curve_auth.h). With server_key (this server's
  // .secret) and clients_dir: CURVE on the client and event sockets, and
  // sessions and jobs owned by the client that made them. worker_key: the
  // workers' public key; this server reaches them with server_key's pair.
  // Without CURVE only loopback endpoints are served, unless `insecure`.
  std::filesystem::path server_key, clients_dir, worker_key;
  bool insecure = false;
  // Speculative decoding for requests that do not choose (engine/speculation):
  // auto for greedy requests, none for sampled ones unless --speculation says.
  SpeculationDefault speculation;
  int32_t max_draft = 8;
  // Suffix speculation's history of earlier outputs, every tree together
  // (service/suffix_history.h); 0: none (a request drafts from itself only).
  int64_t suffix_memory = int64_t{256} << 20;
  // The draft model (same tokenizer as the model): loaded here and run by
  // the draft actor, or run by `troupe worker --role draft` at draft_worker.
  std::string draft_model_path;
  std::string draft_model_name;  // what requests may call it (besides the model's own name)
  std::string draft_worker;
  int64_t draft_kv_tokens = 0;  // its KV capacity; 0: kv_tokens
  // A draft worker that does not answer in this time costs its step's
  // drafts only (drafting pauses a few seconds), not the requests.
  std::chrono::milliseconds draft_timeout{30000};
  // Cascade tiers (service/cascade.h): the smaller models, smallest first,
  // each its own engine in this process; model_path is the last (largest)
  // tier. With tiers and no draft model given, the first tier's model also
  // drafts for the last (the verify policy). Empty: one model.
  std::vector<std::string> tier_paths, tier_names;
  // A smaller tier's engine in a `troupe worker` at this endpoint, one per
  // smaller tier in order; empty or missing: in this process.
  std::vector<std::string> tier_workers;
  std::string tier_policy = "escalate";  // requests that do not choose
  // The tier that writes session summaries (service/batch_jobs.h); empty:
  // the route of requests that do not choose.
  std::string summary_model;
  // The defaults are the rule measured best on HumanEval (docs/BENCHMARKS.md):
  // the answer's first 48 tokens held back, escalated when their geometric
  // mean probability is under 0.82. With hold 0: the switch rule (a window's
  // mean under the threshold among the answer's first `within` tokens).
  float escalate_threshold = 0;  // 0: the rule's own, 0.82 with a hold, 0.3 without
  float escalate_budget = 0;     // the budget rule's share (service/escalation_budget.h); 0: the threshold rule
  int32_t escalate_hold = 48;
  HoldSignal escalate_signal = HoldSignal::geomean;  // what the held tokens are judged by
  int32_t escalate_window = 1;
  int32_t escalate_within = 8;  // 0: anywhere in the answer
  int32_t escalate_for_good = 3;
};

// Refuses (std::invalid_argument, naming the flags) options that contradict
// each other or serve a non-loopback endpoint without --auth curve or
// --insecure. A flat list of independent checks, in the order they are told.
void check_service_options(const ServiceOptions& options);

// The context a sequence may hold: the one asked for (0: the model's
// training context, at most 8192), which the KV pool must hold whole.
// Throws std::invalid_argument, in numbers, when an explicit one cannot.
int32_t fitted_context(int32_t asked, int64_t model_context, int32_t kv_pages, int32_t page_size);

// Requests have a choice of worker: several given, or more may join.
inline bool several_workers(const ServiceOptions& o) { return o.workers.size() > 1 || !o.join_listen.empty(); }

}  // namespace troupe::service
