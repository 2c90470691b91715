#pragma once
// Retention: what the store keeps, and for how long. A sweep pass deletes
//
//   - sessions not updated for session_ttl (none with a turn in flight),
//   - jobs that ended (finished or cancelled) job_ttl ago, never a running one,
//   - and, while the store's size is over max_store_bytes: KV pages no
//     stored session references, then the least recently updated ended jobs
//     and idle sessions, until what it deleted covers the excess; the
//     caller then compacts (Store::compact) so the disk space is returned.
//
// A session's spilled KV pages are keyed by their prefix chain
// (kv_pages.h), so sessions sharing a prefix share pages: a pass counts, for
// every page, the stored sessions whose header lists it, and a page goes
// only when its count reaches zero.
//
// A pass runs in slices (step()), each reading or deleting a bounded number
// of records, so the thread that also serves turns is never held for long;
// between slices sessions may change: a session updated, spilled to or busy
// since the pass read it is left for the next pass, and pages written
// meanwhile are counted (session_written()). Deletes are not synced: one
// lost in a crash is done again by the next pass.
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "persistence/jobs.h"
#include "persistence/sessions.h"
#include "persistence/store.h"

namespace troupe::persistence {

struct RetentionPolicy {
  int64_t session_ttl_ms = 0;   // 0: sessions never expire
  int64_t job_ttl_ms = 0;       // 0: ended jobs never expire
  int64_t max_store_bytes = 0;  // 0: no cap
  // Over the cap, a pass frees down to this share of it: the room left takes
  // the writes until the next pass (the server: 0.8; 1: down to the cap).
  double cap_low_water = 1.0;
  // Every stored session's pages are this many tokens (the engine's page
  // size, part of the KV layout a session's header names).
  int32_t page_size = 16;
  size_t slice = 64;  // records read, or sessions and jobs deleted, per step
  bool enabled() const { return session_ttl_ms > 0 || job_ttl_ms > 0 || max_store_bytes > 0; }
};

// What a cap the disk under `dir` cannot hold comes to ("" when it can):
// the store would fill the disk first and answer storage_failed until
// space returns. `stored`: what the store holds already.
std::string cap_beyond_disk(const std::string& dir, int64_t cap, int64_t stored);

// The pause between passes when none is given: a tenth of the shortest
// TTL, within [1 s, 60 s], so a record outlives its TTL by about a tenth
// at most (60 s with only a byte cap).
int64_t default_sweep_interval_ms(const RetentionPolicy& policy);

// What a pass deleted; bytes are keys and values as written (before
// compression), so the disk gains somewhat less.
struct SweepCounts {
  int64_t sessions = 0, jobs = 0, pages = 0, bytes = 0;
  int64_t store_bytes = 0;  // the store's size (Store::approximate_bytes) when the pass began, if capped
  bool over_cap = false;    // it began over max_store_bytes
  bool any() const { return sessions + jobs + pages > 0; }
};

struct SweepStep {
  // Deleted by this step: caches must drop them, or a later read would
  // answer from memory what the store no longer holds.
  std::vector<std::string> sessions, jobs;
  bool done = false;    // the pass ended (the next step starts another)
  SweepCounts counts;   // the pass's totals, once done
  // Once done: the pass deleted under the cap; compact, then sweep again
  // to see whether the store is under it now.
  bool compact = false;
};

class Sweeper {
 public:
  // `busy`: whether a session has a turn in flight (never deleted then).
  Sweeper(Store& store, RetentionPolicy policy, std::function<bool(const std::string&)> busy);

  const RetentionPolicy& policy() const { return policy_; }
  // One bounded slice of the current pass, starting one if none runs.
  // `unix_now_ms`: the clock updated_ms is stamped with. Throws StoreError.
  SweepStep step(int64_t unix_now_ms);
  // Session `id`'s header was written (its pages may be new): a running
  // pass counts its pages and leaves the session alone.
  void session_written(const std::string& id);
  bool running() const { return phase_ != Phase::idle; }

 private:
  enum class Phase { idle, read_sessions, read_jobs, expire, orphans, evict };
  struct SessionSeen {
    int64_t updated_ms = 0;
    int32_t kv_pages = 0;
    std::vector<std::string> pages;  // the keys its header lists
  };
  struct Candidate {  // something a pass may delete, oldest first
    int64_t updated_ms;
    bool job;
    std::string id;
    bool operator<(const Candidate& o) const {
      return updated_ms != o.updated_ms ? updated_ms < o.updated_ms : job != o.job ? job : id < o.id;
    }
  };

  void start(int64_t now);
  void read_sessions();
  void read_jobs();
  void decide();
  // Deletes up to a slice of `from`'s candidates, oldest first; stops once
  // `enough` says the pass has freed what it must.
  void delete_some(std::vector<Candidate>& from, SweepStep& out, const std::function<bool()>& enough);
  bool delete_session(const std::string& id, Batch& b);
  bool delete_job(const std::string& id, Batch& b);
  void orphans();
  void end_pass();
  bool freed_enough() const {
    return counts_.bytes >= counts_.store_bytes - static_cast<int64_t>(policy_.max_store_bytes * policy_.cap_low_water);
  }
  void count(const SessionRecord& s, int delta, std::vector<std::string>* keys = nullptr);

  Store& store_;
  RetentionPolicy policy_;
  std::function<bool(const std::string&)> busy_;
  SessionBook sessions_;
  JobBook jobs_;

  Phase phase_ = Phase::idle;
  int64_t now_ = 0;
  std::string cursor_;  // the last key (or id) a read slice reached
  SweepCounts counts_;
  std::map<std::string, SessionSeen> seen_sessions_;
  std::map<std::string, JobStamp> seen_jobs_;
  std::set<std::string> written_;                  // sessions written since the pass began
  std::unordered_map<std::string, int32_t> refs_;  // page key → stored sessions listing it
  std::vector<Candidate> expired_, evictable_;     // each sorted newest first: taken from the back
};

}  // namespace troupe::persistence
