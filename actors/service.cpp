#include "actors/service.h"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <cstdlib>

#include "actors/client_gateway.h"
#include "actors/ingestion_actor.h"
#include "actors/job_actor.h"
#include "actors/persistence_actor.h"
#include "actors/draft_actor.h"
#include "actors/remote_worker_actor.h"
#include "actors/scheduler_actor.h"
#include "actors/verifier_actor.h"
#include "engine/chat_template.h"
#include "engine/gguf_file.h"
#include "engine/kv_page_codec.h"
#include "engine/model_identity.h"
#include "engine/model_config.h"
#include "engine/page_pool.h"
#include "engine/speculation/model_drafter.h"
#include "engine/vocabulary.h"

namespace troupe::actors {

struct Service::Impl {
  ServiceOptions options;
  std::shared_ptr<Backend> backend;  // in-process verifier only
  std::shared_ptr<Backend> draft_backend;  // in-process draft model only
  std::string draft_text;
  std::vector<std::string> draft_names;  // what requests may call the draft model
  std::unique_ptr<GgufFile> file;    // split topology: tokenizer and config only
  messages::WorkerInfo worker;
  std::string backend_text;
  std::shared_ptr<const Tokenizer> tokenizer;
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::shared_ptr<ClientGateway> gateway;
  std::shared_ptr<persistence::Store> store;
  std::shared_ptr<EventSocket> events;
  caf::actor verifier, drafter, scheduler, ingestion, persistence, jobs;
  bool kv_spill = false;
};

std::filesystem::path default_data_dir() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "troupe";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".local/share/troupe";
  return std::filesystem::current_path() / "troupe-data";
}


// The engine's threads own the cores; the actors on CAF's pool (scheduler,
// ingestion, jobs) wake a few times per step. CAF's default work-stealing
// pool runs max(cores, 4) workers that poll while idle (yield, then 50 us
// sleeps), which took ~4 % of the CPU under load, and every tick taken from
// an engine thread stalls both at the step's barrier. Work sharing blocks idle
// workers on a condition variable; two of them keep a long tokenization in
// ingestion from delaying the scheduler.
static void configure_actor_pool(caf::actor_system_config& config) {
  config.set("scheduler.policy", caf::atom("sharing"));
  config.set("scheduler.max-threads", size_t{2});
}

Service::Service(ServiceOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = std::move(options);
  const GgufFile* file = nullptr;
  ModelConfig config;
  int32_t kv_pages = 0, page_size = 0;
  bool can_copy = false, can_transfer = false;
  if (s.options.worker.empty()) {
    BackendOptions bo = s.options.backend;
    bo.kv_pages = static_cast<int32_t>((s.options.kv_tokens + bo.page_size - 1) / bo.page_size);
    bo.max_batch_tokens = std::max<int64_t>(bo.max_batch_tokens, s.options.planner.token_budget);
    s.backend = open_backend(s.options.model_path, bo);
    file = &s.backend->file();
    config = s.backend->config();
    kv_pages = s.backend->pages().capacity();
    page_size = s.backend->page_size();
    can_copy = s.backend->can_copy_pages();
    can_transfer = s.backend->can_transfer_pages();
    s.backend_text = s.backend->describe();
  } else {
    s.file = std::make_unique<GgufFile>(GgufFile::open(s.options.model_path));
    file = s.file.get();
    config = read_model_config(*file);
    s.worker = query_worker(s.options.worker, s.options.worker_timeout);
    if (s.worker.n_vocab != config.n_vocab)
      throw std::runtime_error("the worker at " + s.options.worker + " serves a model with " +
                               std::to_string(s.worker.n_vocab) + " tokens; " + s.options.model_path + " has " +
                               std::to_string(config.n_vocab));
    kv_pages = s.worker.kv_pages;
    page_size = s.worker.page_size;
    can_copy = s.worker.can_copy_pages;
    can_transfer = s.worker.can_transfer_pages;
    s.backend_text = "verifier in worker " + s.options.worker + " (" + s.worker.model + ", KV " +
                     std::to_string(kv_pages) + " pages x " + std::to_string(page_size) + " tokens)";
  }
  auto tok = std::make_shared<Tokenizer>(load_vocabulary(*file));
  s.tokenizer = tok;
  PlannerLimits limits = s.options.planner;
  if (limits.max_context <= 0) limits.max_context = static_cast<int32_t>(std::min<int64_t>(config.n_ctx_train, 8192));
  // A sequence can never hold more KV than the whole cache: admitting one
  // that could would stall it mid-prefill.
  limits.max_context = static_cast<int32_t>(std::min<int64_t>(limits.max_context, static_cast<int64_t>(kv_pages) * page_size));
  s.options.planner = limits;

  // The draft model: its tokens must be the model's, or its drafts mean nothing.
  if (!s.options.draft_model_path.empty() && !s.options.draft_worker.empty())
    throw std::invalid_argument("give a draft model or a draft worker, not both");
  if (!s.options.draft_model_path.empty()) {
    BackendOptions bo = s.options.backend;
    const int64_t tokens = s.options.draft_kv_tokens > 0 ? s.options.draft_kv_tokens : s.options.kv_tokens;
    bo.kv_pages = static_cast<int32_t>((tokens + bo.page_size - 1) / bo.page_size);
    s.draft_backend = open_backend(s.options.draft_model_path, bo);
    const std::string why = draft_pair_mismatch(tok->vocabulary(), load_vocabulary(s.draft_backend->file()));
    if (!why.empty()) throw std::runtime_error(s.options.draft_model_path + " cannot draft for this model: " + why);
    s.draft_text = "; draft model " + s.draft_backend->config().name + " in process";
    if (!s.options.draft_model_name.empty()) s.draft_names.push_back(s.options.draft_model_name);
    s.draft_names.push_back(std::filesystem::path(s.options.draft_model_path).stem().string());
    s.draft_names.push_back(s.draft_backend->config().name);
  } else if (!s.options.draft_worker.empty()) {
    const messages::DrafterInfo d = query_draft_worker(s.options.draft_worker, s.options.draft_timeout);
    if (d.vocabulary != vocabulary_fingerprint(tok->vocabulary()))
      throw std::runtime_error("the draft worker at " + s.options.draft_worker + " serves " + d.model +
                               ", whose tokens differ from this model's");
    s.draft_text = "; draft model " + d.model + " in worker " + s.options.draft_worker;
    s.draft_names.push_back(d.model);
  } else if (s.options.speculation == SpeculationMode::draft) {
    throw std::invalid_argument("--speculation draft needs --draft-model or --draft-worker");
  }

  // The store and sockets first: a locked store or a port in use fails
  // here, before any actor starts.
  if (s.options.data_dir.empty()) s.options.data_dir = default_data_dir();
  s.store = std::make_shared<persistence::Store>(s.options.data_dir);
  if (s.options.events.empty()) s.options.events = messages::default_events_endpoint(s.options.listen);
  s.gateway = std::make_shared<ClientGateway>(s.options.listen, s.options.socket);
  s.events = std::make_shared<EventSocket>();
  s.events->pub = messages::bind_publisher(s.events->ctx, s.options.events, s.options.socket);
  configure_actor_pool(s.config);
  s.system = std::make_unique<caf::actor_system>(s.config);
  if (s.backend)
    s.verifier = s.system->spawn<caf::detached>(verifier_actor, s.backend);
  else
    s.verifier = s.system->spawn<caf::detached>(remote_worker_actor, s.options.worker, s.options.worker_timeout);
  if (s.draft_backend)
    s.drafter = s.system->spawn<caf::detached>(draft_actor, s.draft_backend, s.draft_names.front());
  else if (!s.options.draft_worker.empty())
    s.drafter = s.system->spawn<caf::detached>(remote_worker_actor, s.options.draft_worker, s.options.draft_timeout);
  PersistenceConfig pc;
  pc.store = s.store;
  pc.gateway = s.gateway;
  pc.model_name = s.options.model_name.empty() ? config.name : s.options.model_name;
  const KvPageShape shape = KvPageShape::of(config, page_size);
  pc.kv = can_transfer && s.options.kv_spill;
  if (s.options.kv_spill_codec == 255)
    s.options.kv_spill_codec = static_cast<uint8_t>(shape.supports(KvPageCodec::k8v4) ? KvPageCodec::k8v4 : KvPageCodec::int8);
  const auto codec = static_cast<KvPageCodec>(s.options.kv_spill_codec);
  if (!shape.supports(codec))
    throw std::runtime_error("--kv-spill-codec k8v4 needs a head dimension that is a multiple of 32; this model's is " +
                             std::to_string(shape.head_dim));
  pc.kv_identity = kv_identity(*file, config, page_size, s.options.kv_spill_codec);
  pc.model_fingerprint = pc.kv_identity.model;
  pc.page_size = page_size;
  pc.page_bytes = shape.encoded_bytes(codec);
  pc.idle_ms = s.options.session_idle.count();
  s.kv_spill = pc.kv;
  s.persistence = s.system->spawn<caf::detached>(persistence_actor, pc);
  SchedulerConfig sc;
  sc.tokenizer = s.tokenizer;
  sc.kv_pages = kv_pages;
  sc.page_size = page_size;
  sc.planner = limits;
  sc.model_name = s.options.model_name.empty() ? config.name : s.options.model_name;
  sc.gateway = s.gateway;
  sc.verifier = s.verifier;
  sc.drafter = s.drafter;
  sc.persistence = s.persistence;
  sc.kv_transfer = pc.kv;
  sc.page_bytes = pc.page_bytes;
  sc.spill_codec = s.options.kv_spill_codec;
  sc.session_idle = s.options.session_idle;
  s.scheduler = s.system->spawn(scheduler_actor, sc);
  const ChatFormat chat_format = detect_chat_format(tok->vocabulary(), config.architecture);
  JobConfig jc;
  jc.tokenizer = s.tokenizer;
  jc.chat_format = chat_format;
  jc.max_context = limits.max_context;
  jc.max_in_flight = std::max(1, s.options.job_items_in_flight);
  jc.events = s.events;
  jc.gateway = s.gateway;
  jc.scheduler = s.scheduler;
  jc.persistence = s.persistence;
  s.jobs = s.system->spawn(job_actor, jc);
  IngestionConfig ic;
  ic.tokenizer = s.tokenizer;
  ic.chat_format = chat_format;
  ic.limits = s.options.client;
  ic.max_context = limits.max_context;
  ic.max_samples = can_copy ? 16 : 1;
  ic.page_size = page_size;
  ic.speculation = s.options.speculation;
  ic.max_draft = s.options.max_draft;
  ic.draft_model = static_cast<bool>(s.drafter);
  ic.draft_names = s.draft_names;
  ic.gateway = s.gateway;
  ic.scheduler = s.scheduler;
  ic.persistence = s.persistence;
  ic.jobs = s.jobs;
  s.ingestion = s.system->spawn(ingestion_actor, ic);
  s.gateway->start(s.ingestion);
}

Service::~Service() {
  Impl& s = *impl_;
  if (s.gateway) s.gateway->stop();
  if (s.system) {
    for (const auto& a : {s.ingestion, s.jobs, s.scheduler, s.persistence, s.verifier, s.drafter})
      if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    // Drop our handles: a detached actor's thread waits until its actor is
    // destroyed, and the system's destructor waits for that thread.
    s.ingestion = s.jobs = s.scheduler = s.persistence = s.verifier = s.drafter = caf::actor();
    s.system.reset();
  }
  s.events.reset();
  s.store.reset();
}

std::string Service::describe() const {
  const Impl& s = *impl_;
  return s.backend_text + s.draft_text + "; context " + std::to_string(s.options.planner.max_context) + " tokens, budget " +
         std::to_string(s.options.planner.token_budget) + " tokens a step; data in " + s.options.data_dir.string() +
         "; job events on " + s.options.events + (s.kv_spill ? std::string("; session KV spills to the store as ") +
                                (s.options.kv_spill_codec == 2 ? "k8v4" : "int8") : std::string());
}

const std::string& Service::events_endpoint() const { return impl_->options.events; }

}  // namespace troupe::actors
