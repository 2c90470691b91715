#include "service/metrics.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace troupe::service {
namespace {

// Latency buckets from 1 ms to 2 min: TTFT under load and long prefills both land inside.
std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(number(v)).append("\n");
}

void counter(std::string& out, const char* name, const char* help, uint64_t v) {
  header(out, name, "counter", help);
  sample(out, name, "", static_cast<double>(v));
}

void gauge(std::string& out, const char* name, const char* help, int64_t v) {
  header(out, name, "gauge", help);
  sample(out, name, "", static_cast<double>(v));
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    sample(out, std::string(name) + "_bucket", "le=\"" + number(h.bounds()[i]) + "\"", static_cast<double>(cumulative));
  }
  sample(out, std::string(name) + "_bucket", "le=\"+Inf\"", static_cast<double>(h.count()));
  sample(out, std::string(name) + "_sum", "", h.sum());
  sample(out, std::string(name) + "_count", "", static_cast<double>(h.count()));
}

}  // namespace

void Histogram::observe(double v) {
  if (!(v >= 0)) v = 0;  // NaN or a clock step backwards
  const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  ++counts_[static_cast<size_t>(at)];
  sum_ += v;
  ++count_;
}

ServiceMetrics::ServiceMetrics()
    : ttft_(latency_bounds()), itl_(latency_bounds()), queue_(latency_bounds()), step_(latency_bounds()) {}

void ServiceMetrics::ttft(double s) {
  std::lock_guard lock(mutex_);
  ttft_.observe(s);
}
void ServiceMetrics::inter_token(double s) {
  std::lock_guard lock(mutex_);
  itl_.observe(s);
}
void ServiceMetrics::queue_wait(double s) {
  std::lock_guard lock(mutex_);
  queue_.observe(s);
}
void ServiceMetrics::step(double s, int64_t tokens) {
  std::lock_guard lock(mutex_);
  step_.observe(s);
  step_tokens_ += static_cast<uint64_t>(std::max<int64_t>(tokens, 0));
}
void ServiceMetrics::request_done(const std::string& outcome, int64_t prompt, int64_t cached, int64_t completion) {
  std::lock_guard lock(mutex_);
  ++outcomes_[outcome];
  prompt_tokens_ += static_cast<uint64_t>(std::max<int64_t>(prompt, 0));
  cached_tokens_ += static_cast<uint64_t>(std::max<int64_t>(cached, 0));
  completion_tokens_ += static_cast<uint64_t>(std::max<int64_t>(completion, 0));
}
void ServiceMetrics::speculation(const std::string& source, int64_t drafted, int64_t accepted, int64_t windows) {
  std::lock_guard lock(mutex_);
  auto& [d, a, w] = speculation_[source];
  d += static_cast<uint64_t>(std::max<int64_t>(drafted, 0));
  a += static_cast<uint64_t>(std::max<int64_t>(accepted, 0));
  w += static_cast<uint64_t>(std::max<int64_t>(windows, 0));
}
std::vector<messages::SpeculationSourceFields> ServiceMetrics::speculation_sources() const {
  std::lock_guard lock(mutex_);
  std::vector<messages::SpeculationSourceFields> out;
  for (const auto& [source, n] : speculation_) out.push_back({source, n[0], n[1], n[2]});
  return out;
}
void ServiceMetrics::job_item(const std::string& outcome) {
  std::lock_guard lock(mutex_);
  ++job_items_[outcome];
}
void ServiceMetrics::response_cache(const std::string& outcome) {
  std::lock_guard lock(mutex_);
  ++response_cache_[outcome];
}
void ServiceMetrics::http_request(const std::string& route, int status) {
  std::lock_guard lock(mutex_);
  ++http_[{route, status}];
}

void ServiceMetrics::jobs_running(int64_t n) {
  std::lock_guard lock(mutex_);
  jobs_running_ = n;
}

std::string http_front_door_metrics(const FrontDoorCounts& c) {
  std::string out;
  gauge(out, "troupe_http_connections", "HTTP connections open", c.open);
  const auto n = [](int64_t v) { return static_cast<uint64_t>(v); };
  counter(out, "troupe_http_connections_refused_total", "HTTP connections refused: over the total or per-address cap",
          n(c.refused));
  header(out, "troupe_http_closed_total", "counter", "HTTP connections closed by the front door, by reason");
  sample(out, "troupe_http_closed_total", "reason=\"header_timeout\"", static_cast<double>(c.header_timeouts));
  sample(out, "troupe_http_closed_total", "reason=\"body_timeout\"", static_cast<double>(c.body_timeouts));
  sample(out, "troupe_http_closed_total", "reason=\"idle\"", static_cast<double>(c.idle_closed));
  sample(out, "troupe_http_closed_total", "reason=\"too_large\"", static_cast<double>(c.too_large));
  sample(out, "troupe_http_closed_total", "reason=\"malformed\"", static_cast<double>(c.bad_requests));
  return out;
}

void ServiceMetrics::store_state(StoreState s) {
  std::lock_guard lock(mutex_);
  store_ = std::move(s);
}

StoreState ServiceMetrics::store_state() const {
  std::lock_guard lock(mutex_);
  return store_;
}

void ServiceMetrics::sessions_stored(int64_t n) {
  std::lock_guard lock(mutex_);
  sessions_ = n;
}

void ServiceMetrics::tier(int32_t index, int32_t replica, messages::TierStatsFields figures) {
  std::lock_guard lock(mutex_);
  tiers_[{index, replica}] = std::move(figures);
}

void ServiceMetrics::check_failure(const std::string& tier) {
  std::lock_guard lock(mutex_);
  ++check_failures_[tier];
}

void ServiceMetrics::escalation_classes(std::vector<messages::EscalationClassFields> classes) {
  std::lock_guard lock(mutex_);
  escalation_classes_ = std::move(classes);
}

std::vector<messages::EscalationClassFields> ServiceMetrics::escalation_classes() const {
  std::lock_guard lock(mutex_);
  return escalation_classes_;
}

std::vector<messages::TierStatsFields> ServiceMetrics::tiers() const {
  std::lock_guard lock(mutex_);
  std::vector<messages::TierStatsFields> out;
  int32_t last = -1;
  for (const auto& [key, t] : tiers_) {
    if (key.first != last) {
      out.push_back(t);
      last = key.first;
      continue;
    }
    messages::TierStatsFields& sum = out.back();  // another replica of the same tier
    sum.requests += t.requests, sum.escalated_in += t.escalated_in, sum.escalations += t.escalations;
    sum.tokens += t.tokens, sum.forward_tokens += t.forward_tokens, sum.steps += t.steps;
    sum.drafted += t.drafted, sum.accepted += t.accepted;
    sum.running += t.running, sum.waiting += t.waiting, sum.pages_used += t.pages_used, sum.pages_total += t.pages_total;
  }
  for (auto& t : out)  // counted by the job runner, by the tier's name
    if (auto it = check_failures_.find(t.name); it != check_failures_.end()) t.check_failures = it->second;
  return out;
}

void ServiceMetrics::worker(int32_t tier, int32_t replica, messages::WorkerStatsFields figures) {
  std::lock_guard lock(mutex_);
  workers_[{tier, replica}] = std::move(figures);
}

std::vector<messages::WorkerStatsFields> ServiceMetrics::workers() const {
  std::lock_guard lock(mutex_);
  std::vector<messages::WorkerStatsFields> out;
  for (const auto& [key, w] : workers_) out.push_back(w);
  return out;
}

namespace {

// One counter series per key of `counts` (label `label`="key").
template <typename Map, typename Value>
void labelled(std::string& out, const char* name, const char* help, const char* label, const Map& counts, Value value) {
  header(out, name, "counter", help);
  for (const auto& [key, v] : counts)
    sample(out, name, std::string(label) + "=\"" + key + "\"", static_cast<double>(value(v)));
}

// What the engine's steps did, from the scheduler's figures.
void engine_counters(std::string& out, const messages::StatsFields& g) {
  counter(out, "troupe_steps_total", "Engine steps", g.steps);
  counter(out, "troupe_generated_tokens_total", "Tokens sampled by engine steps", g.tokens_generated);
  counter(out, "troupe_preemptions_total", "Sequences preempted to free KV pages", g.preemptions);
  counter(out, "troupe_kv_pages_spilled_total", "Session KV pages the store confirmed", g.pages_spilled);
  counter(out, "troupe_kv_pages_restored_total", "KV pages read back from the store instead of computed", g.pages_restored);
  counter(out, "troupe_kv_pages_swapped_out_total", "Preempted sequences' KV pages kept in host memory", g.pages_swapped_out);
  counter(out, "troupe_kv_pages_swapped_in_total", "... and put back instead of computed", g.pages_swapped_in);
  counter(out, "troupe_kv_tokens_shifted_total", "KV positions moved by context shifts instead of computed", g.tokens_shifted);
  counter(out, "troupe_kv_evictions_total", "Sequences cut to their KV budget (serve --kv-budget)", g.kv_evictions);
  counter(out, "troupe_kv_positions_evicted_total", "KV positions those cuts dropped from memory", g.kv_positions_evicted);
  if (g.expert_tokens.empty()) return;
  header(out, "troupe_expert_tokens_total", "counter", "Tokens each expert of the mixture of experts ran, over its layers");
  for (size_t e = 0; e < g.expert_tokens.size(); ++e)
    sample(out, "troupe_expert_tokens_total", "expert=\"" + std::to_string(e) + "\"", static_cast<double>(g.expert_tokens[e]));
}

void pool_gauges(std::string& out, const messages::StatsFields& g) {
  gauge(out, "troupe_requests_running", "Sequences in the running batch", g.running);
  gauge(out, "troupe_requests_waiting", "Requests queued for admission", g.waiting);
  gauge(out, "troupe_kv_pages_total", "KV pages of the pool", g.pages_total);
  gauge(out, "troupe_kv_pages_used", "KV pages held by sequences", g.pages_used);
  gauge(out, "troupe_kv_pages_cached", "Unreferenced KV pages kept for prefix reuse", g.pages_cached);
  gauge(out, "troupe_kv_pages_free", "KV pages free", g.pages_free);
  if (g.local_pages_total > 0) {  // a sliding-window model's local layers
    gauge(out, "troupe_kv_local_pages_total", "Local (sliding-window) layers' page slots", g.local_pages_total);
    gauge(out, "troupe_kv_local_pages_used", "Of those, held for pages a window still reaches", g.local_pages_used);
  }
}

// Cascade tiers, one series each (label tier = the model's name).
void tier_series(std::string& out, const std::vector<messages::TierStatsFields>& tiers) {
  using Field = uint64_t messages::TierStatsFields::*;
  const std::tuple<const char*, Field, const char*> counters[] = {
      {"requests", &messages::TierStatsFields::requests, "Requests that started on the tier"},
      {"escalated_in", &messages::TierStatsFields::escalated_in,
       "Requests continued on the tier after a smaller one escalated them"},
      {"escalations", &messages::TierStatsFields::escalations, "Requests the tier handed to the next one mid-stream"},
      {"tokens", &messages::TierStatsFields::tokens, "Tokens the tier wrote"},
      {"forward_tokens", &messages::TierStatsFields::forward_tokens,
       "Positions the tier's model computed (prompts, decode, verify windows)"},
      {"steps", &messages::TierStatsFields::steps, "The tier's forward passes"},
      {"drafted_tokens", &messages::TierStatsFields::drafted, "Drafted tokens the tier verified"},
      {"accepted_tokens", &messages::TierStatsFields::accepted, "Of those, kept"},
      {"check_failures", &messages::TierStatsFields::check_failures,
       "Job items whose answer from the tier failed their job's check"}};
  if (tiers.empty()) return;
  for (const auto& [suffix, field, help] : counters) {
    const std::string name = std::string("troupe_tier_") + suffix + "_total";
    header(out, name.c_str(), "counter", help);
    for (const auto& t : tiers) sample(out, name, "tier=\"" + t.name + "\"", static_cast<double>(t.*field));
  }
}

// escalate's budget rule, one series per workload class (label class).
void escalation_series(std::string& out, const std::vector<messages::EscalationClassFields>& classes) {
  if (classes.empty()) return;
  using Field = float messages::EscalationClassFields::*;
  const std::tuple<const char*, Field, const char*> gauges[] = {
      {"troupe_escalation_share", &messages::EscalationClassFields::share,
       "Moving share of the class's recent judged requests that escalated (serve --escalate-budget)"},
      {"troupe_escalation_threshold", &messages::EscalationClassFields::threshold,
       "The confidence the class's next request is judged against"}};
  for (const auto& [name, field, help] : gauges) {
    header(out, name, "gauge", help);
    for (const auto& c : classes) sample(out, name, "class=\"" + c.name + "\"", static_cast<double>(c.*field));
  }
  header(out, "troupe_escalation_judged", "gauge", "Confidences the class's figures hold");
  for (const auto& c : classes) sample(out, "troupe_escalation_judged", "class=\"" + c.name + "\"", c.judged);
}

// Data-parallel workers, one series each (label worker = its endpoint).
void worker_series(std::string& out, const std::vector<messages::WorkerStatsFields>& workers) {
  using Field = uint64_t messages::WorkerStatsFields::*;
  const std::tuple<const char*, Field, const char*> counters[] = {
      {"requests", &messages::WorkerStatsFields::requests, "Requests placed on the worker"},
      {"moved_in", &messages::WorkerStatsFields::moved_in, "Requests the worker continued after another worker was lost"},
      {"moved_out", &messages::WorkerStatsFields::moved_out, "Requests that left the worker when it was lost"},
      {"lost", &messages::WorkerStatsFields::lost, "Times the worker was lost (connection dropped, silent, or restarted)"},
      {"tokens", &messages::WorkerStatsFields::tokens, "Tokens the worker wrote"},
      {"forward_tokens", &messages::WorkerStatsFields::forward_tokens, "Positions the worker computed"},
      {"steps", &messages::WorkerStatsFields::steps, "The worker's forward passes"}};
  const auto label = [](const messages::WorkerStatsFields& w) {
    return "worker=\"" + w.endpoint + "\"" + (w.tier.empty() ? std::string() : ",tier=\"" + w.tier + "\"");
  };
  if (workers.empty()) return;
  for (const auto& [suffix, field, help] : counters) {
    const std::string name = std::string("troupe_worker_") + suffix + "_total";
    header(out, name.c_str(), "counter", help);
    for (const auto& w : workers) sample(out, name, label(w), static_cast<double>(w.*field));
  }
  header(out, "troupe_worker_up", "gauge", "1 while the worker answers, 0 while it is lost");
  for (const auto& w : workers) sample(out, "troupe_worker_up", label(w), w.up ? 1 : 0);
}

}  // namespace

std::string ServiceMetrics::prometheus(const Snapshot& now) const {
  const messages::StatsFields& g = now.stats;
  std::lock_guard lock(mutex_);
  std::string out;
  out.reserve(8192);
  histogram(out, "troupe_time_to_first_token_seconds", "Request accepted to its first token", ttft_);
  histogram(out, "troupe_inter_token_seconds", "Time between a stream's tokens after the first", itl_);
  histogram(out, "troupe_queue_wait_seconds", "Request accepted to first scheduled", queue_);
  histogram(out, "troupe_step_seconds", "One engine step (forward pass and sampling of the batch)", step_);
  const auto count = [](uint64_t n) { return n; };
  labelled(out, "troupe_requests_total", "Requests (samples) ended, by finish reason or error code", "outcome", outcomes_, count);
  counter(out, "troupe_prompt_tokens_total", "Prompt tokens of ended requests", prompt_tokens_);
  counter(out, "troupe_cached_prompt_tokens_total", "Of those, served from cached or restored KV pages", cached_tokens_);
  counter(out, "troupe_completion_tokens_total", "Tokens generated for ended requests", completion_tokens_);
  counter(out, "troupe_step_tokens_total", "Tokens computed by engine steps (prefill and decode)", step_tokens_);
  engine_counters(out, g);
  labelled(out, "troupe_speculation_drafted_tokens_total", "Tokens proposed by speculation, by source", "source", speculation_,
           [](const auto& n) { return n[0]; });
  labelled(out, "troupe_speculation_accepted_tokens_total", "Of those, kept by the target model", "source", speculation_,
           [](const auto& n) { return n[1]; });
  labelled(out, "troupe_speculation_windows_total", "Verify windows, by the source that drafted them", "source", speculation_,
           [](const auto& n) { return n[2]; });
  labelled(out, "troupe_job_items_total", "Batch-job items ended, by outcome", "outcome", job_items_, count);
  labelled(out, "troupe_response_cache_total", "Requests that asked for the response cache tier, by outcome", "outcome",
           response_cache_, count);
  header(out, "troupe_http_requests_total", "counter", "HTTP requests answered, by route and status");
  for (const auto& [key, n] : http_)
    sample(out, "troupe_http_requests_total", "route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"",
           static_cast<double>(n));
  pool_gauges(out, g);
  if (sessions_ >= 0) gauge(out, "troupe_sessions", "Stored sessions", sessions_);
  if (jobs_running_ >= 0) gauge(out, "troupe_jobs_running", "Batch jobs running", jobs_running_);
  if (store_.known) {
    gauge(out, "troupe_store_writable", "1: the store takes writes; 0: degraded, writes refused (a full or failing disk)",
          store_.writable ? 1 : 0);
    counter(out, "troupe_store_write_failures_total", "Store writes refused for storage errors",
            static_cast<uint64_t>(store_.write_failures));
  }
  tier_series(out, g.tiers);
  escalation_series(out, g.escalation_classes);
  worker_series(out, g.workers);
  gauge(out, "troupe_draining", "1 while the server drains (SIGTERM) and admits nothing new", g.draining ? 1 : 0);
  return out;
}

}  // namespace troupe::service
