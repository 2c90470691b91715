#include "engine/schedule/batch_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace troupe {

const char* request_state_name(RequestState s) {
  switch (s) {
    case RequestState::waiting: return "waiting";
    case RequestState::running: return "running";
    case RequestState::finished: return "finished";
  }
  return "?";
}

BatchPlanner::BatchPlanner(PagePool& pool, int32_t page_size, PlannerLimits limits)
    : pool_(pool), page_size_(page_size), limits_(limits), cache_(pool, page_size) {
  if (limits.token_budget <= 0 || limits.max_running <= 0) throw std::invalid_argument("planner limits must be positive");
}

BatchPlanner::~BatchPlanner() { seqs_.clear(); }  // sequences release their pages before the cache goes

BatchPlanner::AddResult BatchPlanner::add(uint64_t id, Priority priority, std::vector<int32_t> prompt,
                                          int32_t max_new_tokens, TenantId tenant_id, uint32_t weight) {
  if (seqs_.count(id)) return AddResult::duplicate;
  if (prompt.empty() || static_cast<int64_t>(prompt.size()) >= limits_.max_context) return AddResult::too_long;
  int32_t waiting = 0, mine = 0;
  for (const auto& [k, s] : seqs_) {
    waiting += s->state == RequestState::waiting;
    mine += s->state == RequestState::waiting && s->tenant == tenant_id;
  }
  if (waiting >= limits_.max_waiting) return AddResult::queue_full;
  if (mine >= share_of(limits_.max_waiting, limits_.tenant_queue_share)) return AddResult::tenant_queue_full;
  auto s = std::make_unique<PlannedSequence>(pool_, page_size_);
  s->id = id;
  s->priority = priority;
  s->tenant = tenant_id;
  s->arrival = arrivals_++;
  s->prompt_tokens = static_cast<int32_t>(prompt.size());
  s->tokens = std::move(prompt);
  s->max_new_tokens = max_new_tokens;
  seqs_.emplace(id, std::move(s));
  Tenant& t = tenant(tenant_id);
  ++t.sequences;
  t.weight = std::max<uint32_t>(weight, 1);
  return AddResult::accepted;
}

BatchPlanner::Tenant& BatchPlanner::tenant(TenantId t) {
  auto it = tenants_.find(t);
  if (it != tenants_.end()) return it->second;
  // A tenant back from idle starts just ahead of the least-served active
  // one: it goes next, but being away earns no credit to spend later.
  double start = 0;
  bool any = false;
  for (const auto& [id, other] : tenants_) {
    start = any ? std::min(start, other.served) : other.served;
    any = true;
  }
  Tenant fresh;
  fresh.served = any ? start - 1e-6 : 0;
  return tenants_.emplace(t, fresh).first->second;
}

void BatchPlanner::tenant_done(TenantId t) {
  auto it = tenants_.find(t);
  if (it != tenants_.end() && --it->second.sequences <= 0) tenants_.erase(it);
}

double BatchPlanner::weight_share(TenantId t) const {
  double total = 0, mine = 0;
  for (const auto& [id, x] : tenants_) {
    total += x.weight;
    if (id == t) mine = x.weight;
  }
  return total > 0 ? mine / total : 1.0;
}

int32_t BatchPlanner::tenant_pages(TenantId t) const {
  int32_t n = 0;
  for (const auto& [id, s] : seqs_)
    if (s->tenant == t) n += static_cast<int32_t>(s->kv.block_table().size());
  return n;
}

int32_t BatchPlanner::tenant_running(TenantId t) const {
  int32_t n = 0;
  for (const auto& [id, s] : seqs_) n += s->tenant == t && s->state == RequestState::running;
  return n;
}

int32_t BatchPlanner::tenant_pages_with(const PlannedSequence& s, int32_t until) const {
  const auto held = static_cast<int32_t>(s.kv.block_table().size());
  return tenant_pages(s.tenant) + std::max(held, (until - s.evicted + page_size_ - 1) / page_size_) - held;
}

bool BatchPlanner::over_share(const PlannedSequence& s, int32_t until) const {
  if (!other_tenant_active(s.tenant)) return false;
  const double share = weight_share(s.tenant);
  int32_t running = tenant_running(s.tenant), pages = tenant_pages(s.tenant);
  if (until >= 0) {
    running += s.state != RequestState::running;
    pages = tenant_pages_with(s, until);
  }
  return running > std::max(1.0, share * limits_.max_running) || pages > std::max(1.0, share * pool_.capacity());
}

BatchPlanner::TenantLoad BatchPlanner::tenant_load(TenantId t) const {
  TenantLoad load;
  for (const auto& [id, s] : seqs_) {
    if (s->tenant != t) continue;
    load.waiting += s->state == RequestState::waiting;
    load.running += s->state == RequestState::running;
    load.pages += static_cast<int32_t>(s->kv.block_table().size());
  }
  return load;
}

PlannedSequence* BatchPlanner::get(uint64_t id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

std::vector<std::pair<int32_t, int32_t>> BatchPlanner::adopt_prefix(std::span<const int32_t> tokens, int32_t n_pages,
                                                                   int32_t local_from) {
  if (!limits_.prefix_caching) return {};
  return cache_.adopt(tokens, n_pages, windowed() ? local_from : 0);
}

bool BatchPlanner::window_intact(std::span<const int32_t> table, int32_t next) const {
  return missing_local(table, next) < 0;
}

int64_t BatchPlanner::missing_local(std::span<const int32_t> table, int32_t next) const {
  if (!windowed()) return -1;
  const auto end = std::min(table.size(), static_cast<size_t>((next + page_size_ - 1) / page_size_) + 1);
  for (auto i = end; i-- > static_cast<size_t>(std::max(0, next - limits_.window) / page_size_);)
    if (!pool_.has_local(table[i])) return static_cast<int64_t>(i);
  return -1;
}

void BatchPlanner::settle_local() {
  if (!windowed()) return;
  std::vector<uint8_t>& needed = needed_local_;  // reused: no allocation per step
  needed.assign(static_cast<size_t>(pool_.capacity()), 0);
  for (const auto& [id, s] : seqs_) {
    const auto table = s->kv.block_table();
    for (auto i = static_cast<size_t>(local_pages_from(s->computed, limits_.window, page_size_)); i < table.size(); ++i)
      needed[static_cast<size_t>(table[i])] = 1;
  }
  cache_.mark_local(needed);
  for (int32_t p = 0; p < pool_.capacity(); ++p)
    if (!needed[static_cast<size_t>(p)] && pool_.ref_count(p) > 0) pool_.drop_local(p);
}

int32_t BatchPlanner::drop_prefix(std::span<const int32_t> tokens) {
  return limits_.prefix_caching ? cache_.drop(tokens) : 0;
}

std::vector<int32_t> BatchPlanner::retain_prefix(std::span<const int32_t> tokens, size_t max_pages) {
  if (!limits_.prefix_caching) return {};
  return cache_.match(tokens, max_pages);
}

void BatchPlanner::release_pages(std::span<const int32_t> pages) {
  for (int32_t p : pages) pool_.release(p);
}

void BatchPlanner::hold_local(std::span<const int32_t> pages) {
  if (windowed()) cache_.keep_local(pages);
}

void BatchPlanner::release_local(std::span<const int32_t> pages) {
  if (windowed()) cache_.release_local(pages);
}

const PlannedSequence* BatchPlanner::find(uint64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void BatchPlanner::release(PlannedSequence& s, bool preempted) {
  // An evicted sequence's pages hold no token prefix: neither swapped nor cached.
  const bool prefix = s.evicted == 0;
  if (preempted && prefix && s.computed >= page_size_) {
    const auto full = static_cast<size_t>(s.computed / page_size_);
    const auto table = s.kv.block_table();
    preempted_.push_back({s.id, std::vector<int32_t>(s.tokens.begin(), s.tokens.begin() + static_cast<int64_t>(full * page_size_)),
                          std::vector<int32_t>(table.begin(), table.begin() + static_cast<int64_t>(full))});
  }
  // A copy planned into one of its pages is moot once the page is gone, as
  // is an eviction planned into them.
  const auto table = s.kv.block_table();
  copies_.erase(std::remove_if(copies_.begin(), copies_.end(),
                               [&](const PageCopy& c) { return std::find(table.begin(), table.end(), c.dst) != table.end(); }),
                copies_.end());
  std::erase_if(evictions_, [&](const PlannedEviction& e) { return e.id == s.id; });
  // Its computed full pages stay in the prefix cache: a recompute after
  // preemption, or the next turn of a conversation, can start from them.
  if (limits_.prefix_caching && prefix && s.computed >= page_size_) {
    cache_.insert(std::span(s.tokens).first(static_cast<size_t>(s.computed)), s.kv.block_table());
    if (windowed())  // its window's pages keep their local rows: the next turn starts there
      cache_.keep_local(table.subspan(std::min(table.size(), static_cast<size_t>(local_pages_from(s.computed, limits_.window,
                                                                                                   page_size_)))));
  }
  s.kv.clear();
  s.computed = 0;
  s.evicted = 0;
  s.registered_pages = 0;
}

bool BatchPlanner::fork(uint64_t parent_id, uint64_t child_id, int32_t at) {
  PlannedSequence* p = get(parent_id);
  if (!p || p->state != RequestState::running || seqs_.count(child_id) || at < 0 ||
      at >= static_cast<int32_t>(p->tokens.size()) || p->computed < at || p->evicted > 0)
    return false;
  const size_t pages = static_cast<size_t>(at / page_size_ + 1);  // cover [0, at]
  const auto table = p->kv.block_table();
  if (table.size() < pages || !window_intact(table.first(pages), at)) return false;
  auto c = std::make_unique<PlannedSequence>(pool_, page_size_);
  c->id = child_id;
  c->priority = p->priority;
  c->tenant = p->tenant;
  c->arrival = arrivals_++;
  c->prompt_tokens = p->prompt_tokens;
  c->tokens.assign(p->tokens.begin(), p->tokens.begin() + at + 1);
  c->max_new_tokens = p->max_new_tokens;
  c->computed = at;
  c->cached_prompt_tokens = p->cached_prompt_tokens;
  c->registered_pages = at / page_size_;
  c->kv_budget = p->kv_budget;
  std::vector<int32_t> shared(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(pages));
  for (int32_t page : shared) pool_.retain(page);
  c->kv.adopt(shared);
  c->state = RequestState::running;
  ++tenant(c->tenant).sequences;
  seqs_.emplace(child_id, std::move(c));
  return true;
}

bool BatchPlanner::unshare_for_write(PlannedSequence& s, int32_t start) {
  // Only the page holding `start` can be shared and still written: pages
  // past it were reserved by this sequence, and full cached pages are never
  // written again.
  const auto table = s.kv.block_table();
  const size_t index = static_cast<size_t>((start - s.evicted) / page_size_);
  if (index >= table.size() || pool_.ref_count(table[index]) <= 1) return true;
  if (pool_.allocatable() == 0 && !cache_.make_free(1, 1)) return false;
  const int32_t src = table[index], dst = *pool_.allocate();
  copies_.push_back({src, dst});
  s.kv.replace_page(index, dst);
  pool_.release(src);
  return true;
}

bool BatchPlanner::cancel(uint64_t id) {
  PlannedSequence* s = get(id);
  if (!s) return false;
  finish(id);
  return true;
}

void BatchPlanner::finish(uint64_t id) {
  PlannedSequence* s = get(id);
  if (!s) return;
  slices_.erase(std::remove_if(slices_.begin(), slices_.end(), [&](const PlannedSlice& p) { return p.id == id; }),
                slices_.end());
  release(*s);
  s->state = RequestState::finished;
  const TenantId t = s->tenant;
  seqs_.erase(id);
  tenant_done(t);
}

std::vector<PlannedSequence*> BatchPlanner::by_priority(RequestState state) {
  std::vector<PlannedSequence*> v;
  for (auto& [id, s] : seqs_)
    if (s->state == state) v.push_back(s.get());
  std::sort(v.begin(), v.end(), [this](const PlannedSequence* a, const PlannedSequence* b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    const double sa = tenants_.at(a->tenant).served, sb = tenants_.at(b->tenant).served;
    return sa != sb ? sa < sb : a->arrival < b->arrival;
  });
  return v;
}

std::vector<PlannedSequence*> BatchPlanner::prefill_order() {
  std::vector<PlannedSequence*> v;
  for (auto& [id, s] : seqs_)
    if (s->state == RequestState::waiting ||
        (s->state == RequestState::running && static_cast<int32_t>(s->tokens.size()) > s->computed))
      v.push_back(s.get());
  // Within a tenant, prefills under way before new admissions (they hold
  // pages already); between tenants, the least served first.
  std::sort(v.begin(), v.end(), [this](const PlannedSequence* a, const PlannedSequence* b) {
    if (a->priority != b->priority) return a->priority < b->priority;
    const double sa = tenants_.at(a->tenant).served, sb = tenants_.at(b->tenant).served;
    if (sa != sb) return sa < sb;
    if (a->state != b->state) return a->state == RequestState::running;
    return a->arrival < b->arrival;
  });
  return v;
}

bool BatchPlanner::reserve(PlannedSequence& s, int32_t n_tokens) {
  const int32_t slots = n_tokens - s.evicted;
  if (s.kv.reserve(slots)) return true;
  const int32_t need = (slots + page_size_ - 1) / page_size_ - static_cast<int32_t>(s.kv.block_table().size());
  return cache_.make_free(need, need) && s.kv.reserve(slots);
}

void BatchPlanner::set_kv_budget(uint64_t id, int32_t budget) {
  if (PlannedSequence* s = get(id)) s->kv_budget = std::max(budget, 0);
}

bool BatchPlanner::plan_eviction(PlannedSequence& s, int32_t incoming) {
  const EvictionPolicy policy = eviction_of(s);
  const int32_t keep = policy.keep();
  if (!policy.on() || s.slots() + incoming <= policy.budget || s.slots() <= keep) return false;
  const int32_t pages = (keep + page_size_ - 1) / page_size_;
  if (pool_.allocatable() < pages && !cache_.make_free(pages, pages)) return false;
  PlannedEviction e{s.id, {}, {}, s.slots(), keep, s.evicted};
  const auto table = s.kv.block_table();
  e.src.assign(table.begin(), table.end());
  for (int32_t i = 0; i < pages; ++i) e.dst.push_back(*pool_.allocate());
  // The old pages stay whole until the step that reads them is over.
  for (int32_t page : e.src) {
    pool_.retain(page);
    retired_.push_back(page);
  }
  s.kv.clear();
  s.kv.adopt(e.dst);
  s.evicted += e.length - keep;
  evictions_.push_back(std::move(e));
  return true;
}

void BatchPlanner::release_retired() {
  for (int32_t page : retired_) pool_.release(page);
  retired_.clear();
}

// Whether pages move fairly from `victim`'s tenant to `keep`'s (which asks
// for pages up to position `until`): the victim's tenant holds more than its
// share of the pages, and without the victim's it still holds at least as
// many, for its weight, as keep's would. A move can then never be undone
// by the reverse move, so tenants cannot take pages back and forth without
// end (as they did when any tenant under its share took from any over it:
// with many tenants, each one's share is less than one request needs).
bool BatchPlanner::fair_page_move(const PlannedSequence& victim, const PlannedSequence& keep, int32_t until) const {
  if (victim.tenant == keep.tenant || !other_tenant_active(victim.tenant)) return false;
  const double share = weight_share(victim.tenant);
  const int32_t victim_pages = tenant_pages(victim.tenant);
  if (victim_pages <= std::max(1.0, share * pool_.capacity())) return false;
  const int32_t keep_pages = tenant_pages_with(keep, until);
  const int32_t left = victim_pages - static_cast<int32_t>(victim.kv.block_table().size());
  return static_cast<double>(left) / tenants_.at(victim.tenant).weight >=
         static_cast<double>(keep_pages) / tenants_.at(keep.tenant).weight;
}

// The same for a running slot, which `keep` takes if it is not running yet.
bool BatchPlanner::fair_slot_move(const PlannedSequence& victim, const PlannedSequence& keep) const {
  if (victim.tenant == keep.tenant || !other_tenant_active(victim.tenant)) return false;
  const int32_t victim_running = tenant_running(victim.tenant);
  if (victim_running <= std::max(1.0, weight_share(victim.tenant) * limits_.max_running)) return false;
  const int32_t keep_running = tenant_running(keep.tenant) + (keep.state != RequestState::running);
  return static_cast<double>(victim_running - 1) / tenants_.at(victim.tenant).weight >=
         static_cast<double>(keep_running) / tenants_.at(keep.tenant).weight;
}

bool BatchPlanner::preempt_one(const PlannedSequence& keep, int32_t until) {
  // Who gives way to `keep`: a less important sequence; at equal priority,
  // one whose pages move fairly to keep's tenant, and never one of a tenant
  // poorer than keep's (the move the other way would be fair); else a newer one.
  auto gives_way = [&](const PlannedSequence& s, bool fair) {  // fair: s's pages move fairly to keep
    if (s.priority != keep.priority) return s.priority > keep.priority;
    if (fair) return true;
    if (fair_page_move(keep, s, static_cast<int32_t>(s.kv.block_table().size()) * page_size_)) return false;
    return s.arrival > keep.arrival;
  };
  PlannedSequence* victim = nullptr;
  bool victim_fair = false;
  for (auto& [id, p] : seqs_) {
    PlannedSequence* s = p.get();
    if (s == &keep || s->state != RequestState::running) continue;
    const bool fair = fair_page_move(*s, keep, until);
    if (!gives_way(*s, fair)) continue;
    if (!victim || (fair && !victim_fair) ||
        (fair == victim_fair && (s->priority > victim->priority ||
                                 (s->priority == victim->priority && s->arrival > victim->arrival)))) {
      victim = s;
      victim_fair = fair;
    }
  }
  if (!victim) return false;
  preempt(*victim);
  return true;
}

void BatchPlanner::preempt(PlannedSequence& victim) {
  for (const PlannedSlice& p : slices_)
    if (p.id == victim.id) refund_ += p.count;  // its slice's budget goes back to this step
  slices_.erase(std::remove_if(slices_.begin(), slices_.end(), [&](const PlannedSlice& p) { return p.id == victim.id; }),
                slices_.end());
  release(victim, true);
  victim.state = RequestState::waiting;
  ++victim.preemptions;
  ++preemptions_;
}

void BatchPlanner::admit(PlannedSequence& s) {
  s.cached_prompt_tokens = 0;
  if (!limits_.prefix_caching) return;
  // Whole cached pages, leaving at least one token to compute (its logits give the next token).
  const size_t max_pages = (s.tokens.size() - 1) / page_size_;
  std::vector<int32_t> pages = cache_.match(s.tokens, max_pages);
  // A sliding-window model starts only where the prefix's end still has its
  // window's local rows: its next query reads them (from one position back,
  // as the page boundary may be recomputed).
  size_t m = pages.size();
  // Cut at the last page its window lacks, until a window is whole.
  for (int64_t gap; m > 0 && (gap = missing_local(std::span<const int32_t>(pages).first(m),
                                                   static_cast<int32_t>(m) * page_size_ - 1)) >= 0;)
    m = static_cast<size_t>(gap);
  for (size_t i = m; i < pages.size(); ++i) pool_.release(pages[i]);
  pages.resize(m);
  if (windowed()) cache_.release_local(pages);  // the sequence answers for them now
  s.kv.adopt(pages);
  s.computed = static_cast<int32_t>(pages.size()) * page_size_;
  s.registered_pages = static_cast<int32_t>(pages.size());
  s.cached_prompt_tokens = std::min(s.computed, s.prompt_tokens);
}

// With every slot taken, the newest (least important first) sequence whose
// slot moves fairly to `s`'s tenant and that is not more important than `s`.
PlannedSequence* BatchPlanner::slot_victim(const PlannedSequence& s) {
  PlannedSequence* victim = nullptr;
  for (auto& [id, p] : seqs_) {
    PlannedSequence* v = p.get();
    if (v->state != RequestState::running || v->priority < s.priority || !fair_slot_move(*v, s)) continue;
    if (!victim || v->priority > victim->priority || (v->priority == victim->priority && v->arrival > victim->arrival))
      victim = v;
  }
  return victim;
}

// A new admission takes pages from running work only across tenants, where
// they move fairly (within a tenant, arrival order stands: it waits).
bool BatchPlanner::fair_victim_exists(const PlannedSequence& s, int32_t until) const {
  for (const auto& [id, p] : seqs_)
    if (p->state == RequestState::running && p->priority >= s.priority && fair_page_move(*p, s, until)) return true;
  return false;
}

Batch BatchPlanner::batch() const {
  Batch b;
  b.sequences.reserve(slices_.size());
  for (const PlannedSlice& p : slices_) {
    const PlannedSequence& s = *seqs_.at(p.id);
    if (p.drafts > 0) {
      b.sequences.push_back({std::span(s.window), p.start - s.evicted, s.kv.block_table(), LogitsWanted::all});
      b.sequences.back().rope_offset = s.evicted;
      continue;
    }
    b.sequences.push_back({std::span(s.tokens).subspan(static_cast<size_t>(p.start), static_cast<size_t>(p.count)),
                           p.start - s.evicted, s.kv.block_table(), p.wants_token ? LogitsWanted::last : LogitsWanted::none});
    b.sequences.back().rope_offset = s.evicted;
  }
  return b;
}

void BatchPlanner::commit(std::span<const int32_t> sampled) {
  std::vector<std::vector<int32_t>> kept;
  kept.reserve(sampled.size());
  for (int32_t t : sampled) kept.push_back({t});
  commit(std::span<const std::vector<int32_t>>(kept));
}

void BatchPlanner::set_drafts(uint64_t id, std::vector<int32_t> drafts) {
  if (PlannedSequence* s = get(id)) s->drafts = std::move(drafts);
}

void BatchPlanner::extend(uint64_t id, std::span<const int32_t> tokens) {
  if (PlannedSequence* s = get(id)) s->tokens.insert(s->tokens.end(), tokens.begin(), tokens.end());
}

void BatchPlanner::commit(std::span<const std::vector<int32_t>> kept) {
  size_t k = 0;
  for (const PlannedSlice& p : slices_) {
    PlannedSequence* s = get(p.id);
    if (!s) {
      k += p.wants_token;
      continue;
    }
    s->computed = p.start + p.count;
    s->drafts.clear();
    if (auto t = tenants_.find(s->tenant); t != tenants_.end()) t->second.served += static_cast<double>(p.count) / t->second.weight;
    if (p.wants_token) {
      if (k >= kept.size() || kept[k].empty()) throw std::invalid_argument("commit: fewer sampled tokens than slices wanting one");
      const std::vector<int32_t>& mine = kept[k++];
      const auto accepted = static_cast<int32_t>(mine.size()) - 1;
      if (accepted > p.drafts || !std::equal(mine.begin(), mine.end() - 1, s->window.begin() + (p.drafts > 0 ? 1 : 0)))
        throw std::invalid_argument("commit: accepted tokens are not the window's drafts");
      if (p.drafts > 0) {
        s->computed = p.start + 1 + accepted;  // the last token and the accepted drafts
        s->kv.truncate(s->slots());            // rejected positions roll back: their pages go
      }
      s->tokens.insert(s->tokens.end(), mine.begin(), mine.end());
    }
    if (limits_.prefix_caching && s->evicted == 0 && s->computed / page_size_ > s->registered_pages) {
      cache_.insert(std::span(s->tokens).first(static_cast<size_t>(s->computed)), s->kv.block_table());
      s->registered_pages = s->computed / page_size_;
    }
  }
  for (const PlannedEviction& e : evictions_) ++evictions_run_, positions_evicted_ += static_cast<uint64_t>(e.length - e.keep);
  slices_.clear();
  copies_.clear();
  evictions_.clear();
  release_retired();
  settle_local();
}

int32_t BatchPlanner::queue_position(uint64_t id) const {
  const PlannedSequence* me = find(id);
  if (!me || me->state != RequestState::waiting) return -1;
  int32_t ahead = 0;
  for (const auto& [k, s] : seqs_)
    if (s->state == RequestState::waiting &&
        (s->priority < me->priority || (s->priority == me->priority && s->arrival < me->arrival)))
      ++ahead;
  return ahead;
}

int32_t BatchPlanner::running() const {
  int32_t n = 0;
  for (const auto& [id, s] : seqs_) n += s->state == RequestState::running;
  return n;
}

PlannerStats BatchPlanner::stats() const {
  PlannerStats st;
  std::unordered_map<int32_t, int32_t> live;  // page -> tokens it holds for some sequence
  for (const auto& [id, s] : seqs_) {
    if (s->state == RequestState::running) ++st.running;
    if (s->state == RequestState::waiting) ++st.waiting;
    // Slots the planned (maybe running) step is filling count as live.
    int32_t filled = s->slots();
    for (const PlannedSlice& p : slices_)
      if (p.id == id) filled = std::max(filled, p.start - s->evicted + p.count);
    const auto table = s->kv.block_table();
    for (size_t i = 0; i < table.size(); ++i) {
      const int32_t held = std::clamp(filled - static_cast<int32_t>(i) * page_size_, 0, page_size_);
      int32_t& v = live[table[i]];
      v = std::max(v, held);
    }
  }
  st.pages_total = pool_.capacity();
  st.pages_free = pool_.free_count();
  st.pages_cached = cache_.cached_pages();
  st.pages_used = pool_.used_count() - st.pages_cached;
  st.local_pages_total = pool_.local_capacity();
  st.local_pages_used = pool_.local_used_count();
  int64_t tokens = 0;
  for (const auto& [page, n] : live) tokens += n;
  st.live_token_fraction = live.empty() ? 1.0f : static_cast<float>(tokens) / static_cast<float>(live.size() * page_size_);
  st.preemptions = preemptions_;
  st.evictions = evictions_run_;
  st.positions_evicted = positions_evicted_;
  return st;
}

}  // namespace troupe
