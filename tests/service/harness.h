#pragma once
// What the service's unit tests share: a real tokenizer (the synthetic BPE
// vocabulary), a fake engine that answers step plans as a verifier would,
// and readers for the frames the service sends clients.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/synthetic_vocabulary.h"
#include "engine/tokenizer.h"
#include "messages/client_validation.h"
#include "messages/step_frames.h"
#include "service/outbound.h"

namespace troupe::test {

inline messages::SamplingFields greedy_sampling(int32_t max_tokens) {
  messages::SamplingFields s;
  s.temperature = 0;
  s.max_tokens = max_tokens;
  return s;
}

inline std::shared_ptr<const Tokenizer> synthetic_tokenizer() {
  static const auto tok = [] {
    return std::make_shared<const Tokenizer>(synthetic_vocabulary(train_synthetic_vocabulary(256, 0)));
  }();
  return tok;
}

// A frame the service sent, read back as a client would.
struct Frame {
  std::string peer;
  uint64_t id = 0;
  wire::ResponseBody kind = wire::ResponseBody::NONE;
  std::string text;                 // Tokens
  std::vector<int32_t> tokens;      // Tokens
  int32_t sample = 0;               // Tokens, Done
  wire::FinishReason reason{};      // Done
  int32_t completion_tokens = 0;    // Done
  int32_t cached_prompt_tokens = 0;  // Done
  wire::ErrorCode code{};           // Error
  std::string message;              // Error
};

inline Frame read_frame(const service::Reply& r) {
  Frame f;
  f.peer = r.peer;
  f.id = r.client_id;
  const auto* res = messages::check_response(r.bytes);
  REQUIRE(res);
  f.kind = res->body_type();
  if (const auto* t = res->body_as_Tokens()) {
    if (t->text()) f.text = t->text()->str();
    if (t->token_ids()) f.tokens.assign(t->token_ids()->begin(), t->token_ids()->end());
    f.sample = t->sample();
  }
  if (const auto* d = res->body_as_Done()) {
    f.reason = d->finish_reason();
    f.sample = d->sample();
    if (d->usage()) {
      f.completion_tokens = d->usage()->completion_tokens();
      f.cached_prompt_tokens = d->usage()->cached_prompt_tokens();
    }
  }
  if (const auto* e = res->body_as_Error()) {
    f.code = e->code();
    if (e->message()) f.message = e->message()->str();
  }
  return f;
}

inline std::vector<Frame> frames(const service::Outbound& out) {
  std::vector<Frame> all;
  for (const auto& r : out.replies) all.push_back(read_frame(r));
  return all;
}

// The tokens a fake verifier samples: any function of (sequence, position of
// the token to sample). `accept(seq, drafts)`: how many of a window's drafts
// it keeps (all, by default, when they equal what it would sample).
struct FakeEngine {
  std::function<int32_t(uint64_t seq, int32_t position)> token = [](uint64_t seq, int32_t pos) {
    return static_cast<int32_t>(40 + (seq * 7 + static_cast<uint64_t>(pos) * 3) % 50);
  };
  // The log-probability reported with each sampled token; empty: 0 (certain).
  std::function<float(uint64_t seq, int32_t position)> logprob;
  messages::WorkerInfo worker;  // what every result says of the worker (its instance id, ...)

  // The StepResult a verifier would send for `plan` (StepPlan bytes).
  std::string answer(const std::string& plan, double forward_ms = 10) const {
    const auto* p = messages::check_step_plan(plan);
    REQUIRE(p);
    std::vector<messages::SampledToken> sampled;
    if (p->slices())
      for (const auto* s : *p->slices()) {
        if (!s->wants_token()) continue;
        const int32_t n = static_cast<int32_t>(s->tokens()->size()), drafts = s->drafts();
        messages::SampledToken t;
        t.sequence_id = s->sequence_id();
        int32_t pos = s->start() + n - drafts;  // position of the first token to sample
        for (int32_t i = 0; i < drafts; ++i, ++pos) {
          const int32_t want = token(s->sequence_id(), pos);
          if (s->tokens()->Get(static_cast<uint32_t>(n - drafts + i)) != want) break;
          t.accepted.push_back(want);
        }
        t.token = token(s->sequence_id(), pos);
        if (logprob) t.logprob = logprob(s->sequence_id(), pos);
        sampled.push_back(std::move(t));
      }
    // Page contents as a worker would export them: a recognisable fill.
    std::vector<messages::PageBytes> exported, swapped;
    if (p->exports())
      for (int32_t page : *p->exports()) exported.push_back({page, page_bytes(page, 'e')});
    if (p->swap_outs())
      for (int32_t page : *p->swap_outs()) swapped.push_back({page, page_bytes(page, 's')});
    return messages::step_result(p->step(), sampled, "", forward_ms, worker, exported, swapped);
  }

  int64_t page_size_bytes = 64;
  std::string page_bytes(int32_t page, char kind) const {
    std::string b(static_cast<size_t>(page_size_bytes), kind);
    b[0] = static_cast<char>(page);
    return b;
  }
};

}  // namespace troupe::test
