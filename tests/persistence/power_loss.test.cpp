// Power loss, not only process death: the session and job books write through
// RocksDB onto a file system that loses every write not yet synced
// (fault_injection_fs.h), power is cut at each crash point, and the store is
// reopened on what a disk would have kept. kill -9 cannot show this (the
// page cache outlives the process); these cases can, and the negative
// control proves it: the same run with the turn's sync removed loses turns.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "messages/client_validation.h"
#include "persistence/jobs.h"
#include "persistence/kv_pages.h"
#include "persistence/session_turns.h"
#include "persistence/sessions.h"
#include "persistence/store.h"
#include "tests/persistence/fault_injection_fs.h"

using namespace troupe;
using namespace troupe::persistence;
using troupe::test::PowerLossFs;

namespace {

constexpr int kTurns = 12;
constexpr int kItems = 10;
constexpr int32_t kPageSize = 16;
constexpr int64_t kPageBytes = 2048;
constexpr int32_t kTokensPerTurn = 40;  // 2.5 pages: spills carry whole pages, every turn or two
const std::string kSession = "power-1";
const std::string kJob = "job-power";

// Where power goes: right after the k-th acknowledgement, or inside the m-th
// mutating file-system call (an append then lands half its bytes).
struct CrashPoint {
  enum Kind { after_ack, at_mutation } kind;
  uint64_t n;
};

// The mutating calls an uncut run made: by the end of the store's first
// opening, around its clean restart (if any), and in all.
struct Mutations {
  uint64_t opening = 0, restart_from = 0, restart_to = 0, total = 0;
};

// One run's shape: the seed of its contents, what a cut leaves of unsynced
// tails, and a clean restart (flush, new MANIFEST, old files deleted) midway.
struct Run {
  uint64_t seed;
  PowerLossFs::Tail tail;
  int restart_before = -1;  // the turn or item before which the store is closed and reopened; -1: none
  bool directory_fsyncs_lost = false;  // a negative control's disk
};

// One disk: the store's directory, where deleted files wait for their
// directory's fsync, and the file system between them and RocksDB.
struct Disk {
  std::filesystem::path root;
  std::shared_ptr<PowerLossFs> fs;
  std::unique_ptr<rocksdb::Env> env;
  explicit Disk(const Run& run) {
    static std::atomic<int> n = 0;
    root = std::filesystem::temp_directory_path() /
           ("troupe-power-" + std::to_string(getpid()) + "-" + std::to_string(++n));
    std::filesystem::remove_all(root);
    fs = std::make_shared<PowerLossFs>(root / "shadow", run.seed, run.tail);
    if (run.directory_fsyncs_lost) fs->lose_directory_fsyncs();
    env = troupe::test::env_on(fs);
  }
  ~Disk() { std::filesystem::remove_all(root); }
  std::filesystem::path store() const { return root / "store"; }
};

const std::vector<Run> kRuns = {
    {1, PowerLossFs::Tail::dropped},
    {2, PowerLossFs::Tail::random_prefix},
    {3, PowerLossFs::Tail::dropped, 5},
    {4, PowerLossFs::Tail::random_prefix, 7},
};

struct Tally {
  int64_t crash_points = 0, acknowledged = 0, lost = 0, wrong = 0, inconsistent = 0, unopenable = 0, phantom = 0;
  int64_t kv_missing = 0;  // pages a header names that the store lost
  int64_t in_flight_kept = 0;  // the write the cut interrupted, there after all (allowed either way)
  PowerLossFs::Losses dropped;
  std::string first_problem;
  void problem(const std::string& what) {
    if (first_problem.empty() && !what.empty()) first_problem = what;
  }
  void merge(const Tally& t) {
    crash_points += t.crash_points;
    acknowledged += t.acknowledged;
    lost += t.lost;
    wrong += t.wrong;
    inconsistent += t.inconsistent;
    unopenable += t.unopenable;
    phantom += t.phantom;
    kv_missing += t.kv_missing;
    in_flight_kept += t.in_flight_kept;
    add(t.dropped);
    problem(t.first_problem);
  }
  void add(const PowerLossFs::Losses& l) {
    dropped.files_cut += l.files_cut;
    dropped.bytes_dropped += l.bytes_dropped;
    dropped.files_removed += l.files_removed;
    dropped.renames_undone += l.renames_undone;
    dropped.deletes_undone += l.deletes_undone;
  }
  void print(const char* what) const {
    std::printf(
        "power loss, %s: %lld crash points x runs, %lld acknowledged, lost %lld, wrong %lld, inconsistent %lld, "
        "unopenable %lld, unacknowledged yet present beyond one %lld, KV pages promised but missing %lld, interrupted "
        "write kept %lld; the file system dropped %lld bytes in %lld files, removed %lld files, undid %lld renames and "
        "%lld deletes\n",
        what, static_cast<long long>(crash_points), static_cast<long long>(acknowledged), static_cast<long long>(lost),
        static_cast<long long>(wrong), static_cast<long long>(inconsistent), static_cast<long long>(unopenable),
        static_cast<long long>(phantom), static_cast<long long>(kv_missing), static_cast<long long>(in_flight_kept),
        static_cast<long long>(dropped.bytes_dropped),
        static_cast<long long>(dropped.files_cut), static_cast<long long>(dropped.files_removed),
        static_cast<long long>(dropped.renames_undone), static_cast<long long>(dropped.deletes_undone));
    if (!first_problem.empty()) std::printf("  first problem: %s\n", first_problem.c_str());
  }
};

std::string text(uint64_t seed, int i, const char* what) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(i));
  std::string s = std::string(what) + " " + std::to_string(i) + ":";
  const size_t n = 20 + rng() % 400;
  while (s.size() < n) s.push_back(static_cast<char>('a' + rng() % 26));
  return s;
}

std::vector<ChatMessage> turn_messages(uint64_t seed, int i) {
  return {{"user", text(seed, i, "question")}, {"assistant", text(seed, i, "answer")}};
}

std::vector<int32_t> history_tokens(int turns) {
  std::vector<int32_t> v(static_cast<size_t>(turns * kTokensPerTurn));
  std::iota(v.begin(), v.end(), 1);
  return v;
}

SessionPolicy policy() {
  SessionPolicy p;
  p.model_name = "power-test";
  p.kv = true;
  p.kv_identity = {7, 9};
  p.page_size = kPageSize;
  p.page_bytes = kPageBytes;
  return p;
}

std::string turn_key(int index) { return std::string(1, 't') + kSession + '\0' + be32(static_cast<uint32_t>(index)); }

// How a turn reaches the store: the persistence actor's own path, or that
// path with its sync removed (the negative control).
enum class TurnWrite { synced, sync_removed };

// The turn write as SessionBook::append_last_turn makes it, but not synced.
void append_without_sync(Store& store, SessionRecord& s, int i) {
  SessionTurnRecord t;
  t.messages = turn_messages(0, i);
  s.turns.push_back(t);
  s.tokens = history_tokens(i + 1);
  Batch b;
  b.put(Family::sessions, turn_key(i), encode_session_turn(t));
  SessionBook(store).write_header(s, b);
  store.write(b, false);
}

// What the store holds after the cut, against what was acknowledged.
void check_session(const Disk& disk, uint64_t seed, int acked, int attempted, Tally& tally) {
  std::optional<Store> store;
  try {
    store.emplace(disk.store(), disk.env.get());  // powered again, nothing pending
  } catch (const StoreError& e) {
    ++tally.unopenable;
    tally.problem(std::string("reopen: ") + e.what());
    return;
  }
  std::optional<SessionRecord> got;
  try {
    got = SessionBook(*store).load(kSession);
  } catch (const StoreError& e) {
    ++tally.inconsistent;
    tally.problem(std::string("load: ") + e.what());
    return;
  }
  const int stored = got ? static_cast<int>(got->turns.size()) : 0;
  tally.acknowledged += acked;
  if (stored < acked) {
    tally.lost += acked - stored;
    tally.problem("seed " + std::to_string(seed) + ": " + std::to_string(acked) + " turns acknowledged, " +
                  std::to_string(stored) + " stored");
  }
  if (stored > attempted) ++tally.phantom;
  if (stored > acked && stored == attempted) ++tally.in_flight_kept;
  for (int i = 0; i < stored; ++i) {
    const auto& m = got->turns[static_cast<size_t>(i)].messages;
    const auto want = turn_messages(seed, i);
    if (m.size() != want.size() || m[0].content != want[0].content || m[1].content != want[1].content) {
      ++tally.wrong;
      tally.problem("turn " + std::to_string(i) + " has other content");
    }
  }
  if (!got) return;
  // At its last stored turn, never between two: the header's history is
  // that turn's, and no turn record lies past it.
  if (got->tokens != history_tokens(stored) || store->get(Family::sessions, turn_key(stored))) {
    ++tally.inconsistent;
    tally.problem("the header is not at turn " + std::to_string(stored));
  }
  if (got->kv_pages > 0) {
    const KvPageStore kv(*store, {7, 9}, kPageSize, kPageBytes);
    const auto pages = kv.get(got->tokens, got->kv_pages);
    tally.kv_missing += got->kv_pages - static_cast<int64_t>(pages.size());
  }
}

// One session's turns with KV spills (unsynced, as the server writes them)
// between them, power cut at `cut`; then the check.
void session_run(const Run& run, CrashPoint cut, TurnWrite how, Tally& tally, Mutations* seen = nullptr) {
  Disk disk(run);
  std::mt19937_64 rng(run.seed);
  int acked = 0, attempted = 0;
  if (cut.kind == CrashPoint::at_mutation) disk.fs->cut_power_at(cut.n);
  {
    std::optional<Store> store;
    std::optional<SessionTurns> turns;
    SessionRecord mine;  // the negative control's own record
    mine.id = kSession;
    int32_t spilled = 0;
    const auto open = [&] {
      turns.reset();
      store.reset();
      try {
        store.emplace(disk.store(), disk.env.get());
      } catch (const StoreError&) {
        return false;  // the cut came while opening
      }
      turns.emplace(*store, policy());
      return true;
    };
    bool up = open();
    if (seen) seen->opening = disk.fs->mutations();
    for (int i = 0; up && i < kTurns; ++i) {
      if (cut.kind == CrashPoint::after_ack && static_cast<uint64_t>(acked) == cut.n) break;
      if (i == run.restart_before) {
        if (seen) seen->restart_from = disk.fs->mutations();
        if (!(up = open())) break;
        if (seen) seen->restart_to = disk.fs->mutations();
      }
      ++attempted;
      if (how == TurnWrite::sync_removed) {
        try {
          append_without_sync(*store, mine, i);
        } catch (const StoreError&) {
          break;
        }
      } else {
        if (turns->begin(kSession, i).error != wire::ErrorCode::none) break;
        SessionCommit c;
        c.peer = "client";
        c.client_id = static_cast<uint64_t>(i + 1);
        c.session_id = kSession;
        c.messages = turn_messages(run.seed, i);
        c.tokens = history_tokens(i + 1);
        c.done.reason = wire::FinishReason::stop;
        const auto reply = turns->commit(std::move(c), i, 1000 + i);
        if (messages::check_response(reply)->body_type() != wire::ResponseBody::Done) break;
      }
      ++acked;
      // The finished turn's new full pages leave memory, written without sync.
      KvSpill spill;
      spill.session_id = kSession;
      spill.tokens = history_tokens(i + 1);
      spill.first = spilled;
      const int32_t full = static_cast<int32_t>(spill.tokens.size()) / kPageSize;
      for (int32_t p = spilled; p < full; ++p) {
        std::string page(static_cast<size_t>(kPageBytes), '\0');
        for (auto& ch : page) ch = static_cast<char>(rng());
        spill.data.push_back(std::move(page));
      }
      if (how == TurnWrite::synced) spilled += turns->spill(spill);
    }
    if (seen) seen->total = disk.fs->mutations();
    disk.fs->cut_power();
  }  // the Store closes on a dead disk: its flush fails, as it would
  tally.add(disk.fs->restore());
  ++tally.crash_points;
  check_session(disk, how == TurnWrite::synced ? run.seed : 0, acked, attempted, tally);
}

messages::JobItemFields item_result(uint64_t seed, int index) {
  messages::JobItemFields r;
  r.index = index;
  r.text = text(seed, index, "summary");
  r.completion_tokens = 10 + index;
  return r;
}

JobRecord new_job(uint64_t seed) {
  JobRecord j;
  j.id = kJob;
  j.item_template = "Summarize: {item}";
  for (int i = 0; i < kItems; ++i) j.items.push_back(text(seed, i, "paper"));
  return j;
}

void check_job(const Disk& disk, uint64_t seed, bool created, const std::set<int>& acked, const std::set<int>& attempted,
               Tally& tally) {
  std::optional<Store> store;
  try {
    store.emplace(disk.store(), disk.env.get());  // powered again, nothing pending
  } catch (const StoreError& e) {
    ++tally.unopenable;
    tally.problem(std::string("reopen: ") + e.what());
    return;
  }
  std::optional<JobRecord> got;
  try {
    got = JobBook(*store).load(kJob);
  } catch (const StoreError& e) {
    ++tally.inconsistent;
    tally.problem(std::string("load: ") + e.what());
    return;
  }
  tally.acknowledged += (created ? 1 : 0) + static_cast<int64_t>(acked.size());
  if (!got) {
    if (created) {
      tally.lost += 1 + static_cast<int64_t>(acked.size());
      tally.problem("the acknowledged job is gone");
    }
    return;
  }
  if (got->items != new_job(seed).items) {
    ++tally.inconsistent;
    tally.problem("the job's items are not the submitted ones");
  }
  for (int i : acked)
    if (!got->results.count(i)) {
      ++tally.lost;
      tally.problem("item " + std::to_string(i) + "'s acknowledged result is gone");
    }
  int beyond = 0;
  for (const auto& [i, r] : got->results) {
    if (r.text != item_result(seed, i).text) {
      ++tally.wrong;
      tally.problem("item " + std::to_string(i) + " has another result");
    }
    if (!attempted.count(i)) ++tally.phantom;
    if (!acked.count(i)) ++beyond;
  }
  if (beyond > 1) ++tally.phantom;  // at most the one write in flight at the cut
  tally.in_flight_kept += beyond;
  // None twice: one result record per finished item, under its own index;
  // exactly the others are still to run.
  int records = 0;
  const std::string prefix = std::string(1, 'r') + kJob + '\0';
  store->scan(Family::jobs, prefix, [&](std::string_view key, std::string_view) {
    ++records;
    if (!got->results.count(static_cast<int32_t>(read_be32(key.substr(prefix.size()))))) ++tally.inconsistent;
    return true;
  });
  if (records != static_cast<int>(got->results.size())) {
    ++tally.inconsistent;
    tally.problem("result records do not match finished items");
  }
  int to_run = 0;
  for (int i = 0; i < kItems; ++i) to_run += got->results.count(i) ? 0 : 1;
  if (to_run != kItems - static_cast<int>(got->results.size())) ++tally.inconsistent;
  if (got->state == wire::JobState::finished && got->results.size() != static_cast<size_t>(kItems)) {
    ++tally.inconsistent;
    tally.problem("finished with items left");
  }
}

// A job created, then its items' results recorded one by one in a shuffled
// order with unsynced KV writes between them (another session's spills), cut at `cut`.
void job_run(const Run& run, CrashPoint cut, Tally& tally, Mutations* seen = nullptr) {
  Disk disk(run);
  std::mt19937_64 rng(run.seed);
  std::vector<int> order(kItems);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  bool created = false;
  std::set<int> acked, attempted;
  uint64_t acks = 0;
  if (cut.kind == CrashPoint::at_mutation) disk.fs->cut_power_at(cut.n);
  {
    std::optional<Store> store;
    const auto open = [&] {
      store.reset();
      try {
        store.emplace(disk.store(), disk.env.get());
        return true;
      } catch (const StoreError&) {
        return false;
      }
    };
    const auto cut_now = [&] { return cut.kind == CrashPoint::after_ack && acks == cut.n; };
    JobRecord job = new_job(run.seed);
    const bool up = open();
    if (seen) seen->opening = disk.fs->mutations();
    if (up && !cut_now()) {
      try {
        JobBook(*store).create(job);
        created = true;
        ++acks;
      } catch (const StoreError&) {
      }
      for (size_t k = 0; created && k < order.size() && !cut_now(); ++k) {
        if (static_cast<int>(k) == run.restart_before) {
          if (seen) seen->restart_from = disk.fs->mutations();
          if (!open()) break;
          if (seen) seen->restart_to = disk.fs->mutations();
        }
        Batch noise;
        std::string page(1024 + rng() % 4096, '\0');
        for (auto& ch : page) ch = static_cast<char>(rng());
        noise.put(Family::kv_pages, "noise" + std::to_string(k), page);
        try {
          store->write(noise, false);
        } catch (const StoreError&) {
          break;
        }
        JobRecord next = job;
        const auto r = item_result(run.seed, order[k]);
        next.results[r.index] = r;
        if (next.results.size() == next.items.size()) next.state = wire::JobState::finished;
        attempted.insert(r.index);
        try {
          JobBook(*store).record_result(next, r);
        } catch (const StoreError&) {
          break;
        }
        job = std::move(next);
        acked.insert(r.index);
        ++acks;
      }
    }
    if (seen) seen->total = disk.fs->mutations();
    disk.fs->cut_power();
  }
  tally.add(disk.fs->restore());
  ++tally.crash_points;
  check_job(disk, run.seed, created, acked, attempted, tally);
}

using Case = std::function<void(Tally&)>;

// Each case is a store of its own. Most of a case's time is RocksDB handing
// work to its background threads and waiting for it, so a few run at once.
Tally run_all(const std::vector<Case>& cases) {
  constexpr size_t kThreads = 4;
  std::vector<Tally> tallies(kThreads);
  std::atomic<size_t> next = 0;
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (size_t i; (i = next++) < cases.size();) {
        try {
          cases[i](tallies[t]);
        } catch (const std::exception& e) {  // a case must not end the process from its thread
          ++tallies[t].inconsistent;
          tallies[t].problem(std::string("a case threw: ") + e.what());
        }
      }
    });
  for (auto& t : threads) t.join();
  Tally all;
  for (const auto& t : tallies) all.merge(t);
  return all;
}

// Every mutating call an uncut run makes between the turns (or items), and
// every 4th of the store's first opening and of the clean restart (some 55
// calls each, creating or rewriting the store's files): the test stays fast.
std::vector<uint64_t> mutation_points(const Mutations& seen) {
  std::vector<uint64_t> out;
  for (uint64_t m = 1; m <= seen.total; ++m) {
    const bool opening = m <= seen.opening, restart = m > seen.restart_from && m <= seen.restart_to;
    if (!(opening || restart) || m % 4 == 1) out.push_back(m);
  }
  return out;
}

}  // namespace

TEST_CASE("power loss: every acknowledged session turn survives a cut at each crash point", "[persistence][power]") {
  Tally uncut;
  std::vector<Case> cases;
  for (const Run& run : kRuns) {
    Mutations seen;
    session_run(run, {CrashPoint::after_ack, kTurns}, TurnWrite::synced, uncut, &seen);
    std::vector<CrashPoint> cuts;
    for (uint64_t k = 0; k < kTurns; ++k) cuts.push_back({CrashPoint::after_ack, k});
    for (uint64_t m : mutation_points(seen)) cuts.push_back({CrashPoint::at_mutation, m});
    for (const CrashPoint cut : cuts)
      cases.push_back([run, cut](Tally& t) { session_run(run, cut, TurnWrite::synced, t); });
  }
  Tally tally = run_all(cases);
  tally.merge(uncut);
  tally.print("session turns");
  INFO(tally.first_problem);
  CHECK(tally.crash_points > 100);
  CHECK(tally.dropped.bytes_dropped > 0);  // the cuts did take unsynced data away
  CHECK(tally.lost == 0);
  CHECK(tally.wrong == 0);
  CHECK(tally.inconsistent == 0);
  CHECK(tally.unopenable == 0);
  CHECK(tally.phantom == 0);
  CHECK(tally.kv_missing == 0);
}

TEST_CASE("power loss: every recorded job item survives, none twice, exactly the others left to run", "[persistence][power]") {
  Tally uncut;
  std::vector<Case> cases;
  for (const Run& run : kRuns) {
    Mutations seen;
    job_run(run, {CrashPoint::after_ack, kItems + 1}, uncut, &seen);
    std::vector<CrashPoint> cuts;
    for (uint64_t k = 0; k <= kItems; ++k) cuts.push_back({CrashPoint::after_ack, k});
    for (uint64_t m : mutation_points(seen)) cuts.push_back({CrashPoint::at_mutation, m});
    for (const CrashPoint cut : cuts) cases.push_back([run, cut](Tally& t) { job_run(run, cut, t); });
  }
  Tally tally = run_all(cases);
  tally.merge(uncut);
  tally.print("job items");
  INFO(tally.first_problem);
  CHECK(tally.crash_points > 100);
  CHECK(tally.dropped.bytes_dropped > 0);
  CHECK(tally.lost == 0);
  CHECK(tally.wrong == 0);
  CHECK(tally.inconsistent == 0);
  CHECK(tally.unopenable == 0);
  CHECK(tally.phantom == 0);
}

TEST_CASE("power loss, negative control: with the turn's sync removed, the same check finds lost turns", "[persistence][power]") {
  // Without this, a file system that kept everything would pass the cases above.
  Tally tally;
  int64_t cuts_that_lost = 0, cuts = 0;
  for (uint64_t k = 1; k <= kTurns; ++k) {
    const int64_t before = tally.lost;
    session_run(kRuns[0], {CrashPoint::after_ack, k}, TurnWrite::sync_removed, tally);
    ++cuts;
    cuts_that_lost += tally.lost > before ? 1 : 0;
  }
  tally.print("negative control (turn written without sync)");
  std::printf("  %lld of %lld cuts lost acknowledged turns\n", static_cast<long long>(cuts_that_lost),
              static_cast<long long>(cuts));
  CHECK(cuts_that_lost == cuts);
  CHECK(tally.lost > 0);
  CHECK(tally.unopenable == 0);
}

TEST_CASE("power loss, negative control: on a disk that loses directory fsyncs, the store's files are lost",
          "[persistence][power]") {
  // The directory half of the model matters: RocksDB's directory fsyncs are
  // what keep its new WAL, tables and MANIFEST after a cut.
  Run lying = kRuns[0];
  lying.directory_fsyncs_lost = true;
  Tally tally;
  for (const int k : {1, 6, 12})
    session_run(lying, {CrashPoint::after_ack, static_cast<uint64_t>(k)}, TurnWrite::synced, tally);
  tally.print("negative control (directory fsyncs lost)");
  CHECK(tally.lost > 0);
  CHECK(tally.dropped.files_removed > 0);
}
