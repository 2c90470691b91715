// troupe serve: the inference service on a ZeroMQ socket, until SIGINT or SIGTERM.
#include <CLI/CLI.hpp>
#include <algorithm>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <pthread.h>
#include <thread>

#include "actors/service.h"
#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "cli/model_path.h"
#include "cli/serve_config.h"
#include "cli/server_auth.h"

namespace troupe::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::vector<std::string> tiers;
  actors::ServiceOptions service;
  BackendNames names;  // --device, --weights, --kv-type, --rope-*
  bool no_prefix_cache = false;
  bool no_jump_forward = false;
  bool no_kv_spill = false;
  std::string speculation = "auto-greedy";
  std::string escalate_signal = "geomean";
  std::string draft_model;
  std::string summary_model;
  double draft_timeout_s = 30;
  double worker_timeout_s = 120;
  std::string kv_codec = "auto";
  int session_idle_s = 300;
  double http_header_timeout_s = 5, http_body_timeout_s = 10, http_idle_timeout_s = 30;
  int64_t session_ttl_s = 0, job_ttl_s = 0, sweep_interval_s = 0;  // 0: off (the interval: from the TTLs)
  int64_t response_cache_ttl_s = 3600;
  ServerAuthArgs auth;
  std::string worker_key;
  double drain_timeout_s = 30;
  bool print_config = false;
};

// 30s, 15m, 24h, 7d, or bare seconds; "off" is 0.
CLI::Validator duration_validator() {
  const std::map<std::string, int64_t> seconds{{"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}, {"off", 0}};
  return CLI::AsNumberWithUnit(seconds, CLI::AsNumberWithUnit::CASE_SENSITIVE, "DURATION") &
         CLI::Range(int64_t{0}, int64_t{100} * 365 * 86400);
}

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Blocked before any thread starts, so that only sigwait sees them.
sigset_t block_stop_signals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  return stop;
}

// Requests name a model by its short name; a path stands for its file name.
std::string short_name(const std::string& model) {
  const std::filesystem::path given(model);
  return given.has_parent_path() || given.extension() == ".gguf" ? given.stem().string() : model;
}

// With tiers, the last (largest) is the model; --model, if given, must name it.
void resolve_tiers(ServeArgs& a, actors::ServiceOptions& o) {
  if (a.tiers.size() < 2) throw std::invalid_argument("--tiers needs two models or more, smallest first");
  if (!a.model.empty() && a.model != a.tiers.back())
    throw std::invalid_argument("--model " + a.model + " is not the last of --tiers (" + a.tiers.back() +
                                "); the last tier is the model, so give one or the other");
  a.model = a.tiers.back();
  if (o.tier_workers.size() > a.tiers.size() - 1)
    throw std::invalid_argument("--tier-workers names " + std::to_string(o.tier_workers.size()) + " workers for " +
                                std::to_string(a.tiers.size() - 1) + " smaller tiers");
  for (size_t i = 0; i + 1 < a.tiers.size(); ++i) {
    o.tier_paths.push_back(resolve_model(a.tiers[i]));
    o.tier_names.push_back(short_name(a.tiers[i]));
  }
}

// Summaries are written by a model this server runs: a tier, or the one model.
void resolve_summary_model(const ServeArgs& a, actors::ServiceOptions& o) {
  if (a.summary_model.empty()) return;
  const std::string name = short_name(a.summary_model);
  std::vector<std::string> served;
  for (const auto& t : a.tiers) served.push_back(short_name(t));
  if (served.empty()) served.push_back(short_name(a.model));
  if (std::find(served.begin(), served.end(), name) == served.end()) {
    std::string list;
    for (const auto& s : served) list += (list.empty() ? "" : ", ") + s;
    throw std::invalid_argument("--summary-model " + a.summary_model + " is not among this server's models (" + list +
                                "); serve it as one of --tiers");
  }
  // One model: it writes them on the default route.
  if (!a.tiers.empty()) o.summary_model = name;
}

void resolve_models(ServeArgs& a, actors::ServiceOptions& o) {
  o.planner.eviction.check();  // --kv-budget: before any model loads
  if (!a.tiers.empty()) {
    resolve_tiers(a, o);
  } else if (a.model.empty()) {
    throw std::invalid_argument("--model is required (or --tiers SMALL,LARGE)");
  }
  o.model_path = resolve_model(a.model);
  o.model_name = a.model;
  resolve_summary_model(a, o);
  if (!a.draft_model.empty()) {
    o.draft_model_path = resolve_model(a.draft_model);
    o.draft_model_name = short_name(a.draft_model);
  }
}

service::SpeculationDefault speculation_default(const std::string& name) {
  if (name == "auto-greedy") return {};  // auto for greedy requests, off for sampled ones
  return service::SpeculationDefault::every(name == "ngram"    ? SpeculationMode::ngram
                                            : name == "auto"   ? SpeculationMode::automatic
                                            : name == "draft"  ? SpeculationMode::draft
                                            : name == "suffix" ? SpeculationMode::suffix
                                                               : SpeculationMode::off);
}

// The spill codec's id; 255: auto (chosen per model).
uint8_t spill_codec(const std::string& name) { return name == "k8v4" ? 2 : name == "int8" ? 0 : name == "fp16" ? 1 : 255; }

// The flags whose ServiceOptions field has another unit or shape.
void apply_engine_flags(const ServeArgs& a, actors::ServiceOptions& o) {
  o.draft_timeout = millis(a.draft_timeout_s);
  o.worker_timeout = millis(a.worker_timeout_s);
  o.planner.prefix_caching = !a.no_prefix_cache;
  o.jump_forward = !a.no_jump_forward;
  o.kv_spill = !a.no_kv_spill;
  o.speculation = speculation_default(a.speculation);
  service::parse_hold_signal(a.escalate_signal, o.escalate_signal);  // checked by its option
  o.kv_spill_codec = spill_codec(a.kv_codec);
  o.session_idle = std::chrono::seconds(a.session_idle_s);
  o.http_server.header_timeout = millis(a.http_header_timeout_s);
  o.http_server.body_timeout = millis(a.http_body_timeout_s);
  o.http_server.idle_timeout = millis(a.http_idle_timeout_s);
}

void apply_store_flags(const ServeArgs& a, actors::ServiceOptions& o) {
  o.session_ttl = std::chrono::seconds(a.session_ttl_s);
  o.job_ttl = std::chrono::seconds(a.job_ttl_s);
  o.sweep_interval = std::chrono::seconds(a.sweep_interval_s);
  if (a.response_cache_ttl_s <= 0) throw std::invalid_argument("--response-cache-ttl must be positive (--response-cache-bytes 0 turns the cache off)");
  o.response_cache_ttl = std::chrono::seconds(a.response_cache_ttl_s);
  // RocksDB's memtables count from their arenas' first blocks, a few MiB in
  // all: a cap near that would delete every record to stay under it.
  if (o.max_store_bytes != 0 && o.max_store_bytes < (int64_t{64} << 20))
    throw std::invalid_argument("--max-store-bytes must be 0 (no cap) or at least 64M");
}

void apply_auth_flags(const ServeArgs& a, actors::ServiceOptions& o) {
  check_server_auth(a.auth);
  o.server_key = a.auth.server_key;
  o.clients_dir = a.auth.clients_dir;
  o.insecure = a.auth.insecure;
  o.worker_key = a.worker_key;
}

actors::ServiceOptions service_options(ServeArgs& a) {
  actors::ServiceOptions o = a.service;
  apply_backend_names(o.backend, a.names);
  resolve_models(a, o);
  apply_engine_flags(a, o);
  apply_store_flags(a, o);
  apply_auth_flags(a, o);
  return o;
}

// The first stop signal drains; a second while draining stops at once
// (what is stored stays stored).
int drain_on_signal(actors::Service& service, const sigset_t& stop, double drain_timeout_s) {
  int sig = 0;
  sigwait(&stop, &sig);
  std::fprintf(stderr, "troupe serve: draining (%s): admitting nothing new, finishing what runs for up to %g s\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", drain_timeout_s);
  std::fflush(stderr);
  std::thread([stop] {
    int again = 0;
    sigwait(&stop, &again);
    std::fprintf(stderr, "troupe serve: second signal: exiting without draining\n");
    std::_Exit(1);
  }).detach();
  const int32_t ended = service.drain(millis(drain_timeout_s));
  std::fprintf(stderr, "troupe serve: drained (%d request%s ended unfinished); stopping\n", ended, ended == 1 ? "" : "s");
  return 0;
}

int run_serve(ServeArgs& a) {
  const sigset_t stop = block_stop_signals();
  const actors::ServiceOptions o = service_options(a);
  actors::Service service(o);
  std::fprintf(stderr, "troupe serve: listening on %s; %s\n", o.listen.c_str(), service.describe().c_str());
  std::fflush(stderr);
  return drain_on_signal(service, stop, a.drain_timeout_s);
}

// The model, or a cascade of tiers ending in it (docs/CASCADE.md).
void add_model_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--model,-m", a.model, "Model name or GGUF path (with --tiers: the last tier)");
  cmd.add_option("--tiers", a.tiers,
                  "Cascade: model tiers, smallest first, one tokenizer (e.g. qwen2.5-coder-0.5b,qwen2.5-coder-1.5b); "
                  "each its own engine, the last is the model (docs/CASCADE.md)")
      ->delimiter(',');
  cmd.add_option("--tier-workers", a.service.tier_workers,
                  "With --tiers: the smaller tiers' engines in `troupe worker` processes at these endpoints, one "
                  "per smaller tier in order (an empty one: in this process)")
      ->delimiter(',');
  cmd.add_option("--tier", a.service.tier_policy,
                  "With --tiers, the route of requests that do not choose: small, large, a tier's name, escalate, "
                  "verify or auto")
      ->capture_default_str();
  cmd.add_option("--summary-model", a.summary_model,
                  "The model that writes session summaries (context policy summarize): one of this server's "
                  "models (with --tiers, a tier's name); default: the route of requests that do not choose");
}

// When a cascade hands a request to its next tier.
void add_escalation_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--escalate-threshold", a.service.escalate_threshold,
                  "escalate: hand a request to the next tier when its tokens' probability falls below this (with "
                  "--escalate-hold: the held tokens' geometric mean; else: the window's mean); 0: the rule's own, "
                  "0.82 with a hold, 0.3 without")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  cmd.add_option("--escalate-budget", a.service.escalate_budget,
                  "escalate: the share of requests the next tier takes, in (0, 1): each workload class's least "
                  "confident that share escalate, from its recent confidences (kept in the store across restarts); "
                  "a request's own escalate_threshold still wins. 0: off, --escalate-threshold decides")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  cmd.add_option("--escalate-signal", a.escalate_signal,
                  "escalate, with a hold: what the held tokens are judged by: geomean (their geometric mean "
                  "probability; default threshold 0.82) or tail (the geometric mean of their least probable tenth; "
                  "0.33), docs/CASCADE.md")
      ->check(CLI::IsMember({"geomean", "tail"}))
      ->capture_default_str();
  cmd.add_option("--escalate-hold", a.service.escalate_hold,
                  "escalate: hold the answer's first this many tokens back and judge them together; the next tier "
                  "writes the whole answer of one that falls short (0: switch mid-stream at the first unsure window)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd.add_option("--escalate-window", a.service.escalate_window, "escalate, with --escalate-hold 0: over this many tokens")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd.add_option("--escalate-within", a.service.escalate_within,
                  "escalate, with --escalate-hold 0: only among the answer's first this many tokens (0: anywhere)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--escalate-for-good", a.service.escalate_for_good,
                  "escalate: a session's turns start on the last tier after this many of them escalated (0: never)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
}

// Where clients connect (ZeroMQ, HTTP), what the HTTP port holds open, and
// how long a stop lets running requests finish.
void add_front_door_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--listen", a.service.listen, "ZeroMQ endpoint to bind")->capture_default_str();
  cmd.add_option("--http", a.service.http,
                  "Also serve HTTP on HOST:PORT: OpenAI's /v1/chat/completions and /v1/completions, /metrics, "
                  "/healthz, /readyz and a web page at / (docs/HTTP.md); off by default");
  cmd.add_option("--http-threads", a.service.http_server.handler_threads,
                  "HTTP requests served at once (a stream holds one); connections waiting for a request hold none")
      ->check(CLI::Range(2, 4096))
      ->capture_default_str();
  cmd.add_option("--http-max-connections", a.service.http_server.max_connections,
                  "HTTP connections open at once; past it a new one is answered 503 and closed")
      ->check(CLI::Range(16, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--http-max-connections-per-address", a.service.http_server.max_connections_per_address,
                  "HTTP connections open at once from one client address (before authentication)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--http-header-timeout", a.http_header_timeout_s,
                  "Seconds a request's header may take from its first byte; then the connection is closed")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd.add_option("--http-body-timeout", a.http_body_timeout_s,
                  "Seconds a request's body may take after its header")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd.add_option("--http-idle-timeout", a.http_idle_timeout_s,
                  "Seconds a kept-alive HTTP connection may wait for its next request")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd.add_option("--drain-timeout", a.drain_timeout_s,
                  "On SIGTERM or SIGINT: seconds running requests may take to finish before they end (a second "
                  "signal stops at once)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
}

// What a step and the KV pool hold, and what waits before either.
void add_scheduler_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--kv-tokens", a.service.kv_tokens, "KV cache capacity in tokens, all sequences together")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 26))
      ->capture_default_str();
  cmd.add_option("--context", a.service.planner.max_context, "Most tokens of one sequence (default: model's, <= 8192)")
      ->check(CLI::Range(16, 1 << 20));
  cmd.add_option("--kv-budget", a.service.planner.eviction.budget,
                 "KV positions a sequence keeps once its prompt is read: the rest evicted by attention (SnapKV-style); "
                 "0 keeps all")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  cmd.add_option("--token-budget", a.service.planner.token_budget, "Tokens per engine step (decode + prefill chunks)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd.add_option("--max-running", a.service.planner.max_running, "Sequences per step")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd.add_option("--max-waiting", a.service.planner.max_waiting, "Queued requests before queue-full errors")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--intake-frames", a.service.intake.max_frames,
                  "Prompts read but not yet tokenized before `overloaded` errors")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--intake-bytes", a.service.intake.max_bytes, "... and their bytes")
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 40))
      ->capture_default_str();
  cmd.add_flag("--no-prefix-cache", a.no_prefix_cache, "Do not reuse KV pages of shared prompt prefixes");
  cmd.add_flag("--no-jump-forward", a.no_jump_forward,
                "Constrained requests: decode the tokens a grammar forces one step each instead of appending them "
                "at once (to measure jump-forward)");
}

// Engines in other processes, and other front ends (docs/SCALE_OUT.md).
void add_worker_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--worker", a.service.workers,
                  "Run the verifier in `troupe worker` at this endpoint (this process keeps the tokenizer only); "
                  "give it again (or a list) for data-parallel workers, each its own KV pool (docs/SCALE_OUT.md)")
      ->delimiter(',');
  cmd.add_option("--join-listen", a.service.join_listen,
                  "Also take workers that announce themselves (`troupe worker --join`) at this ZeroMQ endpoint; "
                  "without --worker, start with the first one to join (docs/SCALE_OUT.md)");
  cmd.add_option("--peer", a.service.peers,
                  "Another front end's client endpoint (repeat for each): a turn for a session this store does not "
                  "hold takes it over from the one that holds it; under --auth curve the front ends share one key "
                  "pair, listed as an admin client (docs/SCALE_OUT.md)");
  cmd.add_option("--worker-timeout", a.worker_timeout_s,
                  "Seconds a worker may take to answer (a step, or the question at start); then it is lost: its "
                  "requests move to another worker, or end. A worker that dies is noticed at once")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
}

// Where sessions and jobs are stored, and how much of a step batch jobs get.
void add_job_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--data-dir", a.service.data_dir,
                  "Where sessions and jobs are stored (default: $XDG_DATA_HOME/troupe or ~/.local/share/troupe)");
  cmd.add_option("--events", a.service.events,
                  "ZeroMQ endpoint for job events, PUB (default: the --listen port + 1, or its ipc path + .events)");
  cmd.add_option("--job-concurrency", a.service.job_items_in_flight, "Batch-job items running at once")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd.add_option("--batch-share", a.service.planner.batch_tokens_when_busy,
                  "Tokens of a step batch-priority work (jobs) may use while interactive or chat requests run")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd.add_option("--batch-step", a.service.planner.batch_tokens_when_idle,
                  "Most tokens of a step batch-priority work may use when nothing else runs")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
}

void add_kv_codec_option(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--kv-spill-codec", a.kv_codec,
                  "How spilled KV pages are stored: k8v4 (keys 8-bit, values 4-bit: 0.40 of FP16), int8 (0.52) or "
                  "fp16 (lossless); auto: fp16 for gemma3, else k8v4 where the head dim is a multiple of 32")
      ->check(CLI::IsMember({"auto", "int8", "k8v4", "fp16"}))
      ->capture_default_str();
}

// Speculative decoding: its mode, and the draft model or worker.
void add_speculation_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--speculation", a.speculation,
                  "Speculative decoding for requests that do not choose: off, ngram, suffix (earlier outputs), "
                  "auto (per step, by acceptance), draft; auto-greedy: auto for greedy requests, off for sampled "
                  "ones (their seeded text then never depends on what the server served before)")
      ->check(CLI::IsMember({"off", "ngram", "suffix", "auto", "auto-greedy", "draft"}))
      ->capture_default_str();
  cmd.add_option("--max-draft", a.service.max_draft, "Most drafted tokens per step")->check(CLI::Range(1, 8))->capture_default_str();
  cmd.add_option("--suffix-memory", a.service.suffix_memory,
                  "Memory for suffix speculation's history of earlier outputs (per session, per job, server-wide; "
                  "least recently used dropped first): e.g. 256M (default); 0: a request drafts from itself only")
      ->transform(CLI::AsSizeValue(false), kUnitsValidator)
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--draft-model", a.draft_model,
                  "Draft model (name or GGUF path, the model's tokenizer) run in this process for speculation draft/auto");
  cmd.add_option("--draft-worker", a.service.draft_worker,
                  "Run the draft model in `troupe worker --role draft` at this endpoint instead");
  cmd.add_option("--draft-timeout", a.draft_timeout_s,
                  "Seconds to wait for the draft worker; then that step goes without drafts")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd.add_option("--draft-kv-tokens", a.service.draft_kv_tokens, "The draft model's KV capacity in tokens (0: --kv-tokens)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 26))
      ->capture_default_str();
}

// How long sessions, jobs and cached answers stay, and the store's cap.
void add_retention_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_flag("--no-kv-spill", a.no_kv_spill, "Do not store session KV pages (a resumed session recomputes its prefix)");
  cmd.add_option("--session-idle", a.session_idle_s, "Seconds after which an idle session's KV pages leave memory")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd.add_option("--session-ttl", a.session_ttl_s,
                  "Delete a session (turns, KV pages no other session shares) this long after its last turn: "
                  "30s, 15m, 24h, 7d; 0 or off: keep (default)")
      ->transform(duration_validator(), kUnitsValidator);
  cmd.add_option("--job-ttl", a.job_ttl_s,
                  "Delete a batch job (items, results) this long after it ended; a running job never: 0 or off: keep (default)")
      ->transform(duration_validator(), kUnitsValidator);
  cmd.add_option("--max-store-bytes", a.service.max_store_bytes,
                  "Cap on the store's size (e.g. 20G): over it, orphan KV pages, then the least recently updated ended "
                  "jobs and idle sessions are deleted and the store compacted; 0: no cap (default), else at least 64M")
      ->transform(CLI::AsSizeValue(false), kUnitsValidator)
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--response-cache-bytes", a.service.response_cache_bytes,
                  "Bytes of answers the response cache tier keeps for requests that ask for it (--cache on complete "
                  "and chat), oldest dropped first: e.g. 256M (default); 0: no response cache")
      ->transform(CLI::AsSizeValue(false), kUnitsValidator)
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--response-cache-ttl", a.response_cache_ttl_s,
                  "How long a cached answer is served: 30s, 15m, 24h, 7d (default 1h)")
      ->transform(duration_validator(), kUnitsValidator);
  cmd.add_option("--sweep-interval", a.sweep_interval_s,
                  "Time between retention sweeps (default: a tenth of the shortest TTL, within 1s..60s)")
      ->transform(duration_validator(), kUnitsValidator);
}

// CURVE keys for clients (--auth) and for workers.
void add_auth_options(CLI::App& cmd, ServeArgs& a) {
  add_server_auth_options(&cmd, a.auth);
  cmd.add_option("--worker-key", a.worker_key,
                  "The workers' CURVE public key (.key); this server shows them its --server-key pair")
      ->check(CLI::ExistingFile);
}

// Each client's share of the queue, the running slots and the KV pages.
void add_fairness_options(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--client-queue-share", a.service.planner.tenant_queue_share,
                  "Most of --max-waiting one client may hold queued (a fraction)")
      ->check(CLI::Range(0.001, 1.0))
      ->capture_default_str();
  cmd.add_option("--client-slot-share", a.service.planner.tenant_slot_share,
                  "Most of --max-running one client may hold while another is active (a fraction)")
      ->check(CLI::Range(0.001, 1.0))
      ->capture_default_str();
  cmd.add_option("--client-page-share", a.service.planner.tenant_page_share,
                  "Most of the KV pages one client may hold while another is active (a fraction)")
      ->check(CLI::Range(0.001, 1.0))
      ->capture_default_str();
}

}  // namespace
Run add_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model to streaming clients over ZeroMQ");
  add_config_options(*cmd, a->print_config);  // first: the file fills what the flags leave
  add_model_options(*cmd, *a);
  add_escalation_options(*cmd, *a);
  add_front_door_options(*cmd, *a);
  a->service.backend.threads = default_threads();
  add_backend_flags(*cmd, a->service.backend, a->names);
  add_scheduler_options(*cmd, *a);
  add_worker_options(*cmd, *a);
  add_job_options(*cmd, *a);
  add_kv_codec_option(*cmd, *a);
  add_speculation_options(*cmd, *a);
  add_retention_options(*cmd, *a);
  add_auth_options(*cmd, *a);
  add_fairness_options(*cmd, *a);
  a->service.planner.max_context = 0;
  return [a, cmd] {
    if (a->print_config) return std::fputs(config_toml(*cmd).c_str(), stdout) < 0 ? 1 : 0;
    return run_serve(*a);
  };
}

}  // namespace troupe::cli
