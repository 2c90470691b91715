#include "service/escalation_budget.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "messages/client_frames.h"
#include "service/cascade.h"

namespace troupe::service {
namespace {

// A moving share over about the last 32 judgements: recent enough to see a
// drift within a class's history, long enough not to chase one request.
constexpr double kRate = 1.0 / 32;
// How far a strayed share moves the quantile: by as much as it strayed.
constexpr double kGain = 1.0;

constexpr std::string_view kMagic = "troupe.escalation_budget.1";

template <typename T>
void put(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <typename T>
bool take(std::string_view& in, T& v) {
  if (in.size() < sizeof(T)) return false;
  std::memcpy(&v, in.data(), sizeof(T));
  in.remove_prefix(sizeof(T));
  return true;
}

}  // namespace

EscalationBudget::EscalationBudget(EscalationBudgetConfig config) : cfg_(config) {
  cfg_.history = std::max(cfg_.history, 1);
  cfg_.warmup = std::clamp(cfg_.warmup, 1, cfg_.history);
  cfg_.max_classes = std::max<size_t>(cfg_.max_classes, 1);
}

float EscalationBudget::quantile(const Class& c) const {
  const double q = std::clamp(cfg_.share + kGain * (cfg_.share - c.escalated), 0.0, 1.0);
  std::vector<float> sorted(c.confidences.begin(), c.confidences.end());
  const size_t k = static_cast<size_t>(q * static_cast<double>(sorted.size()));
  // Above every confidence (they are probabilities): all escalate.
  if (k >= sorted.size()) return 1.5f;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k), sorted.end());
  // Strictly below the k-th smallest escalates: k of the history would have.
  return sorted[k];
}

float EscalationBudget::threshold(const std::string& workload_class, float fallback) {
  if (!on()) return fallback;
  auto it = classes_.find(workload_class);
  if (it != classes_.end()) {
    it->second.last_use = ++clock_;
    if (known(it->second)) return quantile(it->second);
  }
  auto pooled = classes_.find(kPooled);
  if (pooled != classes_.end() && known(pooled->second)) return quantile(pooled->second);
  return fallback;
}

void EscalationBudget::record(Class& c, float confidence, bool escalated) {
  const bool first = c.confidences.empty();
  c.confidences.push_back(confidence);
  if (static_cast<int32_t>(c.confidences.size()) > cfg_.history) c.confidences.pop_front();
  // A new class starts at its target: no correction before it has a record.
  if (first) c.escalated = cfg_.share;
  c.escalated += kRate * ((escalated ? 1.0 : 0.0) - c.escalated);
  c.last_use = ++clock_;
}

void EscalationBudget::judged(const std::string& workload_class, float confidence, bool escalated) {
  if (!on() || !(confidence >= 0.0f)) return;
  record(classes_[workload_class], confidence, escalated);
  if (workload_class != kPooled) record(classes_[kPooled], confidence, escalated);
  ++unsaved_;
  while (classes_.size() > cfg_.max_classes + 1) forget_least_used();
}

void EscalationBudget::forget_least_used() {
  auto victim = classes_.end();
  for (auto it = classes_.begin(); it != classes_.end(); ++it)
    if (it->first != kPooled && (victim == classes_.end() || it->second.last_use < victim->second.last_use))
      victim = it;
  if (victim != classes_.end()) classes_.erase(victim);
}

double EscalationBudget::realised(const std::string& workload_class) const {
  auto it = classes_.find(workload_class);
  return it == classes_.end() ? -1.0 : it->second.escalated;
}

std::vector<messages::EscalationClassFields> EscalationBudget::figures() const {
  std::vector<messages::EscalationClassFields> out;
  static const Class kNone;
  auto it = classes_.find(kPooled);
  const Class* pooled = it == classes_.end() ? &kNone : &it->second;
  for (const auto& [name, c] : classes_) {
    messages::EscalationClassFields f{name, static_cast<int32_t>(c.confidences.size()), static_cast<float>(c.escalated),
                                      known(c) ? quantile(c) : known(*pooled) ? quantile(*pooled) : -1.0f};
    if (name == kPooled) out.insert(out.begin(), std::move(f));
    else out.push_back(std::move(f));
  }
  return out;
}

// magic, class count, then per class: name length, name, moving share,
// confidence count, confidences (host byte order: the store is this host's).
std::string EscalationBudget::save() {
  std::string out(kMagic);
  put(out, static_cast<uint32_t>(classes_.size()));
  for (const auto& [name, c] : classes_) {
    put(out, static_cast<uint32_t>(name.size()));
    out += name;
    put(out, c.escalated);
    put(out, static_cast<uint32_t>(c.confidences.size()));
    for (float f : c.confidences) put(out, f);
  }
  unsaved_ = 0;
  return out;
}

bool EscalationBudget::load(std::string_view in) {
  if (in.substr(0, kMagic.size()) != kMagic) return false;
  in.remove_prefix(kMagic.size());
  uint32_t count = 0;
  if (!take(in, count) || count > cfg_.max_classes + 1) return false;
  std::map<std::string, Class> loaded;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t length = 0, n = 0;
    if (!take(in, length) || length > in.size() || length > 1024) return false;
    std::string name(in.substr(0, length));
    in.remove_prefix(length);
    Class c;
    if (!take(in, c.escalated) || !(c.escalated >= 0.0 && c.escalated <= 1.0) || !take(in, n)) return false;
    if (in.size() < size_t{n} * sizeof(float)) return false;
    for (uint32_t j = 0; j < n; ++j) {
      float f = 0;
      take(in, f);
      if (!(f >= 0.0f && f <= 1.0f)) return false;
      c.confidences.push_back(f);
      // Stored by a server that kept more: the newest stay.
      if (static_cast<int32_t>(c.confidences.size()) > cfg_.history) c.confidences.pop_front();
    }
    c.last_use = ++clock_;
    loaded[std::move(name)] = std::move(c);
  }
  if (!in.empty()) return false;
  classes_ = std::move(loaded);
  unsaved_ = 0;
  return true;
}

std::string escalation_class(const std::string& named, const std::string& job_id, uint8_t priority,
                             int64_t prompt_tokens) {
  if (!named.empty()) return "class/" + named;
  if (!job_id.empty()) return "job/" + job_id;
  return "workload/" + std::to_string(AutoChooser::workload(priority, prompt_tokens));
}

}  // namespace troupe::service
