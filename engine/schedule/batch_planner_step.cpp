// BatchPlanner's step (engine/schedule/batch_planner.h): plan() and its
// phases, decodes, prefills in fair order, then verify windows in what the
// step's budget has left.
#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "engine/schedule/batch_planner.h"

namespace troupe {

const std::vector<PlannedSlice>& BatchPlanner::plan() {
  // Running prefills that all need pages the others hold would wait for each
  // other forever: when nothing can run, the least important newest one
  // gives its pages back and the step is planned again, for the running
  // ones only. (Admitting a waiting request into the pages just freed brings
  // the standstill back: two requests take turns, and neither ever ends.)
  release_retired();  // a step that failed never committed
  bool admit = true;
  while (true) {
    plan_once(admit);
    if (!slices_.empty()) break;
    PlannedSequence* victim = nullptr;
    int32_t running = 0;
    for (auto& [id, p] : seqs_) {
      if (p->state != RequestState::running) continue;
      ++running;
      if (!victim || p->priority > victim->priority || (p->priority == victim->priority && p->arrival > victim->arrival))
        victim = p.get();
    }
    if (running <= 1) break;
    preempt(*victim);
    admit = false;
  }
  return slices_;
}

// A step's token budget, and batch work's share of it: batch work runs in
// idle capacity, so while anything more important runs or waits, batch
// sequences share at most batch_tokens_when_busy of the step.
struct BatchPlanner::StepBudget {
  int32_t tokens = 0;
  int32_t batch_left = 0;
  int32_t allowance(const PlannedSequence& s) const {
    return s.priority == Priority::batch ? std::min(tokens, batch_left) : tokens;
  }
  void spend(const PlannedSequence& s, int32_t n) {
    tokens -= n;
    if (s.priority == Priority::batch) batch_left -= n;
  }
};

// The prefill phase's state. A request that cannot get in keeps its place:
// none behind it passes (admitting turns false), unless it is held back by
// its own tenant's share (then only that tenant's later requests wait
// behind it: `held`).
struct BatchPlanner::PrefillRound {
  std::vector<PlannedSequence*> order;  // prefill_order()
  // The lightest tenant load with prefill work at each priority or a more important one.
  std::array<double, 3> lightest{};
  int32_t running = 0;
  bool admitting = true;
  std::vector<TenantId> held;
  bool under_share_prefilled = false;  // a tenant that yields to none prefilled this step
  bool is_held(TenantId t) const { return std::find(held.begin(), held.end(), t) != held.end(); }
};

// One step's slices, in two phases: a decode token (or a verify window) for
// every running sequence, then prefill chunks (those under way, then
// admissions) in fair order, while the budget, slots and pages last.
void BatchPlanner::plan_once(bool admit_waiting) {
  slices_.clear();
  copies_.clear();
  evictions_.clear();
  refund_ = 0;
  StepBudget budget = step_budget();
  plan_decodes(budget);
  PrefillRound round = prefill_round(admit_waiting);
  // A tenant over its share, or with more requests in the system for its
  // weight than another tenant with a prompt as important to compute,
  // yields its prefill chunks: in a step where that lighter tenant prefills
  // (a newcomer's prompt above all), the heavier ones decode but do not
  // prefill, so that step is short and the newcomer's first token comes one
  // short step after the step in flight, not after a step filled with the
  // flood's prompts. Tenants with as many requests each yield to none.
  std::vector<PlannedSequence*> yielded;
  for (PlannedSequence* s : round.order) {
    if (yields(*s, round, budget)) yielded.push_back(s);
    else prefill(*s, budget, round);
  }
  if (!round.under_share_prefilled)
    for (PlannedSequence* s : yielded) prefill(*s, budget, round);
  plan_windows(budget);
}

BatchPlanner::StepBudget BatchPlanner::step_budget() const {
  const bool busy = std::any_of(seqs_.begin(), seqs_.end(), [](const auto& e) {
    return e.second->priority < Priority::batch && e.second->state != RequestState::finished;
  });
  return {limits_.token_budget, busy ? limits_.batch_tokens_when_busy : limits_.batch_tokens_when_idle};
}

BatchPlanner::WindowRoom BatchPlanner::window_room() const {
  StepBudget budget = step_budget();
  WindowRoom room;
  auto take = [&](const PlannedSequence& s, int32_t wanted) {
    const int32_t n = std::min(wanted, budget.allowance(s));
    budget.spend(s, n);
    room.step_tokens += n;
    room.sequences += n > 0;
  };
  auto pending = [](const PlannedSequence& s) { return static_cast<int32_t>(s.tokens.size()) - s.computed; };
  int32_t running = 0;
  for (const auto& [id, s] : seqs_)
    if (s->state == RequestState::running && pending(*s) == 1) take(*s, 1), ++running;
  for (const auto& [id, s] : seqs_)
    if (s->state == RequestState::running && pending(*s) > 1) take(*s, pending(*s)), ++running;
  // Waiting prompts while slots are free (pages aside: counted as found).
  for (const auto& [id, s] : seqs_)
    if (s->state == RequestState::waiting && running < limits_.max_running) take(*s, pending(*s)), ++running;
  room.tokens = budget.tokens;
  room.batch_tokens = budget.batch_left;
  return room;
}

void BatchPlanner::refund(StepBudget& budget) { budget.tokens += std::exchange(refund_, 0); }

// Phase 1: one decode token for every running sequence, most important first.
void BatchPlanner::plan_decodes(StepBudget& budget) {
  for (PlannedSequence* s : by_priority(RequestState::running)) {
    if (budget.tokens == 0) break;
    if (s->state != RequestState::running) continue;  // preempted by an earlier one this step
    const int32_t pending = static_cast<int32_t>(s->tokens.size()) - s->computed;
    if (pending != 1 || budget.allowance(*s) == 0) continue;
    plan_eviction(*s, 1);
    bool ok = reserve(*s, s->computed + 1) && unshare_for_write(*s, s->computed);
    while (!ok && preempt_one(*s, s->computed + 1)) ok = reserve(*s, s->computed + 1) && unshare_for_write(*s, s->computed);
    refund(budget);
    if (!ok) {  // nothing less important to take pages from: it waits itself
      release(*s, true);
      s->state = RequestState::waiting;
      ++s->preemptions;
      ++preemptions_;
      continue;
    }
    slices_.push_back({s->id, s->computed, 1, true, 0});
    budget.spend(*s, 1);
  }
}

// Phase 3: a decode with drafts becomes a verify window, most important
// first, in the budget the prompts left and in pages got without preempting
// anyone: a drafted token is worth its acceptance (a fraction of a token), a
// prompt's token a whole one, so drafts never take a prompt's place.
void BatchPlanner::plan_windows(StepBudget& budget) {
  for (PlannedSlice& p : slices_) {
    if (budget.tokens == 0) break;
    PlannedSequence& s = *get(p.id);
    if (p.count != 1 || !p.wants_token || s.drafts.empty() || p.start + 1 != static_cast<int32_t>(s.tokens.size()))
      continue;
    int32_t k = std::min(static_cast<int32_t>(s.drafts.size()), budget.allowance(s));
    const EvictionPolicy policy = eviction_of(s);
    if (policy.on()) k = std::min(k, policy.budget - s.slots() - 1);  // no eviction for a window's sake
    if (k <= 0 || !reserve(s, s.computed + 1 + k)) continue;
    s.window.assign(1, s.tokens.back());
    s.window.insert(s.window.end(), s.drafts.begin(), s.drafts.begin() + k);
    p.count = 1 + k;
    p.drafts = k;
    budget.spend(s, k);
  }
}

BatchPlanner::PrefillRound BatchPlanner::prefill_round(bool admit_waiting) {
  PrefillRound round;
  round.order = prefill_order();
  round.running = static_cast<int32_t>(by_priority(RequestState::running).size());
  round.admitting = admit_waiting;
  round.lightest.fill(std::numeric_limits<double>::infinity());
  for (const PlannedSequence* s : round.order)
    for (auto p = static_cast<size_t>(s->priority); p < round.lightest.size(); ++p)
      round.lightest[p] = std::min(round.lightest[p], weighted_load(s->tenant));
  return round;
}

double BatchPlanner::weighted_load(TenantId t) const {
  const Tenant& x = tenants_.at(t);
  return static_cast<double>(x.sequences) / x.weight;
}

bool BatchPlanner::yields(const PlannedSequence& s, const PrefillRound& round, const StepBudget& budget) const {
  // Where its next prefill chunk ends (before admission: its first, uncached).
  const int32_t chunk_end = s.computed + std::min(static_cast<int32_t>(s.tokens.size()) - s.computed, budget.allowance(s));
  return over_share(s, chunk_end) || weighted_load(s.tenant) > round.lightest[static_cast<size_t>(s.priority)];
}

// Phase 2, one sequence: its prefill under way continues, or it is admitted.
void BatchPlanner::prefill(PlannedSequence& s, StepBudget& budget, PrefillRound& round) {
  if (budget.tokens == 0) return;
  const bool protects = other_tenant_active(s.tenant) && !yields(s, round, budget);
  const bool planned = s.state == RequestState::running ? continue_prefill(s, budget, round) : admit_prefill(s, budget, round);
  round.under_share_prefilled |= planned && protects;
}

bool BatchPlanner::continue_prefill(PlannedSequence& s, StepBudget& budget, PrefillRound& round) {
  if (std::any_of(slices_.begin(), slices_.end(), [&](const PlannedSlice& p) { return p.id == s.id; })) return false;
  const int32_t pending = static_cast<int32_t>(s.tokens.size()) - s.computed;
  const int32_t chunk = std::min(pending, budget.allowance(s));
  if (chunk <= 0) return false;
  // A prefill under way that finds no pages takes them from newer or
  // less important work, as a decode does: left holding its pages while
  // admissions pass it, it would never finish.
  bool ok = reserve(s, s.computed + chunk);
  const uint64_t before = preemptions_;
  while (!ok && preempt_one(s, s.computed + chunk)) ok = reserve(s, s.computed + chunk);
  refund(budget);
  round.running -= static_cast<int32_t>(preemptions_ - before);
  if (!ok || !unshare_for_write(s, s.computed)) return false;
  slices_.push_back({s.id, s.computed, chunk, s.computed + chunk == static_cast<int32_t>(s.tokens.size())});
  budget.spend(s, chunk);
  return true;
}

// A waiting request that cannot get in holds back those behind it, or only
// its tenant's when its own share holds it (hold()).
bool BatchPlanner::admit_prefill(PlannedSequence& s, StepBudget& budget, PrefillRound& round) {
  auto hold = [&] {
    if (over_share(s)) round.held.push_back(s.tenant);
    else round.admitting = false;
    return false;
  };
  if (!round.admitting || s.state != RequestState::waiting || budget.allowance(s) == 0 || round.is_held(s.tenant))
    return false;
  if (other_tenant_active(s.tenant) &&
      (tenant_running(s.tenant) >= share_of(limits_.max_running, limits_.tenant_slot_share) ||
       tenant_pages(s.tenant) >= share_of(pool_.capacity(), limits_.tenant_page_share))) {
    round.held.push_back(s.tenant);  // at its tenant's cap: others may still come in
    return false;
  }
  if (round.running >= limits_.max_running) {
    PlannedSequence* victim = slot_victim(s);
    if (!victim) return hold();
    preempt(*victim);
    refund(budget);
    --round.running;
  }
  admit(s);
  const int32_t chunk = std::min(static_cast<int32_t>(s.tokens.size()) - s.computed, budget.allowance(s));
  bool ok = reserve(s, s.computed + chunk);
  while (!ok && fair_victim_exists(s, s.computed + chunk) && preempt_one(s, s.computed + chunk))
    ok = reserve(s, s.computed + chunk);
  refund(budget);
  if (!ok) {
    release(s);  // no pages now: it keeps its place at the head of the queue
    return hold();
  }
  s.state = RequestState::running;
  slices_.push_back({s.id, s.computed, chunk, s.computed + chunk == static_cast<int32_t>(s.tokens.size())});
  budget.spend(s, chunk);
  ++round.running;
  return true;
}

}  // namespace troupe
