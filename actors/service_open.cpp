// Service's models and workers (actors/service_impl.h): keys, the verifier
// in this process or in workers (and those that join later), the draft
// model, the smaller tiers, and the session policy with its spill codec.
#include <cstdio>
#include <stdexcept>

#include "actors/service_impl.h"

namespace troupe::actors {

void Service::Impl::open_auth() {
  const ServiceOptions& o = options;
  if (!o.server_key.empty()) {
    curve = messages::server_curve(o.server_key);
    clients = std::make_shared<const messages::ClientDirectory>(messages::ClientDirectory::read(o.clients_dir));
  }
  if (!o.worker_key.empty()) worker_curve = messages::client_curve(o.server_key, o.worker_key);
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
    if (options.planner.eviction.on() && !backend->can_evict_kv())
      throw std::invalid_argument("--kv-budget: this engine cannot evict KV (it needs the CPU backend and a model without "
                                  "sliding-window layers; " + backend->config().name + " on " + backend->describe() + ")");
    v = {&backend->file(),
         backend->config(),
         backend->pages().capacity(),
         backend->page_size(),
         backend->pages().local_capacity(),
         backend->can_copy_pages(),
         backend->can_transfer_pages(),
         backend->can_shift_kv(),
         backend->can_evict_kv(),
         backend->kv_type(),
         backend->describe(),
         {}};
    return v;
  }
  file = std::make_unique<GgufFile>(GgufFile::open(options.model_path));
  v.file = file.get();
  v.config = read_model_config(*file, options.backend.overrides);
  pool.emplace(options.model_path, file_fingerprint(*file), v.config.n_vocab);
  if (!options.join_listen.empty())
    join_listener = std::make_unique<gateways::JoinListener>(
        options.join_listen, [this](const std::string& e, uint64_t i) { return admit_worker(e, i); }, curve, clients);
  if (options.workers.empty()) {  // --join-listen alone: the first worker to join
    std::unique_lock<std::mutex> g(workers_lock);
    std::fprintf(stderr, "troupe serve: waiting for a worker to join at %s\n", options.join_listen.c_str());
    std::fflush(stderr);
    first_join.wait(g, [&] { return first_worker.has_value(); });
    options.workers.push_back(*first_worker);
  }
  for (const std::string& endpoint : options.workers) {
    const messages::WorkerInfo w = query_worker_waiting(endpoint);
    if (const std::string why = pool->refusal(endpoint, w); !why.empty()) {
      let_go(endpoint);
      throw std::runtime_error(why);
    }
    if (options.planner.eviction.on() && !w.can_evict_kv) {
      let_go(endpoint);
      throw std::invalid_argument("--kv-budget: the worker at " + endpoint + " cannot evict KV (it needs the CPU "
                                  "backend and a model without sliding-window layers)");
    }
    std::lock_guard<std::mutex> g(workers_lock);  // the listener reads the pool
    pool->add(endpoint, w);
  }
  return pooled_side(std::move(v));
}

// The verifier as the workers' pool makes it.
VerifierSide Service::Impl::pooled_side(VerifierSide v) const {
  v.kv_pages = pool->kv_pages();
  v.kv_local_pages = pool->kv_local_pages();
  v.page_size = pool->page_size();
  v.kv_type = pool->kv_type();
  v.can_copy = pool->can_copy();
  v.can_transfer = pool->can_transfer();
  v.can_shift = pool->can_shift();
  v.can_evict = pool->can_evict() && v.config.sliding_window == 0;
  v.workers = pool->workers();
  v.text = pool->describe();
  return v;
}

// A worker announced itself on the join socket (JoinListener's thread).
std::optional<std::string> Service::Impl::admit_worker(const std::string& endpoint, uint64_t instance) {
  std::unique_lock<std::mutex> g(workers_lock);
  if (pool->has(endpoint)) return std::string();  // ours already; its scheduler notices a restart
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
    if (const std::string why = pool->refusal(endpoint, w); !why.empty()) {
      let_go(endpoint);
      return why;
    }
    first_worker = endpoint;
    first_join.notify_all();
    return std::string();
  }
  if (const std::string why = pool->refusal(endpoint, w); !why.empty()) {
    let_go(endpoint);
    std::fprintf(stderr, "troupe serve: refused a worker: %s\n", why.c_str());
    std::fflush(stderr);
    return why;
  }
  spawn_replica(endpoint, w.kv_pages, w.kv_local_pages, true);
  pool->add(endpoint, w);
  std::fprintf(stderr, "troupe serve: worker %s joined (%s, KV %d pages x %d tokens); %zu workers\n", endpoint.c_str(),
               w.model.c_str(), w.kv_pages, w.page_size, replicas.size());
  std::fflush(stderr);
  return std::string();
}

// The draft model: its tokens must be the model's, or its drafts mean nothing.
void Service::Impl::open_draft_model() {
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
  }
}

// The smaller tiers, each its own engine; one tokenizer across all of them
// (a request moves between tiers as tokens). The first tier's model drafts
// for the last when no draft model is given: that is the verify policy.
void Service::Impl::open_tiers(const VerifierSide& v) {
  if (options.tier_paths.empty()) return;
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
                                      : service::default_escalate_threshold(options.escalate_hold, options.escalate_signal);
  tier_table->window = options.escalate_window;
  tier_table->within = options.escalate_within;
  tier_table->hold = options.escalate_hold;
  tier_table->signal = options.escalate_signal;
  tier_table->escalate_for_good = options.escalate_for_good;
  tier_table->escalate_budget = options.escalate_budget;
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
  options.kv_spill_codec = static_cast<uint8_t>(
      service::choose_spill_codec(options.kv_spill_codec, v.kv_type, v.config.architecture, shape));
  const auto codec = static_cast<KvPageCodec>(options.kv_spill_codec);
  p.kv_identity = kv_identity(*v.file, v.config, v.page_size, options.kv_spill_codec, static_cast<uint8_t>(v.kv_type));
  p.model_fingerprint = p.kv_identity.model;
  p.page_size = v.page_size;
  p.page_bytes = shape.encoded_bytes(codec);
  p.idle_ms = options.session_idle.count();
  // With several workers a session's next turn may run on another worker
  // than its last (overloaded, drained, lost), whose memory lacks its pages:
  // they are always read from the store, and the scheduler adopts only
  // those its worker does not hold already.
  if (service::several_workers(options)) p.idle_ms = 0;
  kv_spill = p.kv;
  return p;
}

// One worker's verifier link, KV allocator and scheduler (the in-process
// verifier when `endpoint` is empty). A worker that joins a running service
// is then handed to the router, which places on it from its next request.

}  // namespace troupe::actors
