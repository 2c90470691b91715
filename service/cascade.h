#pragma once
// Cascade routing across model tiers (`troupe serve --tiers small,large`):
// which tier answers a request, when a small tier hands a request to the
// next one mid-stream, and how `auto` learns between policies. Plain
// decisions; the router actor (actors/tier_router_actor.cpp) and each
// tier's scheduler apply them. docs/CASCADE.md says why they are so.
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "messages/client_frames.h"

namespace troupe::service {

enum class RouteKind : uint8_t {
  fixed,      // one tier answers
  escalate,   // the first tier writes until its confidence falls; the next continues
  verify,     // the first tier drafts, the last verifies (speculation, accept_ratio)
  automatic,  // the router picks escalate or verify per workload class
};

// What the hold rule judges its held tokens by (docs/CASCADE.md): their
// geometric mean probability, or the tail: the geometric mean of the least
// probable tenth of them (at least 2), which held best across workloads in
// docs/BENCHMARKS.md ("The cascade on work it was not tuned on").
enum class HoldSignal : uint8_t { geomean, tail };
bool parse_hold_signal(const std::string& name, HoldSignal& out);

struct Route {
  RouteKind kind = RouteKind::fixed;
  int32_t tier = -1;        // the tier it runs on now; -1: a server without tiers
  float threshold = 0.0f;   // escalate: the confidence to stay above (EscalationWatch)
  int32_t window = 8;       // escalate: over this many tokens
  int32_t within = 0;       // escalate: only among the answer's first this many tokens; 0: anywhere
  int32_t hold = 0;         // escalate: hold the answer's first this many tokens back and judge them together
  HoldSignal signal = HoldSignal::geomean;  // escalate with a hold: what the held tokens are judged by
  bool chosen_by_auto = false;
  int32_t workload = -1;    // auto: the class it was chosen for
  // The budget rule (service/escalation_budget.h): the class whose figures
  // set `threshold` (empty: the threshold rule), and the confidence this
  // tier judged the request by (-1: not judged here yet).
  std::string budget_class;
  float confidence = -1.0f;
};

// Each rule's default threshold (on its own scale: a geometric mean of the
// held tokens, a window's plain mean), the best measured on HumanEval
// (docs/BENCHMARKS.md).
constexpr float kHoldThreshold = 0.82f, kSwitchThreshold = 0.3f, kTailThreshold = 0.33f;
inline float default_escalate_threshold(int32_t hold, HoldSignal signal = HoldSignal::geomean) {
  if (hold <= 0) return kSwitchThreshold;
  return signal == HoldSignal::tail ? kTailThreshold : kHoldThreshold;
}

// The tiers a server runs, smallest first, and its defaults.
struct TierTable {
  std::vector<std::string> names;                 // each tier's model name, as reported
  std::vector<std::vector<std::string>> aliases;  // what requests may call each tier
  std::string default_policy = "escalate";
  int32_t hold = 48;  // 0: switch at the first unsure window instead
  HoldSignal signal = HoldSignal::geomean;
  float default_threshold = default_escalate_threshold(hold);
  int32_t window = 1;
  int32_t within = 8;
  int32_t escalate_for_good = 3;  // a session's turns stay on the last tier after this many escalations
  float escalate_budget = 0.0f;   // the budget rule's share (service/escalation_budget.h); 0: off
  bool empty() const { return names.empty(); }
  int32_t last() const { return static_cast<int32_t>(names.size()) - 1; }
};

// The request's route from its sampling's tier fields, or why it has none
// (one line, for invalid_field). `samples`: n parallel samples.
std::variant<Route, std::string> resolve_route(const TierTable& tiers, const messages::SamplingFields& s, int32_t samples);
// What the route means for the response cache key (answers differ by route).
std::string route_key(const Route& r);
// Whether the route's answer depends on what the router has learned (auto's
// choice, the budget rule's threshold): such answers bypass the response cache.
bool route_learns(const TierTable& tiers, const Route& r, const messages::SamplingFields& s);
// The budget rule sets this escalate route's threshold (a request's own
// escalate_threshold and the switch rule keep theirs).
bool budget_rules(const TierTable& tiers, const Route& r, const messages::SamplingFields& s);

// The confidence signal of `escalate`: the probabilities of the tokens the
// small tier chose (greedy: its top token). Two rules (docs/CASCADE.md):
// - hold (`hold` > 0): the answer's first `hold` tokens are held back, not
//   sent, and judged together: their geometric mean probability (the mean
//   log-probability) below the threshold escalates, and the next tier writes
//   the whole answer. An answer that ends sooner is judged when it ends.
// - switch (`hold` = 0): the mean over a sliding window of `window` tokens;
//   it trips once the window is full and the mean falls below the
//   threshold, only among the answer's first `within` tokens when that is
//   > 0 (a late switch inherits a prefix the large model cannot take back).
class EscalationWatch {
 public:
  enum class Verdict : uint8_t {
    send,      // send this token
    hold,      // keep it back: the judgement is not made yet
    release,   // send every held token and this one: the small tier keeps the answer
    escalate,  // the next tier writes from the first unsent position
  };
  EscalationWatch(float threshold, int32_t window, int32_t within = 0, int32_t hold = 0,
                  HoldSignal signal = HoldSignal::geomean)
      : threshold_(threshold), window_(window < 1 ? 1 : window), within_(within), hold_(hold < 0 ? 0 : hold),
        signal_(signal) {}
  Verdict observe(float probability);
  // The answer's first `n` tokens were sent before this watch began (a
  // request moved to another worker, or from a smaller tier): they count
  // toward `within`, and a hold that released them is decided.
  void sent_before(int32_t n);
  // The answer ended (or filled the context) while tokens were held.
  Verdict judge() const;
  float mean() const { return recent_.empty() ? 1.0f : static_cast<float>(sum_ / recent_.size()); }
  // hold: what the request is judged by, from the tokens held so far (their
  // geometric mean, or its tail). -1: switch, nothing held, or judged elsewhere.
  float confidence() const;

 private:
  float threshold_;
  size_t window_;
  int32_t within_, hold_, seen_ = 0;
  HoldSignal signal_;
  std::deque<float> recent_;
  std::vector<float> held_;  // tail: the held tokens' probabilities
  double held_value() const;  // the held tokens' geometric mean, or its tail
  double sum_ = 0, log_sum_ = 0;
  bool decided_before_ = false;
};

// What a finished request teaches `auto`.
struct RouteOutcome {
  RouteKind kind = RouteKind::escalate;
  int32_t workload = -1;
  int32_t tokens = 0;        // completion tokens
  int32_t large_tokens = 0;  // of them, written by the last tier (escalate)
  int32_t drafted = 0, accepted = 0, windows = 0;  // verify
  // escalate under the budget rule: the class and the confidence the
  // request was judged by where it ended without escalating (-1: none).
  std::string budget_class;
  float confidence = -1.0f;
};

// auto's choice per workload class (priority x prompt-length bucket): the
// policy expected to cost the last tier fewest forward passes per token,
// from measured escalation and acceptance. Escalate: the share of tokens the
// last tier wrote, plus a re-read of the prompt when it escalated. Verify:
// one pass per verified window. Each class tries both before it settles,
// and re-measures the other every `explore_every` requests.
class AutoChooser {
 public:
  explicit AutoChooser(int32_t explore_every = 16) : explore_every_(explore_every) {}
  static int32_t workload(uint8_t priority, int64_t prompt_tokens);
  RouteKind choose(int32_t workload);
  void learn(const RouteOutcome& o);
  // Expected last-tier passes per token for a class, or -1 when unmeasured.
  double cost(int32_t workload, RouteKind kind) const;

 private:
  struct Measured {
    double cost = 0;  // moving average
    int64_t n = 0;
  };
  struct Class {
    Measured escalate, verify;
    int64_t chosen = 0;
  };
  int32_t explore_every_;
  std::map<int32_t, Class> classes_;
};

}  // namespace troupe::service
