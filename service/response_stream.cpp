#include "service/response_stream.h"

#include <span>

#include "service/tool_gate.h"

namespace troupe::service {
namespace {

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

ResponseStream::ResponseStream(const Tokenizer& tokenizer, StreamTarget target, const messages::SamplingFields& sampling,
                               bool logprobs, bool ignore_eos, bool keep_answer, int64_t accepted_ns)
    : tokenizer_(&tokenizer),
      target_(std::move(target)),
      decoder_(tokenizer),
      stops_(sampling.stop),
      max_tokens_(sampling.max_tokens),
      logprobs_(logprobs),
      ignore_eos_(ignore_eos),
      keep_answer_(keep_answer),
      accepted_ns_(accepted_ns) {}

std::optional<wire::FinishReason> ResponseStream::push(int32_t token, float logprob, int64_t now, Outbound& out,
                                                       std::span<const int32_t> top_ids, std::span<const float> top_logprobs) {
  if (!first_token_ns_) first_token_ns_ = now;
  last_token_ns_ = now;
  if (!ignore_eos_ && tokenizer_->is_end_of_generation(token)) return wire::FinishReason::stop;
  ++completion_;
  if (!segments_.empty()) ++segments_.back().second;
  if (record_tokens_) tokens_.push_back(token);
  const std::string text = stops_.push(decoder_.push(token));
  if (keep_answer_) answer_ += text;
  const float lp[] = {logprob};
  send(messages::tokens_response(target_.client_id, text, std::span<const int32_t>(&token, 1),
                                 logprobs_ ? std::span<const float>(lp) : std::span<const float>(), target_.sample,
                                 top_ ? top_ids : std::span<const int32_t>(), top_ ? top_logprobs : std::span<const float>()),
       out);
  if (stops_.stopped()) return wire::FinishReason::stop_string;
  if (completion_ >= max_tokens_) return wire::FinishReason::length;
  return std::nullopt;
}

void ResponseStream::flush(wire::FinishReason reason, Outbound& out) {
  if (reason == wire::FinishReason::stop_string || reason == wire::FinishReason::cancelled) return;
  const std::string rest = stops_.push(decoder_.finish()) + stops_.finish();
  if (rest.empty()) return;
  send(messages::tokens_response(target_.client_id, rest, {}, {}, target_.sample), out);
  if (keep_answer_) answer_ += rest;
}

messages::DoneFields ResponseStream::done(wire::FinishReason reason, int32_t prompt, int32_t cached,
                                          const SpeculationStats* spec, int64_t now) const {
  messages::DoneFields d;
  d.reason = reason;
  d.sample = target_.sample;
  d.prompt_tokens = prompt;
  d.cached_prompt_tokens = cached;
  d.completion_tokens = completion_;
  d.queue_ms = scheduled_ns_ ? ms(scheduled_ns_ - accepted_ns_) : ms(now - accepted_ns_);
  d.ttft_ms = first_token_ns_ ? ms(first_token_ns_ - accepted_ns_) : 0;
  d.per_token_ms = completion_ > 1 ? ms(last_token_ns_ - first_token_ns_) / (completion_ - 1) : 0;
  d.total_ms = ms(now - accepted_ns_);
  d.tiers = segments_;
  if (tool_format_) {
    d.tool_calls = answer_calls(*tool_format_, answer_, tool_seed_);
    if (!d.tool_calls.empty() && reason == wire::FinishReason::stop) d.reason = wire::FinishReason::tool_calls;
  }
  if (spec && spec->verify_steps > 0) {
    d.speculated = true;
    d.spec_source = draft_source_name(spec->last_source);
    d.spec_drafted = static_cast<int32_t>(spec->drafted);
    d.spec_accepted = static_cast<int32_t>(spec->accepted);
    d.spec_windows = static_cast<int32_t>(spec->verify_steps);
  }
  return d;
}

}  // namespace troupe::service
