#include "service/placement.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

namespace troupe::service {

Placement::Placement(int32_t replicas, PlacementConfig config)
    : cfg_(config), replicas_(static_cast<size_t>(std::max(replicas, 1))) {
  cfg_.page_size = std::max(cfg_.page_size, 1);
  cfg_.prefix_pages_per_replica = std::max<size_t>(cfg_.prefix_pages_per_replica, 2);
  cfg_.max_sessions = std::max<size_t>(cfg_.max_sessions, 2);
}

void Placement::PrefixRecord::insert(uint64_t h, size_t bound) {
  if (current.count(h)) return;
  previous.erase(h);
  if (current.size() >= bound / 2) previous = std::exchange(current, {});
  current.emplace(h, 0);
}

std::vector<uint64_t> Placement::page_chain(std::span<const int32_t> prompt) const {
  const size_t pages = prompt.size() / static_cast<size_t>(cfg_.page_size);
  std::vector<uint64_t> chain(pages);
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the token ids, carried from page to page
  for (size_t p = 0; p < pages; ++p) {
    for (size_t i = p * static_cast<size_t>(cfg_.page_size); i < (p + 1) * static_cast<size_t>(cfg_.page_size); ++i) {
      h ^= static_cast<uint32_t>(prompt[i]);
      h *= 0x100000001b3ull;
    }
    chain[p] = h ^ (p + 1);
  }
  return chain;
}

int32_t Placement::matched_pages(const Replica& r, const std::vector<uint64_t>& chain) const {
  // The record holds every prefix sent, so matches are a prefix of the chain: binary search.
  size_t lo = 0, hi = chain.size();
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    if (r.prefixes.contains(chain[mid - 1])) lo = mid;
    else hi = mid - 1;
  }
  return static_cast<int32_t>(lo);
}

double Placement::cost(const Replica& r, int64_t prompt_tokens) const {
  // A slower worker (a longer step) takes proportionally fewer requests.
  double sum = 0;
  int32_t known = 0;
  for (const Replica& o : replicas_)
    if (o.up && o.load.step_ms > 0) sum += o.load.step_ms, ++known;
  const double speed = r.load.step_ms > 0 && known > 0 ? r.load.step_ms / (sum / known) : 1.0;
  double c = (r.live + 1) * speed;
  // No room for the prompt: chosen only when no worker has room.
  if (r.load.total_pages > 0 && int64_t{r.load.free_pages} * cfg_.page_size < prompt_tokens) c += 1e9;
  return c;
}

int32_t Placement::up_count() const {
  return static_cast<int32_t>(std::count_if(replicas_.begin(), replicas_.end(), [](const Replica& r) { return r.up; }));
}

// In order: the session's last worker unless it is overloaded, the worker
// holding the longest prefix of the prompt (the cheaper on a tie), the
// cheapest worker. Overloaded: more than `slack` requests over the least loaded.
Placement::Choice Placement::place(std::span<const int32_t> prompt, const std::string& session_id, int32_t avoid) {
  const auto start = std::chrono::steady_clock::now();
  Choice c;
  const auto usable = [&](size_t i) { return replicas_[i].up && static_cast<int32_t>(i) != avoid; };
  int32_t min_live = std::numeric_limits<int32_t>::max();
  for (size_t i = 0; i < replicas_.size(); ++i)
    if (usable(i)) min_live = std::min(min_live, replicas_[i].live);
  if (min_live == std::numeric_limits<int32_t>::max()) return c;  // none up
  const auto eligible = [&](size_t i) { return usable(i) && replicas_[i].live <= min_live + cfg_.slack; };
  const std::vector<uint64_t> chain = page_chain(prompt);
  const int32_t home = session_home(session_id);
  if (home != kNone && eligible(static_cast<size_t>(home))) c = {home, 0, Choice::Why::session, false};
  if (c.replica == kNone) c = by_prefix(chain, static_cast<int64_t>(prompt.size()), eligible);
  if (c.replica == kNone) c = by_load(static_cast<int64_t>(prompt.size()), usable);
  if (c.why != Choice::Why::prefix) c.prefix_pages = matched_pages(replicas_[static_cast<size_t>(c.replica)], chain);
  c.moved_session = home != kNone && home != c.replica;
  record(c, chain, session_id);
  counters_.place_ns +=
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  return c;
}

int32_t Placement::session_home(const std::string& session_id) const {
  if (session_id.empty()) return kNone;
  if (auto it = sessions_.find(session_id); it != sessions_.end()) return it->second;
  if (auto old = old_sessions_.find(session_id); old != old_sessions_.end()) return old->second;
  return kNone;
}

Placement::Choice Placement::by_prefix(const std::vector<uint64_t>& chain, int64_t prompt_tokens,
                                       const std::function<bool(size_t)>& eligible) const {
  Choice c;
  double best_cost = 0;
  for (size_t i = 0; i < replicas_.size() && !chain.empty(); ++i) {
    if (!eligible(i)) continue;
    const int32_t m = matched_pages(replicas_[i], chain);
    const double k = cost(replicas_[i], prompt_tokens);
    if (m > 0 && (m > c.prefix_pages || (m == c.prefix_pages && k < best_cost))) {
      c.replica = static_cast<int32_t>(i), c.prefix_pages = m, best_cost = k;
      c.why = Choice::Why::prefix;
    }
  }
  return c;
}

Placement::Choice Placement::by_load(int64_t prompt_tokens, const std::function<bool(size_t)>& usable) const {
  Choice c;
  double best_cost = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (!usable(i)) continue;
    const double k = cost(replicas_[i], prompt_tokens);
    if (k < best_cost) c.replica = static_cast<int32_t>(i), best_cost = k;
  }
  c.why = Choice::Why::load;
  return c;
}

// The request is the chosen worker's now: its load, its prefix, its session.
void Placement::record(const Choice& c, const std::vector<uint64_t>& chain, const std::string& session_id) {
  Replica& r = replicas_[static_cast<size_t>(c.replica)];
  ++r.live;
  for (uint64_t h : chain) r.prefixes.insert(h, cfg_.prefix_pages_per_replica);
  if (!session_id.empty()) {
    if (sessions_.size() >= cfg_.max_sessions / 2 && !sessions_.count(session_id))
      old_sessions_ = std::exchange(sessions_, {});
    old_sessions_.erase(session_id);
    sessions_[session_id] = c.replica;
  }
  ++counters_.placed;
  counters_.by_session += c.why == Choice::Why::session;
  counters_.by_prefix += c.why == Choice::Why::prefix;
  counters_.by_load += c.why == Choice::Why::load;
  counters_.sessions_moved += c.moved_session;
}

void Placement::pin(int32_t replica) {
  if (replica >= 0 && replica < replicas()) ++replicas_[static_cast<size_t>(replica)].live;
}

void Placement::ended(int32_t replica) {
  if (replica < 0 || replica >= replicas()) return;
  Replica& r = replicas_[static_cast<size_t>(replica)];
  r.live = std::max(r.live - 1, 0);
}

void Placement::report(int32_t replica, const ReplicaLoad& load) {
  if (replica < 0 || replica >= replicas()) return;
  replicas_[static_cast<size_t>(replica)].load = load;
}

void Placement::down(int32_t replica) {
  if (replica < 0 || replica >= replicas()) return;
  Replica& r = replicas_[static_cast<size_t>(replica)];
  r.up = false;
  r.load = {};
  r.prefixes.clear();
  // Its sessions are placed afresh (their stored pages restore anywhere).
  std::erase_if(sessions_, [&](const auto& e) { return e.second == replica; });
  std::erase_if(old_sessions_, [&](const auto& e) { return e.second == replica; });
}

int32_t Placement::add() {
  replicas_.emplace_back();
  return replicas() - 1;
}

void Placement::up(int32_t replica) {
  if (replica < 0 || replica >= replicas()) return;
  replicas_[static_cast<size_t>(replica)].up = true;
}

}  // namespace troupe::service
