// The Prometheus exposition (service/metrics.h): histograms cumulative,
// counters by label, the scheduler's own counters and gauges from its Stats.
#include <catch2/catch.hpp>

#include <sstream>

#include "service/metrics.h"

using namespace troupe;

namespace {

// The value of one sample line, or -1 when absent.
double value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

}  // namespace

TEST_CASE("histogram buckets are cumulative and end in +Inf, with sum and count") {
  service::ServiceMetrics m;
  m.ttft(0.003);
  m.ttft(0.2);
  m.ttft(500);  // past the last bound
  const std::string text = m.prometheus({});
  CHECK(value(text, "troupe_time_to_first_token_seconds_bucket{le=\"0.001\"}") == 0);
  CHECK(value(text, "troupe_time_to_first_token_seconds_bucket{le=\"0.005\"}") == 1);
  CHECK(value(text, "troupe_time_to_first_token_seconds_bucket{le=\"0.25\"}") == 2);
  CHECK(value(text, "troupe_time_to_first_token_seconds_bucket{le=\"120\"}") == 2);
  CHECK(value(text, "troupe_time_to_first_token_seconds_bucket{le=\"+Inf\"}") == 3);
  CHECK(value(text, "troupe_time_to_first_token_seconds_count") == 3);
  CHECK(value(text, "troupe_time_to_first_token_seconds_sum") == 500.203);
  CHECK(text.find("# TYPE troupe_time_to_first_token_seconds histogram") != std::string::npos);
}

TEST_CASE("outcomes, tokens, speculation, the response cache and HTTP routes are counted by label") {
  service::ServiceMetrics m;
  m.request_done("stop", 10, 4, 3);
  m.request_done("stop", 5, 0, 2);
  m.request_done("too_long", 0, 0, 0);
  m.speculation("ngram", 8, 5, 2);
  m.speculation("suffix", 6, 6, 1);
  m.speculation("ngram", 4, 1, 1);
  m.http_request("/v1/completions", 200);
  m.response_cache("hit");
  m.response_cache("hit");
  m.response_cache("bypassed");
  service::Snapshot now;
  now.stats.running = 2, now.stats.pages_free = 7, now.stats.preemptions = 3;
  m.sessions_stored(4);  // pushed by the persistence actor; the job actor has pushed nothing yet
  const std::string text = m.prometheus(now);
  CHECK(value(text, "troupe_requests_total{outcome=\"stop\"}") == 2);
  CHECK(value(text, "troupe_requests_total{outcome=\"too_long\"}") == 1);
  CHECK(value(text, "troupe_prompt_tokens_total") == 15);
  CHECK(value(text, "troupe_cached_prompt_tokens_total") == 4);
  CHECK(value(text, "troupe_completion_tokens_total") == 5);
  CHECK(value(text, "troupe_speculation_drafted_tokens_total{source=\"ngram\"}") == 12);
  CHECK(value(text, "troupe_speculation_accepted_tokens_total{source=\"ngram\"}") == 6);
  CHECK(value(text, "troupe_speculation_windows_total{source=\"ngram\"}") == 3);
  CHECK(value(text, "troupe_speculation_windows_total{source=\"suffix\"}") == 1);
  const auto sources = m.speculation_sources();  // what `troupe stats` shows
  REQUIRE(sources.size() == 2);
  CHECK(sources[1].source == "suffix");
  CHECK(sources[1].drafted == 6);
  CHECK(sources[1].windows == 1);
  CHECK(value(text, "troupe_http_requests_total{route=\"/v1/completions\",status=\"200\"}") == 1);
  CHECK(value(text, "troupe_response_cache_total{outcome=\"hit\"}") == 2);
  CHECK(value(text, "troupe_response_cache_total{outcome=\"bypassed\"}") == 1);
  CHECK(value(text, "troupe_requests_running") == 2);
  CHECK(value(text, "troupe_kv_pages_free") == 7);
  CHECK(value(text, "troupe_preemptions_total") == 3);
  CHECK(value(text, "troupe_sessions") == 4);
  CHECK(value(text, "troupe_jobs_running") == -1);  // not known: left out
  m.jobs_running(2);
  CHECK(value(m.prometheus(now), "troupe_jobs_running") == 2);
}
