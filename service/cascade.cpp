#include "service/cascade.h"

#include <algorithm>
#include <cmath>

namespace troupe::service {
namespace {

std::string tier_list(const TierTable& t) {
  std::string out = "small, large, escalate, verify, auto";
  for (const auto& names : t.aliases)
    for (const auto& n : names) out += ", " + n;
  return out;
}

}  // namespace

std::variant<Route, std::string> resolve_route(const TierTable& t, const messages::SamplingFields& s, int32_t samples) {
  Route r;
  if (t.empty()) {
    if (s.tier.empty()) return r;
    return "sampling.tier: this server runs one model; '" + s.tier + "' needs a server started with --tiers";
  }
  const std::string& policy = s.tier.empty() ? t.default_policy : s.tier;
  r.threshold = s.escalate_threshold > 0 ? s.escalate_threshold : t.default_threshold;
  r.window = t.window;
  r.within = t.within;
  r.hold = t.hold;
  r.signal = t.signal;
  if (policy == "small") {
    r.tier = 0;
  } else if (policy == "large") {
    r.tier = t.last();
  } else if (policy == "escalate" || policy == "verify" || policy == "auto") {
    r.kind = policy == "escalate" ? RouteKind::escalate : policy == "verify" ? RouteKind::verify : RouteKind::automatic;
    r.tier = r.kind == RouteKind::verify ? t.last() : 0;
    if (samples > 1) return "sampling.tier: " + policy + " runs one sample (n = 1); n > 1 needs a fixed tier";
    if (r.kind != RouteKind::escalate && s.temperature > 0)
      return "sampling.tier: " + policy + " verifies greedy drafts; it needs temperature 0";
  } else {
    for (size_t i = 0; i < t.aliases.size() && r.tier < 0; ++i)
      if (std::find(t.aliases[i].begin(), t.aliases[i].end(), policy) != t.aliases[i].end()) r.tier = static_cast<int32_t>(i);
    if (r.tier < 0) return "sampling.tier: no tier '" + policy + "' on this server (" + tier_list(t) + ")";
  }
  return r;
}

std::string route_key(const Route& r) {
  if (r.tier < 0) return {};
  switch (r.kind) {
    case RouteKind::fixed: return "tier " + std::to_string(r.tier);
    case RouteKind::escalate:
      return "escalate " + std::to_string(r.threshold) + "/" + std::to_string(r.window) + "/" + std::to_string(r.within) +
             "/" + std::to_string(r.hold) + (r.signal == HoldSignal::tail ? "/tail" : "");
    case RouteKind::verify: return "verify";
    case RouteKind::automatic: return "auto";
  }
  return {};
}

bool parse_hold_signal(const std::string& name, HoldSignal& out) {
  if (name == "geomean") out = HoldSignal::geomean;
  else if (name == "tail") out = HoldSignal::tail;
  else return false;
  return true;
}

bool budget_rules(const TierTable& t, const Route& r, const messages::SamplingFields& s) {
  return t.escalate_budget > 0.0f && r.kind == RouteKind::escalate && r.tier == 0 && r.hold > 0 &&
         s.escalate_threshold <= 0.0f;
}

bool route_learns(const TierTable& t, const Route& r, const messages::SamplingFields& s) {
  return r.kind == RouteKind::automatic || budget_rules(t, r, s);
}

EscalationWatch::Verdict EscalationWatch::observe(float p) {
  if (hold_ > 0) {
    if (seen_ >= hold_) return Verdict::send;
    ++seen_;
    log_sum_ += std::log(std::max(p, 1e-30f));
    if (signal_ == HoldSignal::tail) held_.push_back(p);
    return seen_ < hold_ ? Verdict::hold : judge();
  }
  if (within_ > 0 && seen_ >= within_) return Verdict::send;
  ++seen_;
  recent_.push_back(p);
  sum_ += p;
  if (recent_.size() > window_) {
    sum_ -= recent_.front();
    recent_.pop_front();
  }
  const bool low = recent_.size() == window_ && sum_ < static_cast<double>(threshold_) * static_cast<double>(window_);
  return low ? Verdict::escalate : Verdict::send;
}

void EscalationWatch::sent_before(int32_t n) {
  if (n <= 0) return;
  if (hold_ > 0) decided_before_ = true;  // judged elsewhere: nothing here to judge by
  seen_ = hold_ > 0 ? hold_ : seen_ + n;
}

EscalationWatch::Verdict EscalationWatch::judge() const {
  if (hold_ == 0 || seen_ == 0) return Verdict::send;
  return held_value() < static_cast<double>(threshold_) ? Verdict::escalate : Verdict::release;
}

double EscalationWatch::held_value() const {
  if (signal_ == HoldSignal::geomean || held_.empty()) return std::exp(log_sum_ / seen_);
  std::vector<float> lowest = held_;
  const size_t k = std::min(lowest.size(), std::max<size_t>(2, lowest.size() / 10));
  std::partial_sort(lowest.begin(), lowest.begin() + static_cast<std::ptrdiff_t>(k), lowest.end());
  double log_tail = 0;
  for (size_t i = 0; i < k; ++i) log_tail += std::log(std::max(lowest[i], 1e-30f));
  return std::exp(log_tail / static_cast<double>(k));
}

float EscalationWatch::confidence() const {
  if (hold_ == 0 || seen_ == 0 || decided_before_) return -1.0f;
  return static_cast<float>(held_value());
}

int32_t AutoChooser::workload(uint8_t priority, int64_t prompt_tokens) {
  const int32_t bucket = prompt_tokens < 128 ? 0 : prompt_tokens < 512 ? 1 : prompt_tokens < 2048 ? 2 : 3;
  return static_cast<int32_t>(priority) * 4 + bucket;
}

double AutoChooser::cost(int32_t workload, RouteKind kind) const {
  auto it = classes_.find(workload);
  if (it == classes_.end()) return -1;
  const Measured& m = kind == RouteKind::verify ? it->second.verify : it->second.escalate;
  return m.n > 0 ? m.cost : -1;
}

RouteKind AutoChooser::choose(int32_t workload) {
  Class& c = classes_[workload];
  const int64_t k = c.chosen++;
  // Both measured a few times first, then the other re-measured now and then.
  if (c.escalate.n < 2 || c.verify.n < 2) return k % 2 == 0 ? RouteKind::escalate : RouteKind::verify;
  const RouteKind best = c.escalate.cost <= c.verify.cost ? RouteKind::escalate : RouteKind::verify;
  if (explore_every_ > 0 && k % explore_every_ == explore_every_ - 1)
    return best == RouteKind::escalate ? RouteKind::verify : RouteKind::escalate;
  return best;
}

void AutoChooser::learn(const RouteOutcome& o) {
  if (o.workload < 0 || o.tokens <= 0) return;
  Class& c = classes_[o.workload];
  double passes = 0;
  Measured* m = nullptr;
  if (o.kind == RouteKind::escalate) {
    // An escalated request costs the last tier one pass over the prefix, then one per token.
    passes = o.large_tokens > 0 ? 1.0 + o.large_tokens : 0.0;
    m = &c.escalate;
  } else if (o.kind == RouteKind::verify) {
    // One pass per step: each step writes its accepted drafts and one token of its own.
    passes = 1.0 + std::max(1, o.tokens - o.accepted);
    m = &c.verify;
  } else {
    return;
  }
  const double cost = passes / o.tokens;
  const double rate = m->n < 8 ? 1.0 / static_cast<double>(m->n + 1) : 0.125;  // a mean, then a moving one
  m->cost += rate * (cost - m->cost);
  ++m->n;
}

}  // namespace troupe::service
