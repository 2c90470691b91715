// The budget rule of escalate (service/escalation_budget.h): the share of
// requests escalated holds at the operator's figure while the confidences
// drift, per class, across a restart (save and load), and with the
// judgements of requests in flight arriving late.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>
#include <string>
#include <utility>

#include "messages/client_frames.h"
#include "service/escalation_budget.h"

using troupe::service::EscalationBudget;
using troupe::service::EscalationBudgetConfig;

namespace {

// Confidences like a small model's geometric mean over its held tokens:
// mostly high, a tail of unsure answers, centred at `centre`.
struct Confidences {
  std::mt19937 rng{7};
  float draw(double centre) {
    std::normal_distribution<double> n(centre, 0.08);
    return static_cast<float>(std::clamp(n(rng), 0.0, 1.0));
  }
};

// Runs `count` requests of one class through the rule, each judged `lag`
// requests after its threshold was set (requests in flight), and returns the
// share escalated in each block of `block` requests.
template <typename Centre>
std::vector<double> run(EscalationBudget& b, const std::string& cls, int count, int block, int lag, Centre centre,
                        Confidences& conf) {
  std::deque<std::pair<float, float>> in_flight;  // (threshold, confidence)
  std::vector<double> shares;
  int escalated = 0, judged = 0;
  for (int i = 0; i < count + lag; ++i) {
    if (i < count) in_flight.emplace_back(b.threshold(cls, 0.82f), conf.draw(centre(i)));
    if (static_cast<int>(in_flight.size()) <= lag && i < count) continue;
    const auto [threshold, confidence] = in_flight.front();
    in_flight.pop_front();
    const bool up = confidence < threshold;
    b.judged(cls, confidence, up);
    escalated += up;
    if (++judged == block) {
      shares.push_back(static_cast<double>(escalated) / block);
      escalated = judged = 0;
    }
  }
  return shares;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

}  // namespace

TEST_CASE("budget rule: off, it is the threshold rule") {
  EscalationBudget b;
  CHECK_FALSE(b.on());
  CHECK(b.threshold("job/a", 0.82f) == 0.82f);
  b.judged("job/a", 0.5f, true);
  CHECK(b.classes() == 0);
}

TEST_CASE("budget rule: before any judgement the fallback, then the class's quantile") {
  EscalationBudget b({.share = 0.25f, .history = 100, .warmup = 4});
  CHECK(b.threshold("class/x", 0.82f) == 0.82f);
  for (float c : {0.9f, 0.6f, 0.8f, 0.7f}) b.judged("class/x", c, false);
  // Four judged, none escalated: the moving share fell under 0.25, so the
  // quantile is taken a little above it: the second smallest of four.
  const float t = b.threshold("class/x", 0.82f);
  CHECK((t == 0.7f || t == 0.6f));
  // A new class borrows the pooled figures.
  CHECK(b.threshold("class/new", 0.82f) == t);
}

TEST_CASE("budget rule: the share holds within 5 points while confidences drift") {
  for (float share : {0.1f, 0.3f, 0.5f}) {
    DYNAMIC_SECTION("share " << share) {
      EscalationBudget b({.share = share});
      Confidences conf;
      // A slow drift down (the workload grows harder), then a step up (an easier one).
      const auto centre = [](int i) { return i < 3000 ? 0.92 - 0.25 * i / 3000.0 : 0.9; };
      const auto shares = run(b, "job/drift", 5000, 500, 8, centre, conf);
      INFO("shares per 500: " << Catch::Detail::stringify(shares));
      CHECK(std::abs(mean(shares) - share) <= 0.05);
      // Every block but the one with the step, which the rule needs ~50 requests to follow.
      for (size_t k = 0; k < shares.size(); ++k)
        if (k != 6) CHECK(std::abs(shares[k] - share) <= 0.05);
    }
  }
}

TEST_CASE("budget rule: a fixed threshold tuned on one workload does not hold its share on the next") {
  // What the rule is for: the threshold that escalates 30 % at the first
  // workload escalates far more once the confidences move.
  Confidences conf;
  int escalated = 0;
  for (int i = 0; i < 2000; ++i) escalated += conf.draw(0.75) < 0.82f;
  CHECK(escalated / 2000.0 > 0.7);
  EscalationBudget b({.share = 0.3f});
  const auto shares = run(b, "job/shifted", 2000, 2000, 8, [](int) { return 0.75; }, conf);
  CHECK(std::abs(shares.front() - 0.3) <= 0.05);
}

TEST_CASE("budget rule: classes keep their own figures") {
  EscalationBudget b({.share = 0.2f});
  Confidences conf;
  const auto easy = run(b, "class/easy", 2000, 2000, 4, [](int) { return 0.95; }, conf);
  const auto hard = run(b, "class/hard", 2000, 2000, 4, [](int) { return 0.6; }, conf);
  CHECK(std::abs(easy.front() - 0.2) <= 0.05);
  CHECK(std::abs(hard.front() - 0.2) <= 0.05);
  CHECK(b.threshold("class/easy", 0.82f) > b.threshold("class/hard", 0.82f) + 0.2f);
}

TEST_CASE("budget rule: saved and loaded, a restarted server goes on where it was") {
  EscalationBudget b({.share = 0.3f});
  Confidences conf;
  run(b, "job/a", 600, 600, 0, [](int) { return 0.7; }, conf);
  CHECK(b.unsaved() == 600);
  const std::string bytes = b.save();
  CHECK(b.unsaved() == 0);
  EscalationBudget restarted({.share = 0.3f});
  REQUIRE(restarted.load(bytes));
  CHECK(restarted.threshold("job/a", 0.82f) == b.threshold("job/a", 0.82f));
  CHECK(restarted.realised("job/a") == b.realised("job/a"));
  // Damaged bytes are refused whole: what was loaded stays.
  for (size_t cut : {size_t{0}, size_t{10}, bytes.size() / 2, bytes.size() - 1}) CHECK_FALSE(restarted.load(bytes.substr(0, cut)));
  std::string flipped = bytes;
  flipped.back() = '\x7f';  // the last confidence's sign and exponent: no longer a probability
  CHECK_FALSE(restarted.load(flipped));
  CHECK(restarted.threshold("job/a", 0.82f) == b.threshold("job/a", 0.82f));
  // Figures from a server that kept a longer history: the newest are kept.
  EscalationBudget shorter({.share = 0.3f, .history = 100});
  REQUIRE(shorter.load(bytes));
  CHECK(shorter.figures().front().judged == 100);
}

TEST_CASE("budget rule: the classes are bounded, the least used forgotten first") {
  EscalationBudget b({.share = 0.3f, .max_classes = 3});
  for (const char* c : {"class/a", "class/b", "class/c"}) b.judged(c, 0.5f, false);
  b.threshold("class/a", 0.82f);  // a used again
  b.judged("class/d", 0.5f, false);
  CHECK(b.classes() == 4);  // three and the pool
  CHECK(b.realised("class/b") < 0);
  CHECK(b.realised("class/a") >= 0);
  CHECK(b.realised(EscalationBudget::kPooled) >= 0);
}

TEST_CASE("budget rule: the class of a request") {
  using troupe::service::escalation_class;
  CHECK(escalation_class("extract", "job1", 2, 100) == "class/extract");
  CHECK(escalation_class("", "job1", 2, 100) == "job/job1");
  CHECK(escalation_class("", "", 2, 100) == "workload/8");
  CHECK(escalation_class("", "", 0, 5000) == "workload/3");
}
