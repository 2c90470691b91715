#pragma once
// What the worker-frames target and the seed writer share: a tiny synthetic
// model, and schedulers brought to the point where a StepResult or a
// DraftResult is awaited, so the seeds are the very frames those states
// send and expect.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"
#include "messages/step_frames.h"
#include "service/scheduler.h"
#include "tests/fuzz/fuzz_support.h"

namespace troupe::fuzz {

inline constexpr int32_t kPageSize = 4;
inline constexpr int32_t kPages = 32;

// One layer, 32 wide: a forward costs microseconds even instrumented.
inline const std::string& tiny_model_path() {
  static const std::string path = [] {
    const auto p = std::filesystem::temp_directory_path() / ("troupe-fuzz-" + std::to_string(getpid()) + ".gguf");
    SyntheticModelSpec spec;
    spec.n_embd = 32;
    spec.n_layer = 1;
    spec.n_head = 2;
    spec.n_head_kv = 1;
    spec.n_ff = 64;
    spec.n_merges = 32;
    spec.context_length = 256;
    spec.seed = 7;
    write_synthetic_model(spec, p.string());
    return p.string();
  }();
  return path;
}

inline std::shared_ptr<Backend> tiny_backend() {
  BackendOptions o;
  o.kv_pages = kPages;
  o.page_size = kPageSize;
  o.context_tokens = 256;
  return std::shared_ptr<Backend>(open_backend(tiny_model_path(), o));
}

// Backends map the file: once they are open it is not needed by name.
inline void remove_tiny_model() { std::filesystem::remove(tiny_model_path()); }

inline std::shared_ptr<const Tokenizer> tiny_tokenizer(const Backend& backend) {
  return std::make_shared<const Tokenizer>(load_vocabulary(backend.file()));
}

inline service::SchedulerConfig scheduler_config(std::shared_ptr<const Tokenizer> tokenizer, bool draft_model) {
  service::SchedulerConfig c;
  c.tokenizer = std::move(tokenizer);
  c.kv_pages = kPages;
  c.page_size = kPageSize;
  c.planner.token_budget = 16;
  c.planner.max_context = 128;
  c.model_name = "fuzz";
  c.draft_model = draft_model;
  c.kv_transfer = true;
  c.page_bytes = 1024;
  int64_t t = 0;
  c.clock = [t]() mutable { return t += 1000000; };
  return c;
}

inline service::AdmitRequest fuzz_request(uint64_t id, SpeculationMode speculation) {
  service::AdmitRequest a;
  a.peer = "fuzz";
  a.client_id = id;
  a.prompt = {10, 11, 12, 13, 14, 15, 10, 11, 12};
  a.sampling.temperature = 0;
  a.sampling.max_tokens = 16;
  a.speculation = speculation;
  a.max_draft = 4;
  return a;
}

// A scheduler whose first step is out; `plan` is that StepPlan.
inline std::unique_ptr<service::Scheduler> stepping_scheduler(std::shared_ptr<const Tokenizer> tok, std::string& plan) {
  auto s = std::make_unique<service::Scheduler>(scheduler_config(std::move(tok), false));
  s->admit(fuzz_request(1, SpeculationMode::off));
  s->admit(fuzz_request(2, SpeculationMode::off));
  plan = s->next_step().bytes;
  return s;
}

// The answer a verifier gives `plan`: each wanting slice's next token.
inline std::string answer(const std::string& plan, int32_t token) {
  const auto* p = messages::check_step_plan(plan);
  std::vector<messages::SampledToken> sampled;
  if (p && p->slices())
    for (const auto* slice : *p->slices())
      if (slice->wants_token()) sampled.push_back({slice->sequence_id(), token, -0.5f, {}, {}, false, {}, {}, {}});
  return messages::step_result(p ? p->step() : 0, sampled, "", 0.1);
}

// A scheduler with a draft model, its request past the prompt, waiting for
// its DraftResult; `plan` is that DraftPlan (empty if none went out).
inline std::unique_ptr<service::Scheduler> drafting_scheduler(std::shared_ptr<const Tokenizer> tok, std::string& plan) {
  auto s = std::make_unique<service::Scheduler>(scheduler_config(std::move(tok), true));
  s->admit(fuzz_request(1, SpeculationMode::draft));
  plan.clear();
  for (int step = 0; step < 4; ++step) {
    service::SchedulerPlan p = s->next_step();
    if (p.kind == service::SchedulerPlan::Kind::drafts) {
      plan = std::move(p.bytes);
      break;
    }
    if (p.kind != service::SchedulerPlan::Kind::step) break;
    s->apply(answer(p.bytes, 12), "");
    (void)s->take_outbound();
  }
  return s;
}

}  // namespace troupe::fuzz
