#pragma once
// The service's Prometheus metrics: latency histograms, event counters and
// the text exposition format (docs/METRICS.md lists them). Recorded by the
// scheduler and the job runner on their actors' threads, read by the HTTP
// gateway's /metrics on its own: every call takes one short lock.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "messages/client_frames.h"

namespace troupe::service {

// Cumulative histogram over fixed upper bounds (seconds), as Prometheus has it.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket, not cumulative; last: +Inf
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What the scrape asks for at the time: the scheduler's Stats (its gauges
// and the counters it keeps anyway). The stores' counts are pushed instead
// (jobs_running, sessions_stored).
struct Snapshot {
  messages::StatsFields stats;
};

// The store's state as the persistence actor last saw it: writes going
// through, or refused since a storage error (a full disk) and why.
struct StoreState {
  bool known = false;  // false: no store (or not yet reported)
  bool writable = true;
  std::string reason;
  int64_t write_failures = 0;
};

// The HTTP front door's refusals (messages::HttpServer counts them).
struct FrontDoorCounts {
  int64_t open = 0, refused = 0, header_timeouts = 0, body_timeouts = 0, idle_closed = 0, too_large = 0, bad_requests = 0;
};
std::string http_front_door_metrics(const FrontDoorCounts& c);  // in the text exposition format

class ServiceMetrics {
 public:
  ServiceMetrics();

  void ttft(double seconds);
  void inter_token(double seconds);
  void queue_wait(double seconds);
  void step(double seconds, int64_t tokens);
  // A request's end: a finish reason (stop, length, ...) or an error code's name.
  void request_done(const std::string& outcome, int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens);
  void speculation(const std::string& source, int64_t drafted, int64_t accepted, int64_t windows = 0);
  std::vector<messages::SpeculationSourceFields> speculation_sources() const;  // by source, for `troupe stats`
  void job_item(const std::string& outcome);
  // A job item's answer from this tier (its name) failed the job's check.
  void check_failure(const std::string& tier);
  void response_cache(const std::string& outcome);  // hit, miss or bypassed
  void http_request(const std::string& route, int status);
  // Counts the actors that own them push on each change (the job actor):
  // a scrape then reads them without asking anyone.
  void jobs_running(int64_t n);
  void sessions_stored(int64_t n);  // the persistence actor
  void store_state(StoreState s);   // the persistence actor
  StoreState store_state() const;
  // Cascade tiers: each tier's scheduler pushes its figures after each step
  // (a tier with several workers: each replica its own, summed in tiers()).
  void tier(int32_t index, int32_t replica, messages::TierStatsFields figures);
  std::vector<messages::TierStatsFields> tiers() const;
  // escalate's budget rule: the router pushes its classes' figures as they change.
  void escalation_classes(std::vector<messages::EscalationClassFields> classes);
  std::vector<messages::EscalationClassFields> escalation_classes() const;
  // Data-parallel workers: each replica's scheduler pushes its figures.
  void worker(int32_t tier, int32_t replica, messages::WorkerStatsFields figures);
  std::vector<messages::WorkerStatsFields> workers() const;

  // The text exposition format (version 0.0.4) of everything, with the gauges.
  std::string prometheus(const Snapshot& now) const;

 private:
  mutable std::mutex mutex_;
  Histogram ttft_, itl_, queue_, step_;
  std::map<std::string, uint64_t> outcomes_, job_items_, response_cache_;
  std::map<std::pair<std::string, int>, uint64_t> http_;
  std::map<std::string, std::array<uint64_t, 3>> speculation_;  // source: drafted, accepted, windows
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0, step_tokens_ = 0;
  std::map<std::pair<int32_t, int32_t>, messages::TierStatsFields> tiers_;
  std::map<std::pair<int32_t, int32_t>, messages::WorkerStatsFields> workers_;
  std::vector<messages::EscalationClassFields> escalation_classes_;
  std::map<std::string, uint64_t> check_failures_;  // by tier name
  int64_t jobs_running_ = -1, sessions_ = -1;  // -1: not yet known (left out)
  StoreState store_;
};

}  // namespace troupe::service
