#pragma once
// The budget rule of `escalate` (serve --escalate-budget SHARE): the operator
// names the share of requests the next tier may take, and the router turns
// it into each request's threshold: the confidence below which that share of
// the class's recent requests fell. A threshold rule is a point on one
// workload's curve; a share means the same on any workload, and follows one
// whose confidences drift (docs/CASCADE.md, "The budget rule").
//
// Per workload class (a client-named class, a batch job, or priority x
// prompt length): the last `history` judged confidences and how many of them
// escalated. The threshold is the quantile of those confidences at the share,
// moved by how far the class's recent escalations stray from it (a quantile
// of the past lags a drift; the correction pulls the realised share back).
// A class with fewer than `warmup` judgements borrows every class's pooled
// figures; with none at all, the threshold rule's value stands.
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::messages {
struct EscalationClassFields;
}

namespace troupe::service {

struct EscalationBudgetConfig {
  float share = 0.0f;     // of judged requests to escalate, in (0, 1); 0: off (the threshold rule)
  int32_t history = 256;  // confidences kept per class
  int32_t warmup = 16;    // judgements before a class is judged on its own figures
  size_t max_classes = 256;  // beyond it, the class used least recently is forgotten
};

class EscalationBudget {
 public:
  explicit EscalationBudget(EscalationBudgetConfig config = {});
  bool on() const { return cfg_.share > 0.0f; }
  float share() const { return cfg_.share; }

  // The threshold a request of `workload_class` is judged against now;
  // `fallback` (the threshold rule's) while nothing has been judged.
  float threshold(const std::string& workload_class, float fallback);
  // A request of the class was judged: its confidence, and whether it escalated.
  void judged(const std::string& workload_class, float confidence, bool escalated);

  // Every class's figures, for the store; load() takes them back (false:
  // unreadable bytes, and nothing changes). Judgements since the last save().
  std::string save();
  bool load(std::string_view bytes);
  int64_t unsaved() const { return unsaved_; }
  size_t classes() const { return classes_.size(); }
  // The realised share of a class's recent judgements (-1: unknown class).
  double realised(const std::string& workload_class) const;
  // Every class's figures as `troupe stats` shows them, the pool first.
  std::vector<messages::EscalationClassFields> figures() const;

  static constexpr const char* kPooled = "*";  // every class's judgements together

 private:
  struct Class {
    std::deque<float> confidences;  // the last `history`, oldest first
    double escalated = 0;           // moving share of recent judgements that escalated
    uint64_t last_use = 0;
  };
  void record(Class& c, float confidence, bool escalated);
  float quantile(const Class& c) const;
  bool known(const Class& c) const { return static_cast<int32_t>(c.confidences.size()) >= cfg_.warmup; }
  void forget_least_used();

  EscalationBudgetConfig cfg_;
  std::map<std::string, Class> classes_;
  uint64_t clock_ = 0;
  int64_t unsaved_ = 0;
};

// The class a request's confidences are pooled in: the name its client gave,
// else its batch job's, else its priority and prompt length (auto's classes).
std::string escalation_class(const std::string& named, const std::string& job_id, uint8_t priority,
                             int64_t prompt_tokens);

}  // namespace troupe::service
