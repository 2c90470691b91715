// Retention on a real store, with the clock passed in: expired sessions go
// with the pages no other session lists, ended jobs go after their TTL and
// running ones never, and a store over its byte cap sheds orphan pages and
// then its least recently updated records until it is under.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <numeric>
#include <random>

#include "messages/client_validation.h"
#include "persistence/jobs.h"
#include "persistence/kv_pages.h"
#include "persistence/retention.h"
#include "persistence/session_turns.h"

using namespace troupe;
using namespace troupe::persistence;

namespace {

constexpr int32_t kPageSize = 4;
const KvIdentity kIdentity{11, 22};

struct TempStore {
  std::filesystem::path path;
  explicit TempStore(const std::string& tag) {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("troupe-retention-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(++n));
    std::filesystem::remove_all(path);
  }
  ~TempStore() { std::filesystem::remove_all(path); }
};

SessionPolicy sessions_policy(int64_t page_bytes = 8) {
  SessionPolicy p;
  p.model_name = "test";
  p.kv = true;
  p.kv_identity = kIdentity;
  p.page_size = kPageSize;
  p.page_bytes = page_bytes;
  p.idle_ms = 1000;
  return p;
}

std::vector<int32_t> seq(int32_t n, int32_t first = 1) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// Two pages every such history shares, then one page of its own.
std::vector<int32_t> shared_prefix_then(std::initializer_list<int32_t> own) {
  std::vector<int32_t> v = seq(8);
  v.insert(v.end(), own);
  return v;
}

// A turn of session `id` stored at Unix time `at` with history `tokens`.
void chat(SessionTurns& turns, const std::string& id, std::vector<int32_t> tokens, int64_t at) {
  REQUIRE(turns.begin(id, 0).error == wire::ErrorCode::none);
  SessionCommit c;
  c.session_id = id;
  c.messages = {{"user", "question"}, {"assistant", "answer"}};
  c.tokens = std::move(tokens);
  c.done.reason = wire::FinishReason::stop;
  REQUIRE(messages::check_response(turns.commit(std::move(c), 0, at))->body_type() == wire::ResponseBody::Done);
}

bool known(SessionTurns& turns, const std::string& id) {
  return messages::check_response(turns.show(1, id))->body_type() == wire::ResponseBody::Session;
}

size_t stored_pages(Store& store) {
  size_t n = 0;
  store.scan(Family::kv_pages, "", [&](std::string_view, std::string_view) { return ++n, true; });
  return n;
}

// A whole pass, as the persistence actor runs it: slice after slice, caches
// told of what went.
SweepCounts sweep(Sweeper& sweeper, SessionTurns& turns, int64_t now, int* steps = nullptr) {
  for (int n = 1; n < 10000; ++n) {
    SweepStep s = sweeper.step(now);
    for (const auto& id : s.sessions) turns.forget(id);
    if (steps) *steps = n;
    if (s.done) return s.counts;
  }
  FAIL("the pass never ended");
  return {};
}

RetentionPolicy ttl(int64_t session_ms, int64_t job_ms = 0) {
  RetentionPolicy p;
  p.session_ttl_ms = session_ms;
  p.job_ttl_ms = job_ms;
  p.page_size = kPageSize;
  return p;
}

}  // namespace

TEST_CASE("a session not updated for the TTL is deleted with its pages, one updated since stays", "[retention]") {
  TempStore dir("ttl");
  Store store(dir.path);
  SessionTurns turns(store, sessions_policy());
  chat(turns, "old", seq(8), 1000);
  REQUIRE(turns.spill({"old", seq(8), 0, {"AAAAAAAA", "BBBBBBBB"}}) == 2);
  chat(turns, "new", seq(8, 100), 5000);
  Sweeper sweeper(store, ttl(3000), [&](const std::string& id) { return turns.busy(id); });
  CHECK_FALSE(sweep(sweeper, turns, 3999).any());  // not yet 3 s old
  const SweepCounts c = sweep(sweeper, turns, 4000);
  CHECK(c.sessions == 1);
  CHECK(c.pages == 2);
  CHECK(c.bytes > 2 * 8);
  CHECK_FALSE(known(turns, "old"));  // unknown_session, not an answer from the cache
  CHECK(messages::check_response(turns.show(1, "old"))->body_as_Error()->code() == wire::ErrorCode::unknown_session);
  CHECK(known(turns, "new"));
  CHECK(stored_pages(store) == 0);
  // A new session of the same name starts afresh.
  SessionStart again = turns.begin("old", 0);
  CHECK(again.turns.empty());
  CHECK(again.kv_stored == 0);
}

TEST_CASE("pages shared by two sessions' prefix stay until the last session listing them expires", "[retention]") {
  TempStore dir("shared");
  Store store(dir.path);
  SessionTurns turns(store, sessions_policy());
  const auto a = shared_prefix_then({50, 51, 52, 53}), b = shared_prefix_then({60, 61, 62, 63});
  chat(turns, "a", a, 1000);
  chat(turns, "b", b, 2000);
  REQUIRE(turns.spill({"a", a, 0, {"SHARED-0", "SHARED-1", "A-OWN-2!"}}) == 3);
  REQUIRE(turns.spill({"b", b, 0, {"SHARED-0", "SHARED-1", "B-OWN-2!"}}) == 3);
  REQUIRE(stored_pages(store) == 4);
  Sweeper sweeper(store, ttl(1500), [&](const std::string& id) { return turns.busy(id); });

  const SweepCounts first = sweep(sweeper, turns, 2600);  // a is 1.6 s old, b 0.6 s
  CHECK(first.sessions == 1);
  CHECK(first.pages == 1);  // a's own page; the two shared ones are b's too
  CHECK_FALSE(known(turns, "a"));
  CHECK(stored_pages(store) == 3);
  SessionTurns restarted(store, sessions_policy());  // nothing in memory: b restores from the store
  SessionStart start = restarted.begin("b", 0);
  CHECK(start.kv_data == std::vector<std::string>{"SHARED-0", "SHARED-1", "B-OWN-2!"});
  restarted.release("b");

  const SweepCounts second = sweep(sweeper, turns, 3600);
  CHECK(second.sessions == 1);
  CHECK(second.pages == 3);
  CHECK(stored_pages(store) == 0);
}

TEST_CASE("pages a session spills while a pass runs count for that pass", "[retention]") {
  TempStore dir("race");
  Store store(dir.path);
  SessionTurns turns(store, sessions_policy());
  const auto late = shared_prefix_then({50, 51, 52, 53}), old = shared_prefix_then({60, 61, 62, 63});
  chat(turns, "late", late, 1000);  // expired too, but it spills during the pass
  chat(turns, "old", old, 1000);
  REQUIRE(turns.spill({"old", old, 0, {"SHARED-0", "SHARED-1", "OLD-OWN!"}}) == 3);
  RetentionPolicy p = ttl(1000);
  p.slice = 1;
  Sweeper sweeper(store, p, [&](const std::string& id) { return turns.busy(id); });
  SweepStep s = sweeper.step(5000);  // reads "late" only, which lists no page yet
  REQUIRE_FALSE(s.done);
  REQUIRE(turns.spill({"late", late, 0, {"SHARED-0", "SHARED-1", "LATE-OWN"}}) == 3);
  sweeper.session_written("late");
  const SweepCounts c = sweep(sweeper, turns, 5000);
  CHECK(c.sessions == 1);  // "old"; "late" was written since the pass read it
  CHECK(c.pages == 1);     // old's own page: the shared ones are late's now
  CHECK(known(turns, "late"));
  SessionTurns restarted(store, sessions_policy());
  CHECK(restarted.begin("late", 0).kv_data == std::vector<std::string>{"SHARED-0", "SHARED-1", "LATE-OWN"});
}

TEST_CASE("a session with a turn in flight is never deleted, and goes once it is idle and still expired", "[retention]") {
  TempStore dir("busy");
  Store store(dir.path);
  SessionTurns turns(store, sessions_policy());
  chat(turns, "s", seq(4), 1000);
  Sweeper sweeper(store, ttl(1000), [&](const std::string& id) { return turns.busy(id); });
  REQUIRE(turns.begin("s", 0).error == wire::ErrorCode::none);  // a turn starts
  CHECK(sweep(sweeper, turns, 9000).sessions == 0);
  turns.release("s");  // it failed: the session was not updated
  CHECK(sweep(sweeper, turns, 9000).sessions == 1);
  CHECK_FALSE(known(turns, "s"));
}

TEST_CASE("jobs go job_ttl after they ended, with their items and results, a running job never", "[retention]") {
  TempStore dir("jobs");
  Store store(dir.path);
  JobBook book(store);
  const auto job = [&](const std::string& id, wire::JobState state, int64_t updated_ms) {
    JobRecord j;
    j.id = id;
    j.items = {"one", "two"};
    j.created_ms = 0;
    j.updated_ms = updated_ms;
    book.create(j);
    messages::JobItemFields r;
    r.index = 0;
    r.text = "result";
    j.state = state;
    book.record_result(j, r);
  };
  job("running-old", wire::JobState::running, 1000);
  job("finished-old", wire::JobState::finished, 1000);
  job("cancelled-old", wire::JobState::cancelled, 2000);
  job("finished-recent", wire::JobState::finished, 9500);
  SessionTurns turns(store, sessions_policy());
  Sweeper sweeper(store, ttl(0, 5000), [](const std::string&) { return false; });
  std::vector<std::string> swept;
  for (;;) {
    SweepStep s = sweeper.step(10000);
    swept.insert(swept.end(), s.jobs.begin(), s.jobs.end());
    if (s.done) {
      CHECK(s.counts.jobs == 2);
      break;
    }
  }
  std::sort(swept.begin(), swept.end());
  CHECK(swept == std::vector<std::string>{"cancelled-old", "finished-old"});
  CHECK_FALSE(book.load("finished-old"));
  CHECK_FALSE(book.load("cancelled-old"));
  CHECK(book.load("running-old"));
  CHECK(book.load("finished-recent"));
  size_t left = 0;  // no item or result of a swept job is left behind
  store.scan(Family::jobs, "", [&](std::string_view k, std::string_view) {
    CHECK(k.find("finished-old") == std::string_view::npos);
    CHECK(k.find("cancelled-old") == std::string_view::npos);
    return ++left, true;
  });
  CHECK(left == 2 * (1 + 2 + 1));
}

TEST_CASE("over the byte cap: orphan pages go first, then the least recently updated records, and compaction returns the space",
          "[retention]") {
  TempStore dir("cap");
  Store store(dir.path);
  constexpr int64_t kPage = 32 << 10;  // random bytes: nothing to compress
  SessionTurns turns(store, sessions_policy(kPage));
  std::mt19937 rng(7);
  const auto noise = [&] {
    std::string s(static_cast<size_t>(kPage), '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };
  // Ten sessions of three pages each (no prefix shared), updated at t = 1..10 s.
  for (int i = 0; i < 10; ++i) {
    const std::string id = std::string("s").append(std::to_string(i));  // not "s" + ...: GCC 12's false -Wrestrict
    const auto tokens = seq(12, 1000 * (i + 1));
    chat(turns, id, tokens, 1000 * (i + 1));
    REQUIRE(turns.spill({id, tokens, 0, {noise(), noise(), noise()}}) == 3);
  }
  // Four orphans, as a history that moved on leaves them.
  KvPageStore kv(store, kIdentity, kPageSize, kPage);
  Batch b;
  const std::vector<std::string> orphan_pages{noise(), noise(), noise(), noise()};
  kv.put(seq(16, 500000), 0, orphan_pages, b);
  store.write(b);
  store.compact();
  const int64_t full = store.approximate_bytes();
  REQUIRE(full > 34 * kPage);
  REQUIRE(full < 40 * kPage);

  RetentionPolicy p;
  p.page_size = kPageSize;
  p.max_store_bytes = full - 10 * kPage;  // room for 24 of the 34 pages
  p.slice = 2;
  Sweeper sweeper(store, p, [&](const std::string& id) { return id == "s0" && turns.busy(id); });
  REQUIRE(turns.begin("s0", 0).error == wire::ErrorCode::none);  // the oldest has a turn in flight
  int steps = 0;
  const SweepCounts c = sweep(sweeper, turns, 20000, &steps);
  CHECK(c.over_cap);
  CHECK(c.store_bytes == full);
  CHECK(c.pages == 4 + 6);  // the orphans, then s1's and s2's
  CHECK(c.sessions == 2);
  CHECK(c.bytes >= 10 * kPage);
  CHECK(steps > 4);  // in slices
  CHECK(known(turns, "s0"));  // busy: kept though the oldest
  CHECK_FALSE(known(turns, "s1"));
  CHECK_FALSE(known(turns, "s2"));
  CHECK(known(turns, "s3"));
  turns.release("s0");
  store.compact();
  CHECK(store.approximate_bytes() <= p.max_store_bytes);
  // Under the cap, a pass deletes nothing.
  const SweepCounts again = sweep(sweeper, turns, 20000);
  CHECK_FALSE(again.over_cap);
  CHECK_FALSE(again.any());
  CHECK(stored_pages(store) == 8 * 3);
}

TEST_CASE("the sweep interval defaults to a tenth of the shortest TTL, within 1 s and 60 s", "[retention]") {
  CHECK(default_sweep_interval_ms(ttl(0)) == 60000);
  CHECK(default_sweep_interval_ms(ttl(2000)) == 1000);
  CHECK(default_sweep_interval_ms(ttl(300000, 86400000)) == 30000);
  CHECK(default_sweep_interval_ms(ttl(7 * 86400000LL)) == 60000);
  RetentionPolicy off;
  CHECK_FALSE(off.enabled());
}

TEST_CASE("a cap the disk cannot hold is said at start, and one it can is not", "[retention]") {
  const auto dir = std::filesystem::temp_directory_path();
  CHECK(cap_beyond_disk(dir.string(), 0, 0).empty());              // no cap
  CHECK(cap_beyond_disk(dir.string(), int64_t{1} << 20, 0).empty());  // 1 MiB: this disk has that
  const std::string why = cap_beyond_disk(dir.string(), int64_t{1} << 62, 0);  // 4 EiB: no disk here has that
  CHECK_THAT(why, Catch::Contains("--max-store-bytes is") && Catch::Contains("it will fill first"));
  CHECK(cap_beyond_disk("/nonexistent/troupe", int64_t{1} << 62, 0).empty());  // unknown: nothing said
}
