#include "engine/speculation/controller.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace troupe {

const char* draft_source_name(DraftSource s) {
  switch (s) {
    case DraftSource::ngram: return "ngram";
    case DraftSource::model: return "draft";
    default: return "none";
  }
}

void StepCostModel::observe(int64_t tokens, double ms) {
  constexpr double kDecay = 0.98;  // ~50 steps of memory
  const auto x = static_cast<double>(tokens);
  w_ = w_ * kDecay + 1;
  sx_ = sx_ * kDecay + x;
  sy_ = sy_ * kDecay + ms;
  sxx_ = sxx_ * kDecay + x * x;
  sxy_ = sxy_ * kDecay + x * ms;
}

double StepCostModel::per_token_ms() const {
  const double var = sxx_ * w_ - sx_ * sx_;
  if (w_ < 2 || var <= 1e-9 * w_ * w_) return w_ > 0 ? 0.1 * sy_ / w_ : 1.0;  // no spread in sizes yet: a guess
  return std::max(0.0, (sxy_ * w_ - sx_ * sy_) / var);
}

double StepCostModel::base_ms() const {
  if (w_ == 0) return 10.0;
  return std::max(0.0, (sy_ - per_token_ms() * sx_) / w_);
}

SpeculationController::SpeculationController(SpeculationMode mode, int32_t max_draft, bool draft_model_available)
    : mode_(mode), max_draft_(std::clamp(max_draft, 0, 8)), model_available_(draft_model_available) {}

double SpeculationController::acceptance(DraftSource s) const {
  const Estimate& e = s == DraftSource::model ? model_ : ngram_;
  return e.tried > 0 ? e.kept / e.tried : 0.0;
}

double SpeculationController::net_gain(double a, int32_t k, double loss_per_token) const {
  a = std::clamp(a, 0.0, 0.999);
  const double expected = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
  return expected - 1.0 - loss_per_token * k;
}

SpeculationController::Choice SpeculationController::choose(int32_t ngram_available, int32_t batch,
                                                            const StepCostModel& cost, double draft_ms_per_token) {
  Choice best;
  if (mode_ == SpeculationMode::off || max_draft_ == 0) return best;
  const double c = cost.per_token_ms();
  const double step = cost.base_ms() + c * std::max(1, batch);
  // Tokens of the batch's progress lost per drafted token: the step grows by
  // c (plus the draft model's time) for all `batch` sequences.
  const double loss = step > 0 ? (c + draft_ms_per_token) * std::max(1, batch) / step : 1.0;
  const double loss_ngram = step > 0 ? c * std::max(1, batch) / step : 1.0;
  // A fixed source (mode ngram or draft) always speculates when it has
  // drafts, with the k that pays best (or loses least); auto may choose none.
  const bool fixed = mode_ == SpeculationMode::ngram || mode_ == SpeculationMode::draft;
  double best_gain = fixed ? -std::numeric_limits<double>::infinity() : 0.0;
  auto consider = [&](DraftSource s, int32_t available, double a, double l) {
    for (int32_t k = 1; k <= std::min(available, max_draft_); ++k) {
      const double g = net_gain(a, k, l);
      if (g > best_gain) best_gain = g, best = {s, k};
    }
  };
  const bool use_ngram = mode_ == SpeculationMode::ngram || mode_ == SpeculationMode::automatic;
  const bool use_model = model_available_ && (mode_ == SpeculationMode::draft || mode_ == SpeculationMode::automatic);
  if (use_ngram) consider(DraftSource::ngram, ngram_available, acceptance(DraftSource::ngram), loss_ngram);
  if (use_model) consider(DraftSource::model, max_draft_, acceptance(DraftSource::model), loss);
  if (best.source == DraftSource::none && ++idle_steps_ >= kProbeEvery) {
    // Judged useless: try again now and then, cheaply, in case the text changed.
    idle_steps_ = 0;
    // The draft model is probed only if it could pay were its drafts nearly
    // always right: one that costs about a target step never can.
    if (use_ngram && ngram_available > 0) best = {DraftSource::ngram, 1};
    else if (use_model && net_gain(0.95, 1, loss) > 0) best = {DraftSource::model, 1};
  }
  if (best.source != DraftSource::none) idle_steps_ = 0;
  return best;
}

void SpeculationController::observe(DraftSource source, int32_t drafted, int32_t accepted) {
  if (source == DraftSource::none || drafted <= 0) return;
  constexpr double kDecay = 0.8;  // the last few windows dominate: text changes character
  Estimate& e = source == DraftSource::model ? model_ : ngram_;
  // Each accepted draft is a success; a rejection ends the window.
  e.kept = e.kept * kDecay + accepted;
  e.tried = e.tried * kDecay + accepted + (accepted < drafted ? 1 : 0);
  stats_.last_source = source;
  stats_.drafted += drafted;
  stats_.accepted += accepted;
  ++stats_.verify_steps;
}

}  // namespace troupe
