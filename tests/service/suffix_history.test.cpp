// The server's suffix history (service/suffix_history.h): a tree per scope
// and one for the server, the least recently used scopes dropped over the
// byte budget, scopes named by session or job.
#include <catch2/catch.hpp>

#include <vector>

#include "service/admit_request.h"
#include "service/suffix_history.h"

using namespace troupe;
using namespace troupe::service;

namespace {
std::vector<int32_t> run(int32_t from, int32_t n) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n; ++i) out.push_back(from + i);
  return out;
}
}  // namespace

TEST_CASE("suffix history: scopes are a session's or a job's, a session's first") {
  CHECK(suffix_scope("s", "j") == "session:s");
  CHECK(suffix_scope("", "j") == "job:j");
  CHECK(suffix_scope("", "").empty());
  // A job's items are known by their peer (batch_jobs.cpp asks as job_peer).
  CHECK(job_of_peer(job_peer("job-7")) == "job-7");
  CHECK(job_of_peer("client-peer").empty());
  CHECK(job_of_peer(internal_peer("summary/s1")).empty());
}

TEST_CASE("suffix history: records an output in its scope and the server's, and drafts from them") {
  SuffixHistory h;
  h.record("job:a", run(100, 20));
  h.record("", run(200, 20));  // no scope: the server's tree only
  REQUIRE(h.scope("job:a"));
  CHECK(h.scope("job:a")->tokens() == 20);
  CHECK_FALSE(h.scope("job:b"));
  CHECK_FALSE(h.scope(""));
  CHECK(h.server().tokens() == 40);
  const std::vector<int32_t> tail = run(105, 3);
  CHECK(h.scope("job:a")->propose(tail, 4).tokens == run(108, 4));
  CHECK(h.scopes() == 1);
}

TEST_CASE("suffix history: over its byte budget drops the least recently used scopes first") {
  SuffixLimits limits;
  limits.scope_tokens = 1000;
  limits.server_tokens = 64;
  SuffixHistory probe(limits);
  probe.record("job:x", run(0, 200));
  const int64_t one_scope = probe.bytes() - probe.server().bytes();
  limits.max_bytes = probe.server().bytes() + 2 * one_scope + one_scope / 2;  // room for two scopes
  SuffixHistory h(limits);
  h.record("job:a", run(0, 200));
  h.record("job:b", run(1000, 200));
  h.record("job:a", run(5000, 1));  // a was used since b
  h.record("job:c", run(2000, 200));
  CHECK(h.bytes() <= limits.max_bytes);
  CHECK(h.scope("job:a"));
  CHECK_FALSE(h.scope("job:b"));
  CHECK(h.scope("job:c"));
  CHECK(h.server().tokens() <= 64);
}

TEST_CASE("suffix history with no memory (--suffix-memory 0) keeps nothing") {
  SuffixLimits limits;
  limits.max_bytes = 0;
  SuffixHistory h(limits);
  h.record("job:a", run(0, 50));
  CHECK_FALSE(h.scope("job:a"));
  CHECK(h.server().tokens() == 0);
}

TEST_CASE("suffix history: a scope it does not hold is rebuilt from earlier outputs, one it holds is kept") {
  SuffixHistory h;
  const std::vector<std::vector<int32_t>> stored = {run(100, 10), run(300, 10)};
  CHECK(h.seed("session:s", stored));
  REQUIRE(h.scope("session:s"));
  CHECK(h.scope("session:s")->tokens() == 20);
  CHECK(h.server().tokens() == 0);  // the server's tree holds what this server wrote
  const std::vector<int32_t> tail = {302, 303};
  CHECK(h.scope("session:s")->propose(tail, 4).tokens == std::vector<int32_t>{304, 305, 306, 307});
  // Held (this server recorded or rebuilt it): a seed changes nothing.
  h.record("session:s", run(500, 5));
  CHECK_FALSE(h.seed("session:s", stored));
  CHECK(h.scope("session:s")->tokens() == 25);
  CHECK(h.tokens() == 30);  // the scope's 25 and the server's 5
  // Nothing to seed from, no scope, or no history kept: nothing made.
  CHECK_FALSE(h.seed("session:t", {}));
  CHECK_FALSE(h.seed("", stored));
  SuffixHistory none(SuffixLimits{.max_bytes = 0});
  CHECK_FALSE(none.seed("job:j", stored));
  CHECK_FALSE(none.scope("job:j"));
}
