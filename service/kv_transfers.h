#pragma once
// The scheduler's side of the KV tiers: page contents that ride an engine
// step. Pages leave the worker as a step's exports (a finished session
// turn's pages, spilled to the store) or swap-outs (a preempted sequence's
// pages, kept in host memory), and come back as its imports (restored or
// swapped-in pages, adopted into the prefix cache before the step that
// writes them). A step reads exports and swap-outs before anything else, so
// a page the same step reuses still yields what it held.
//
// The bytes themselves live with the KV-page allocator actor (kv_tiers.h)
// between steps; here is what is queued for the next step, what rides the
// step in flight, and the ledger of swapped-out sequences (which the
// scheduler needs to decide when one comes back).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/schedule/batch_planner.h"
#include "messages/step_frames.h"
#include "persistence/session_turns.h"
#include "service/outbound.h"

namespace troupe::service {

struct StepPages {
  std::vector<int32_t> exports;
  std::vector<messages::PageBytes> imports;
  std::vector<int32_t> swap_outs;
  std::vector<KvShift> shifts;  // views into KvTransfers, valid until step_done()
};

// A context shift's moves into pages adopted for `tokens` (a prompt), read
// from `source` pages held until the step that moves them is done.
struct PlannedShift {
  std::vector<int32_t> tokens;  // the prompt whose prefix the destination pages hold
  std::vector<int32_t> source;  // held pages: the history's block table
  // Positions into one destination page (a KvShift whose dst_table is that page).
  struct Move {
    int32_t dst_page = 0;
    int32_t src_start = 0, dst_start = 0, count = 0, delta = 0;
  };
  std::vector<Move> moves;
};

class KvTransfers {
 public:
  // Pages [first, first + pages.size()) of a session's history, exported by the next step.
  void spill(std::string session_id, std::vector<int32_t> tokens, int32_t first, std::vector<int32_t> pages);
  // Pages adopted into the prefix cache for `tokens`, written by the next step.
  void restore(std::vector<int32_t> tokens, std::vector<messages::PageBytes> pages);
  void shift(PlannedShift shift) { shifts_.push_back(std::move(shift)); }
  bool pending() const { return !spills_.empty() || !restores_.empty() || !shifts_.empty(); }
  bool spills_pending() const { return !spills_.empty(); }

  // The step going out takes what is queued, and the preempted sequences it swaps out.
  StepPages take(std::vector<PreemptedPages> swaps);
  // Its result: the exported pages as spills, the swapped ones as host-tier pages.
  std::vector<persistence::KvSpill> exported(const wire::step::StepResult& result);
  std::vector<SwappedPages> swapped(const wire::step::StepResult& result);
  // The step failed: prefixes whose restored or shifted pages may not have been written.
  std::vector<std::vector<int32_t>> unwritten() const;
  // The step is done: the source pages its shifts held, to release.
  std::vector<int32_t> step_done();

 private:
  struct Spill {
    std::string session_id;
    std::vector<int32_t> tokens;
    int32_t first = 0;
    std::vector<int32_t> pages;
  };
  struct Restore {
    std::vector<int32_t> tokens;
    std::vector<messages::PageBytes> pages;
  };
  std::vector<Spill> spills_, spills_in_step_;
  std::vector<Restore> restores_, restores_in_step_;
  std::vector<PlannedShift> shifts_, shifts_in_step_;
  std::vector<PreemptedPages> swaps_in_step_;
};

// Sequences whose pages are in host memory, within a byte budget.
class SwapLedger {
 public:
  explicit SwapLedger(int64_t budget_bytes) : budget_(budget_bytes) {}
  // Whether `pages` more pages (at most `page_bytes` × 2.5 each, FP16) fit.
  bool fits(size_t pages, int64_t page_bytes) const;
  void add(uint64_t seq, std::vector<int32_t> tokens, int32_t pages, int64_t bytes);
  bool erase(uint64_t seq);  // false when it had none
  struct Entry {
    std::vector<int32_t> tokens;
    int32_t pages = 0;
    int64_t bytes = 0;
  };
  const std::map<uint64_t, Entry>& entries() const { return entries_; }
  int64_t bytes() const { return bytes_; }

 private:
  int64_t budget_;
  int64_t bytes_ = 0;
  std::map<uint64_t, Entry> entries_;
};

}  // namespace troupe::service
