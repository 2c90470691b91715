#pragma once
// A sequence's sampling as the step and draft messages carry it, for the
// engine's Sampler (the verifier and the draft model read it alike).
#include "engine/sampler.h"
#include "messages/step_generated.h"

namespace troupe::worker {

inline SamplingParams sampling_params(const wire::step::SequenceSampling* s) {
  SamplingParams p;
  if (!s) return p;
  p.temperature = s->temperature();
  p.top_k = s->top_k();
  p.top_p = s->top_p();
  p.min_p = s->min_p();
  p.repetition_penalty = s->repeat_penalty();
  p.presence_penalty = s->presence_penalty();
  p.frequency_penalty = s->frequency_penalty();
  p.penalty_last_n = s->penalty_last_n();
  p.seed = s->seed();
  if (const auto* bias = s->logit_bias())
    for (const auto* b : *bias) p.logit_bias.emplace_back(b->token(), b->bias());
  p.accept_ratio = s->accept_ratio();
  return p;
}

}  // namespace troupe::worker
