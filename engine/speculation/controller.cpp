#include "engine/speculation/controller.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <limits>

namespace troupe {

const char* draft_source_name(DraftSource s) {
  switch (s) {
    case DraftSource::ngram: return "ngram";
    case DraftSource::model: return "draft";
    case DraftSource::suffix: return "suffix";
    default: return "none";
  }
}

size_t StepCostModel::bucket_of(int64_t tokens) {
  if (tokens <= kExact) return static_cast<size_t>(std::max<int64_t>(1, tokens) - 1);
  size_t b = kExact;
  for (int64_t top = 2 * kExact; tokens > top && b + 1 < std::tuple_size_v<decltype(buckets_)>; top *= 2) ++b;
  return b;
}

void StepCostModel::observe(int64_t tokens, double ms) {
  if (tokens <= 0 || !(ms >= 0)) return;
  constexpr double kDecay = 0.9;  // the last ~10 steps of a size dominate its estimate
  Bucket& b = buckets_[bucket_of(tokens)];
  b.weight = b.weight * kDecay + 1;
  b.tokens = b.tokens * kDecay + static_cast<double>(tokens);
  b.ms = b.ms * kDecay + ms;
}

double StepCostModel::ms(int64_t tokens) const {
  const auto x = static_cast<double>(std::max<int64_t>(1, tokens));
  // The observed sizes, in order, as (tokens, ms) points.
  std::array<std::pair<double, double>, std::tuple_size_v<decltype(buckets_)>> pts;
  size_t n = 0;
  for (const Bucket& b : buckets_)
    if (b.weight > 0) pts[n++] = {b.tokens / b.weight, b.ms / b.weight};
  if (n == 0) return 10.0 + x;  // nothing measured yet: a guess, soon replaced
  if (n == 1) {
    const auto [t, m] = pts[0];
    if (x <= t) return m * (1 - kUnknownSlopeShare * (t - x) / t);
    return m + kUnknownSlopeShare * m / t * (x - t);
  }
  size_t hi = 1;
  while (hi + 1 < n && pts[hi].first < x) ++hi;
  const auto [x0, y0] = pts[hi - 1];
  const auto [x1, y1] = pts[hi];
  const double slope = x1 > x0 ? std::max(0.0, (y1 - y0) / (x1 - x0)) : 0.0;
  return std::max(0.0, y0 + slope * (x - x0));
}

double StepCostModel::extra_ms(int64_t tokens, int64_t more) const {
  return more <= 0 ? 0.0 : std::max(0.0, ms(tokens + more) - ms(tokens));
}

void DraftCatchUpCost::observe(double catch_up_ms, int64_t behind_tokens) {
  if (behind_tokens <= 0 || !(catch_up_ms >= 0)) return;
  const double per_token = catch_up_ms / static_cast<double>(behind_tokens);
  ms_per_token_ = ms_per_token_ > 0 ? 0.7 * ms_per_token_ + 0.3 * per_token : per_token;
}

SpeculationController::SpeculationController(SpeculationMode mode, int32_t max_draft, bool draft_model_available,
                                             const AcceptanceEstimates* prior)
    : mode_(mode), max_draft_(std::clamp(max_draft, 0, 8)), model_available_(draft_model_available) {
  if (!prior) return;
  for (size_t s = 1; s < estimates_.size(); ++s) {
    const AcceptanceEstimate& p = (*prior)[s];
    if (!(p.tried > 0) || !(p.kept >= 0) || p.kept > p.tried) continue;  // keep the default
    const double w = std::min(1.0, kPriorTries / p.tried);
    estimates_[s] = {p.kept * w, p.tried * w};
  }
}

double SpeculationController::acceptance(DraftSource s) const {
  const AcceptanceEstimate& e = estimates_[static_cast<size_t>(s)];
  return e.tried > 0 ? e.kept / e.tried : 0.0;
}

// Tokens gained by a window of k drafts at acceptance a, less `loss`, the
// batch's progress its extra time costs (in tokens).
double SpeculationController::net_gain(double a, int32_t k, double loss) {
  a = std::clamp(a, 0.0, 0.999);
  const double expected = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
  return expected - 1.0 - loss;
}

// One drafted token from the first source that may be tried: the free ones
// when they have a draft, the draft model when it would clearly pay.
SpeculationController::Choice SpeculationController::probe(DraftsAvailable available, bool suffix, bool ngram,
                                                           bool model) {
  if (suffix && available.suffix > 0) return {DraftSource::suffix, 1};
  if (ngram && available.ngram > 0) return {DraftSource::ngram, 1};
  if (model) return {DraftSource::model, 1};
  return {};
}

SpeculationController::Choice SpeculationController::choose(DraftsAvailable available, int32_t batch,
                                                            const StepCostModel& cost, double draft_ms_per_token,
                                                            int64_t step_tokens, double draft_catch_up_ms) {
  Choice best;
  if (mode_ == SpeculationMode::off || max_draft_ == 0) return best;
  const int32_t b = std::max(1, batch);
  const int64_t n = step_tokens > 0 ? step_tokens : b;
  const double step = std::max(1e-3, cost.ms(n));
  // Tokens of the batch's progress lost to k drafts: the step grows by the
  // window's extra verify time (and the draft model's time: its catch-up
  // and k rounds), and all b sequences wait for it.
  auto loss = [&](int32_t k, double draft_ms, double catch_up_ms) {
    return (cost.extra_ms(n, k) + catch_up_ms + k * draft_ms) * b / step;
  };
  // A fixed source (mode ngram or draft) always speculates when it has
  // drafts, with the k that pays best (or loses least); auto may choose none.
  const bool fixed = mode_ == SpeculationMode::ngram || mode_ == SpeculationMode::draft || mode_ == SpeculationMode::suffix;
  double best_gain = fixed ? -std::numeric_limits<double>::infinity() : 0.0;
  const double margin = fixed ? 1.0 : kPaybackMargin;
  auto consider = [&](DraftSource s, int32_t available, double a, double draft_ms, double catch_up_ms) {
    for (int32_t k = 1; k <= std::min(available, max_draft_); ++k) {
      const double g = net_gain(a, k, margin * loss(k, draft_ms, catch_up_ms));
      if (g > best_gain) best_gain = g, best = {s, k};
    }
  };
  const bool use_ngram = mode_ == SpeculationMode::ngram || mode_ == SpeculationMode::automatic;
  const bool use_suffix = mode_ == SpeculationMode::suffix || mode_ == SpeculationMode::automatic;
  const bool use_model = model_available_ && (mode_ == SpeculationMode::draft || mode_ == SpeculationMode::automatic);
  if (use_ngram) consider(DraftSource::ngram, available.ngram, acceptance(DraftSource::ngram), 0.0, 0.0);
  if (use_suffix) consider(DraftSource::suffix, available.suffix, acceptance(DraftSource::suffix), 0.0, 0.0);
  if (use_model)
    consider(DraftSource::model, max_draft_, acceptance(DraftSource::model), draft_ms_per_token, draft_catch_up_ms);
  if (best.source == DraftSource::none && ++idle_steps_ >= (probed_ ? kProbeEvery : kFirstProbe)) {
    // Judged useless: try again now and then, cheaply, in case the text
    // changed (and to measure what a window costs). The draft model is
    // probed only if it would clearly pay were its drafts nearly always
    // right: a probe also makes it read everything since its last window
    // (32 steps and more of catch-up prefill; priced by draft_catch_up_ms
    // once measured, unknown before the first window), which on a 2-core
    // CPU cost auto 5-15 % on free chat when any positive margin was enough.
    idle_steps_ = 0;
    probed_ = true;
    const bool model_worth_it =
        use_model && net_gain(0.95, 1, loss(1, draft_ms_per_token, draft_catch_up_ms)) > kModelProbeMargin;
    best = probe(available, use_suffix, use_ngram, model_worth_it);
  }
  if (best.source != DraftSource::none) idle_steps_ = 0;
  return best;
}

void SpeculationController::observe(DraftSource source, int32_t drafted, int32_t accepted) {
  if (source == DraftSource::none || drafted <= 0) return;
  constexpr double kDecay = 0.8;  // the last few windows dominate: text changes character
  AcceptanceEstimate& e = estimates_[static_cast<size_t>(source)];
  // Each accepted draft is a success; a rejection ends the window.
  e.kept = e.kept * kDecay + accepted;
  e.tried = e.tried * kDecay + accepted + (accepted < drafted ? 1 : 0);
  stats_.last_source = source;
  stats_.drafted += drafted;
  stats_.accepted += accepted;
  stats_.by_source[static_cast<size_t>(source)].drafted += drafted;
  stats_.by_source[static_cast<size_t>(source)].accepted += accepted;
  ++stats_.by_source[static_cast<size_t>(source)].windows;
  ++stats_.verify_steps;
}

}  // namespace troupe
