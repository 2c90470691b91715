#pragma once
// One sequence's answer as its client sees it: token ids become text
// (whole UTF-8 characters), stop strings are held back and end the stream,
// and the Done carries the request's usage and timings. A session turn also
// keeps the answer's text, which is stored with the turn.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/speculation/controller.h"
#include "engine/stop_strings.h"
#include "engine/tokenizer.h"
#include "service/outbound.h"

namespace troupe::service {

struct StreamTarget {
  std::string peer;
  uint64_t client_id = 0;
  int32_t sample = 0;  // index among the request's n samples
};

class ResponseStream {
 public:
  ResponseStream(const Tokenizer& tokenizer, StreamTarget target, const messages::SamplingFields& sampling, bool logprobs,
                 bool ignore_eos, bool keep_answer, int64_t accepted_ns);

  const StreamTarget& target() const { return target_; }
  int32_t completion() const { return completion_; }
  int32_t max_tokens() const { return max_tokens_; }
  int64_t accepted_ns() const { return accepted_ns_; }
  bool logprobs() const { return logprobs_; }
  int32_t top_logprobs() const { return top_; }
  void report_top(int32_t n) { top_ = logprobs_ ? n : 0; }
  bool ignore_eos() const { return ignore_eos_; }
  void scheduled(int64_t now) {
    if (!scheduled_ns_) scheduled_ns_ = now;
  }
  int64_t scheduled_ns() const { return scheduled_ns_; }
  int64_t last_token_ns() const { return last_token_ns_; }
  // Its tokens so far were held back and reach the client only now: time to
  // first token is the client's (cascade's hold, service/cascade.h).
  void released(int64_t now) {
    if (first_token_ns_) first_token_ns_ = now;
  }

  // One sampled token: its text (if any) goes out. Returns why the stream
  // ends with it, if it does: the end-of-generation token, a stop string,
  // or max_tokens.
  // `top_ids`/`top_logprobs`: the position's most likely tokens (top_logprobs() of them).
  std::optional<wire::FinishReason> push(int32_t token, float logprob, int64_t now, Outbound& out,
                                         std::span<const int32_t> top_ids = {}, std::span<const float> top_logprobs = {});
  // The stream's held-back text, sent unless it ends by a stop string or a cancel.
  void flush(wire::FinishReason reason, Outbound& out);
  // Usage and timings for its Done; `prompt` and `cached` come from the planner.
  messages::DoneFields done(wire::FinishReason reason, int32_t prompt, int32_t cached, const SpeculationStats* spec,
                            int64_t now) const;
  void send(const messages::Bytes& bytes, Outbound& out) const {
    out.replies.push_back({target_.peer, target_.client_id, bytes});
  }
  std::string take_answer() { return std::move(answer_); }
  // Keep the answer's text and token ids (for the response cache tier).
  void record() { keep_answer_ = record_tokens_ = true; }
  std::vector<int32_t> take_tokens() { return std::move(tokens_); }
  // Cascade tiers: tokens from here on are written by `tier` (Done.tiers).
  // (The same tier again, after a failover to another of its workers, continues its segment.)
  void begin_segment(const std::string& tier) {
    if (segments_.empty() || segments_.back().first != tier) segments_.emplace_back(tier, 0);
  }
  const std::vector<std::pair<std::string, int32_t>>& segments() const { return segments_; }
  // A turn with tools: its answer is kept and read for calls, which its
  // Done carries (finish_reason tool_calls when it ended by itself).
  void read_tool_calls(ChatFormat format, uint64_t seed) {
    tool_format_ = format;
    tool_seed_ = seed;
    keep_answer_ = true;
  }
  // The same for another sample of the request (n > 1).
  void read_tool_calls_as(const ResponseStream& other) {
    if (other.tool_format_) read_tool_calls(*other.tool_format_, other.tool_seed_);
  }

 private:
  const Tokenizer* tokenizer_;
  StreamTarget target_;
  StreamDecoder decoder_;
  StopStrings stops_;
  int32_t max_tokens_;
  bool logprobs_, ignore_eos_, keep_answer_, record_tokens_ = false;
  std::string answer_;
  std::vector<int32_t> tokens_;
  std::vector<std::pair<std::string, int32_t>> segments_;  // (tier, tokens)
  std::optional<ChatFormat> tool_format_;
  int32_t top_ = 0;
  uint64_t tool_seed_ = 0;
  int32_t completion_ = 0;
  int64_t accepted_ns_, scheduled_ns_ = 0, first_token_ns_ = 0, last_token_ns_ = 0;
};

}  // namespace troupe::service
