#pragma once
// Where a new request runs among the workers (replicas) of one tier, each
// with its own KV pool: the placement policy of data-parallel serving
// (docs/SCALE_OUT.md). Three rules, in order:
//
//   1. A session's turn goes back to the worker that served its last turn
//      while that worker is up and not overloaded (its pages are cached
//      there); otherwise it moves.
//   2. Prefix affinity: the worker that was sent the longest prefix of this
//      prompt (whole pages) wins, unless it is overloaded.
//   3. Otherwise the least loaded worker: the fewest live requests, scaled
//      by its measured step time, with room in its KV pool for the prompt.
//
// "Overloaded" means more than `slack` live requests above the least
// loaded worker: affinity saves a prefill, not a queue. The prefix index is
// what this class sent, not what the workers hold (they may have evicted
// it): an approximate, bounded record per worker, as cache-aware routers do.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace troupe::service {

// What a replica's scheduler reports after its steps.
struct ReplicaLoad {
  int32_t free_pages = 0;
  int32_t total_pages = 0;
  int32_t waiting = 0;     // requests queued behind the running ones
  double step_ms = 0;      // its recent step time (a moving average); 0: none yet
};

struct PlacementConfig {
  int32_t page_size = 16;
  int32_t slack = 4;                    // live requests above the least loaded before affinity yields
  size_t prefix_pages_per_replica = 1 << 16;  // bound of each replica's prefix record
  size_t max_sessions = 1 << 16;        // sessions remembered
};

class Placement {
 public:
  Placement(int32_t replicas, PlacementConfig config = {});

  static constexpr int32_t kNone = -1;
  struct Choice {
    int32_t replica = kNone;  // kNone: no replica is up
    int32_t prefix_pages = 0;  // pages of the prompt the chosen replica was sent before
    enum class Why : uint8_t { none, session, prefix, load } why = Why::none;
    bool moved_session = false;  // a session left the replica of its last turn
  };
  // Chooses, and records the choice (the request counts as live there until
  // ended()). `avoid`: a replica the request is leaving (kNone: none).
  Choice place(std::span<const int32_t> prompt, const std::string& session_id, int32_t avoid = kNone);
  void pin(int32_t replica);  // a request placed there by the caller: live until ended()
  void ended(int32_t replica);
  void report(int32_t replica, const ReplicaLoad& load);
  // A replica's worker died or left: nothing is placed there, and what it
  // was sent is forgotten (a worker comes back empty).
  void down(int32_t replica);
  void up(int32_t replica);
  // A worker joined (`troupe worker --join`): the next replica, up and empty.
  int32_t add();
  bool is_up(int32_t replica) const { return replicas_[static_cast<size_t>(replica)].up; }
  int32_t live(int32_t replica) const { return replicas_[static_cast<size_t>(replica)].live; }
  int32_t replicas() const { return static_cast<int32_t>(replicas_.size()); }
  int32_t up_count() const;

  struct Counters {
    uint64_t placed = 0, by_session = 0, by_prefix = 0, by_load = 0, sessions_moved = 0;
    uint64_t place_ns = 0;  // time spent choosing, in total
  };
  const Counters& counters() const { return counters_; }

 private:
  // Chained hashes of a prompt's whole pages: [i] names pages 0..i.
  std::vector<uint64_t> page_chain(std::span<const int32_t> prompt) const;
  // Two generations: lookups read both, inserts go to the newer; when it
  // fills, the older is dropped. A bounded, approximately LRU record.
  struct PrefixRecord {
    std::unordered_map<uint64_t, uint32_t> current, previous;
    bool contains(uint64_t h) const { return current.count(h) || previous.count(h); }
    void insert(uint64_t h, size_t bound);
    void clear() { current.clear(), previous.clear(); }
  };
  struct Replica {
    bool up = true;
    int32_t live = 0;
    ReplicaLoad load;
    PrefixRecord prefixes;
  };
  double cost(const Replica& r, int64_t prompt_tokens) const;
  int32_t matched_pages(const Replica& r, const std::vector<uint64_t>& chain) const;
  int32_t session_home(const std::string& session_id) const;  // its last turn's replica, or kNone
  Choice by_prefix(const std::vector<uint64_t>& chain, int64_t prompt_tokens,
                   const std::function<bool(size_t)>& eligible) const;
  Choice by_load(int64_t prompt_tokens, const std::function<bool(size_t)>& usable) const;
  void record(const Choice& c, const std::vector<uint64_t>& chain, const std::string& session_id);

  PlacementConfig cfg_;
  std::vector<Replica> replicas_;
  // session -> replica of its last turn, with a second generation as above.
  std::unordered_map<std::string, int32_t> sessions_, old_sessions_;
  Counters counters_;
};

}  // namespace troupe::service
