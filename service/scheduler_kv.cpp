// The scheduler's KV tiers (service/scheduler.h): a session's stored pages
// restored into the prefix cache, a windowed session's kept turns shifted
// into place, preempted sequences' pages swapped out to host memory and back.
#include <algorithm>

#include "engine/kv_cache.h"
#include "engine/kv_page_codec.h"
#include "service/scheduler.h"

namespace troupe::service {
namespace {

// Restored pages from this index on carry their local layers' rows (those
// exported behind every window do not: engine/kv_page_codec.h).
int32_t local_rows_from(const std::vector<std::string>& data) {
  int32_t from = 0;
  for (size_t i = 0; i < data.size(); ++i)
    if (!kv_page_has_local_rows(data[i])) from = static_cast<int32_t>(i) + 1;
  return from;
}

// How many of the pages a verifier without local slots (every layer in every
// page) can take: those before the first one that lacks its local rows.
size_t restorable(const std::vector<std::string>& data, bool windowed) {
  if (windowed) return data.size();
  size_t n = 0;
  while (n < data.size() && kv_page_has_local_rows(data[n])) ++n;
  return n;
}

}  // namespace

// Restored pages of an admitted session turn: into the prefix cache now,
// their contents written by the next step (before its forward).
void Scheduler::restore(std::span<const int32_t> prompt, std::vector<std::string>& data) {
  if (!cfg_.kv_transfer || data.empty()) return;
  for (const auto& d : data)
    if (static_cast<int64_t>(d.size()) != cfg_.page_bytes) return;  // not this layout: recompute instead
  data.resize(restorable(data, cfg_.planner.window > 0));
  if (data.empty()) return;
  const auto n = static_cast<int32_t>(data.size());
  std::vector<int32_t> tokens(prompt.begin(), prompt.begin() + std::min<int64_t>(prompt.size(), int64_t{n} * cfg_.page_size));
  std::vector<messages::PageBytes> pages;
  const int32_t local_from = local_rows_from(data);
  for (const auto& [index, page] : planner_->adopt_prefix(prompt, n, local_from)) pages.push_back({page, std::move(data[index])});
  counters_.pages_restored += pages.size();
  transfers_.restore(std::move(tokens), std::move(pages));
}

// A session past its window: the kept turns' KV moves from the history's
// pages (cached, or restored just now) into pages adopted for the prompt,
// turned to their new positions by the next step; admission then finds the
// prompt's prefix cached and computes only what follows it. Only whole
// destination pages move (the prefix cache holds whole pages).
void Scheduler::plan_reuse(std::span<const int32_t> history, std::span<const int32_t> prompt, const KvReuse& r) {
  if (!cfg_.kv_shift || r.count <= 0 || !cfg_.planner.prefix_caching) return;
  const int32_t ps = cfg_.page_size;
  std::vector<int32_t> source = planner_->retain_prefix(history, static_cast<size_t>((r.src_begin + r.count + ps - 1) / ps));
  const int32_t count = std::min(r.count, static_cast<int32_t>(source.size()) * ps - r.src_begin);
  const int32_t dst_end = std::min<int32_t>((r.dst_begin + count) / ps * ps, static_cast<int32_t>(prompt.size()) / ps * ps);
  const int32_t gap = r.src_begin - r.dst_begin;
  // A sliding-window model: destination pages get local rows where every
  // position's source still has them, from the end down; those must reach
  // back as far as the new end's window reads (BatchPlanner's admission
  // checks the same), or the turn computes its history instead.
  int32_t local_from = 0;
  if (cfg_.planner.window > 0) {
    auto sourced = [&](int32_t page) {
      for (int32_t p = page * ps; p < (page + 1) * ps; ++p) {
        const int32_t src = (p < r.dst_begin ? p : p + gap) / ps;
        if (src >= static_cast<int32_t>(source.size()) || !pool_->has_local(source[static_cast<size_t>(src)])) return false;
      }
      return true;
    };
    local_from = dst_end / ps;
    while (local_from > local_pages_from(dst_end, cfg_.planner.window, ps) && sourced(local_from - 1)) --local_from;
    if (local_from > std::max(0, dst_end - 1 - cfg_.planner.window) / ps) return planner_->release_pages(source);
  }
  const auto fill = count > 0 && dst_end > r.dst_begin ? planner_->adopt_prefix(prompt, dst_end / ps, local_from)
                                                       : std::vector<std::pair<int32_t, int32_t>>();
  if (fill.empty()) return planner_->release_pages(source);
  // The sources' local rows must outlive this plan's settling until the shift runs.
  planner_->hold_local(source);
  PlannedShift sh;
  sh.tokens.assign(prompt.begin(), prompt.begin() + dst_end);
  sh.source = std::move(source);
  for (const auto& [index, page] : fill) {
    const int32_t p0 = index * ps, p1 = p0 + ps;
    if (p0 < r.dst_begin)  // the shared prefix's part of the page: the same positions
      sh.moves.push_back({page, p0, 0, std::min(p1, r.dst_begin) - p0, 0});
    if (p1 > r.dst_begin) {
      const int32_t a = std::max(p0, r.dst_begin);
      sh.moves.push_back({page, a + gap, a - p0, p1 - a, -gap});
      counters_.tokens_shifted += static_cast<uint64_t>(p1 - a);
    }
  }
  transfers_.shift(std::move(sh));
}

// The head of the queue, if preempted with its pages swapped out, asks for
// them back once the pool has room for them; its admission then skips their
// recompute. Planning waits for them (one actor hop, only at a swap-in).
bool Scheduler::fetch_swap_in() {
  int32_t room = -1;  // free + evictable pages, counted once (stats() walks the cache)
  std::vector<uint64_t> gone;
  uint64_t fetch = 0;
  for (const auto& [seq, entry] : swapped_.entries()) {
    const PlannedSequence* s = planner_->find(seq);
    if (!s || s->state == RequestState::finished) {
      gone.push_back(seq);
      continue;
    }
    if (s->state != RequestState::waiting || planner_->queue_position(seq) != 0) continue;
    if (room < 0) {
      const PlannerStats ps = planner_->stats();
      room = ps.pages_free + ps.pages_cached;
    }
    if (room >= entry.pages + 1) {
      fetch = seq;
      break;
    }
  }
  for (uint64_t seq : gone)
    if (swapped_.erase(seq)) out_.swap_drops.push_back(seq);
  if (!fetch) return false;
  swapped_.erase(fetch);
  out_.swap_fetches.push_back(fetch);
  return true;
}

void Scheduler::swap_arrived(SwappedPages pages) {
  if (phase_ == Phase::fetching) phase_ = Phase::ready;
  const PlannedSequence* s = planner_->find(pages.sequence);
  if (!s || s->state != RequestState::waiting || pages.data.empty()) return;
  pages.data.resize(restorable(pages.data, cfg_.planner.window > 0));
  if (pages.data.empty()) return;
  const auto n = static_cast<int32_t>(pages.data.size());
  std::vector<messages::PageBytes> imports;
  for (const auto& [index, page] : planner_->adopt_prefix(pages.tokens, n, local_rows_from(pages.data)))
    imports.push_back({page, std::move(pages.data[index])});
  counters_.pages_swapped_in += imports.size();
  transfers_.restore(std::move(pages.tokens), std::move(imports));
}

// Sequences the last plan preempted: their pages are read by this step
// (before it can reuse them) and kept in host memory, within the budget.
std::vector<PreemptedPages> Scheduler::swaps_for_step() {
  std::vector<PreemptedPages> swaps;
  for (auto& p : planner_->take_preempted()) {
    if (!cfg_.kv_transfer || !cfg_.planner.prefix_caching || p.pages.empty() || !swapped_.fits(p.pages.size(), cfg_.page_bytes))
      continue;
    swaps.push_back(std::move(p));
  }
  return swaps;
}

void Scheduler::take_swapped(SwappedPages pages) {
  const PlannedSequence* s = planner_->find(pages.sequence);
  if (!s || s->state != RequestState::waiting) return;
  counters_.pages_swapped_out += pages.data.size();
  swapped_.add(pages.sequence, pages.tokens, static_cast<int32_t>(pages.data.size()), pages.bytes());
  out_.swap_outs.push_back(std::move(pages));
}

}  // namespace troupe::service
