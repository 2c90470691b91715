#include "messages/client_frames.h"

namespace troupe::messages {

Bytes finish_bytes(flatbuffers::FlatBufferBuilder& fbb) {
  return Bytes(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

flatbuffers::Offset<wire::Sampling> build_sampling(flatbuffers::FlatBufferBuilder& fbb, const SamplingFields& s) {
  std::vector<flatbuffers::Offset<flatbuffers::String>> stops;
  for (const auto& str : s.stop) stops.push_back(fbb.CreateString(str));
  std::vector<wire::TokenBias> bias;
  for (const auto& [token, b] : s.logit_bias) bias.emplace_back(token, b);
  flatbuffers::Offset<wire::Constraint> constraint;
  if (s.constraint.kind != 0) {
    std::vector<flatbuffers::Offset<flatbuffers::String>> choices;
    for (const auto& c : s.constraint.choices) choices.push_back(fbb.CreateString(c));
    constraint = wire::CreateConstraint(fbb, static_cast<wire::ConstraintKind>(s.constraint.kind),
                                        s.constraint.text.empty() ? 0 : fbb.CreateString(s.constraint.text),
                                        choices.empty() ? 0 : fbb.CreateVector(choices));
  }
  return wire::CreateSampling(fbb, s.temperature, s.top_k, s.top_p, s.min_p, s.repetition_penalty, s.presence_penalty,
                              s.frequency_penalty, s.penalty_last_n, s.seed, s.max_tokens,
                              stops.empty() ? 0 : fbb.CreateVector(stops.data(), stops.size()),
                              bias.empty() ? 0 : fbb.CreateVectorOfStructs(bias.data(), bias.size()), s.accept_ratio,
                              s.tier.empty() ? 0 : fbb.CreateString(s.tier), s.escalate_threshold, constraint,
                              s.kv_budget, s.escalate_class.empty() ? 0 : fbb.CreateString(s.escalate_class));
}

Bytes request_bytes(uint64_t id, wire::RequestBody type, flatbuffers::Offset<void> body, flatbuffers::FlatBufferBuilder& fbb) {
  fbb.Finish(wire::CreateRequest(fbb, id, type, body));
  return finish_bytes(fbb);
}

Bytes response_bytes(uint64_t id, wire::ResponseBody type, flatbuffers::Offset<void> body,
                     flatbuffers::FlatBufferBuilder& fbb) {
  fbb.Finish(wire::CreateResponse(fbb, id, type, body));
  return finish_bytes(fbb);
}

namespace {
constexpr auto request = request_bytes;
constexpr auto response = response_bytes;
}  // namespace

SamplingFields read_sampling(const wire::Sampling* s) {
  SamplingFields f;
  if (!s) return f;
  f.temperature = s->temperature();
  f.top_k = s->top_k();
  f.top_p = s->top_p();
  f.min_p = s->min_p();
  f.repetition_penalty = s->repeat_penalty();
  f.presence_penalty = s->presence_penalty();
  f.frequency_penalty = s->frequency_penalty();
  f.penalty_last_n = s->penalty_last_n();
  f.seed = s->seed();
  f.max_tokens = s->max_tokens();
  if (const auto* stop = s->stop())
    for (const auto* str : *stop) f.stop.emplace_back(str->str());
  if (const auto* bias = s->logit_bias())
    for (const auto* b : *bias) f.logit_bias.emplace_back(b->token(), b->bias());
  f.accept_ratio = s->accept_ratio();
  if (s->tier()) f.tier = s->tier()->str();
  f.escalate_threshold = s->escalate_threshold();
  if (s->escalate_class()) f.escalate_class = s->escalate_class()->str();
  f.kv_budget = s->kv_budget();
  if (const auto* c = s->constraint()) {
    f.constraint.kind = static_cast<uint8_t>(c->kind());
    if (c->text()) f.constraint.text = c->text()->str();
    if (c->choices())
      for (const auto* choice : *c->choices()) f.constraint.choices.emplace_back(choice->str());
  }
  return f;
}

Bytes generate_request(uint64_t id, std::string_view prompt, const SamplingFields& s, wire::Priority priority,
                       bool special, bool logprobs, bool ignore_eos, int32_t n, wire::Speculation speculation,
                       int32_t max_draft, std::string_view draft_model, wire::ContextPolicy policy, bool response_cache,
                       int32_t top_logprobs) {
  flatbuffers::FlatBufferBuilder fbb(256 + prompt.size());
  const auto text = fbb.CreateString(prompt.data(), prompt.size());
  const auto sampling = build_sampling(fbb, s);
  const auto draft = draft_model.empty() ? 0 : fbb.CreateString(draft_model.data(), draft_model.size());
  const auto body = wire::CreateGenerate(fbb, text, sampling, priority, special, logprobs, ignore_eos, n, speculation,
                                         max_draft, draft, policy, response_cache, top_logprobs);
  return request(id, wire::RequestBody::Generate, body.Union(), fbb);
}

namespace {

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::ToolCall>>> build_tool_calls(
    flatbuffers::FlatBufferBuilder& fbb, const std::vector<ToolCallFields>& calls) {
  if (calls.empty()) return 0;
  std::vector<flatbuffers::Offset<wire::ToolCall>> out;
  for (const ToolCallFields& c : calls)
    out.push_back(wire::CreateToolCall(fbb, fbb.CreateString(c.id), fbb.CreateString(c.name), fbb.CreateString(c.arguments)));
  return fbb.CreateVector(out);
}

}  // namespace

Bytes chat_request(uint64_t id, const ChatTurnFields& t) {
  flatbuffers::FlatBufferBuilder fbb(1024);
  std::vector<flatbuffers::Offset<wire::ChatMessage>> msgs;
  for (const ChatMessageFields& m : t.messages) {
    const auto calls = build_tool_calls(fbb, m.tool_calls);
    const auto call_id = m.tool_call_id.empty() ? 0 : fbb.CreateString(m.tool_call_id);
    msgs.push_back(wire::CreateChatMessage(fbb, fbb.CreateString(m.role), fbb.CreateString(m.content), calls, call_id,
                                           m.pinned));
  }
  const auto sid = fbb.CreateString(t.session_id);
  const auto list = fbb.CreateVector(msgs.data(), msgs.size());
  const auto sampling = build_sampling(fbb, t.sampling);
  const auto draft = t.draft_model.empty() ? 0 : fbb.CreateString(t.draft_model);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> tools;
  if (!t.tools.tools.empty()) tools = fbb.CreateVectorOfStrings(t.tools.tools);
  const auto tool_name = t.tools.name.empty() ? 0 : fbb.CreateString(t.tools.name);
  const auto body = wire::CreateChatTurn(fbb, sid, list, sampling, t.priority, t.logprobs, t.n, t.speculation, t.max_draft,
                                         draft, t.policy, t.response_cache, tools, t.tools.choice, tool_name,
                                         t.tools.parallel, t.top_logprobs, t.expected_turns);
  return request(id, wire::RequestBody::ChatTurn, body.Union(), fbb);
}

Bytes chat_request(uint64_t id, std::string_view session_id, std::span<const std::pair<std::string, std::string>> messages,
                   const SamplingFields& s, wire::Priority priority, bool logprobs, wire::Speculation speculation,
                   int32_t max_draft, std::string_view draft_model, wire::ContextPolicy policy, int32_t n,
                   bool response_cache) {
  ChatTurnFields t;
  t.session_id = session_id;
  for (const auto& [role, content] : messages) t.messages.push_back({role, content});
  t.sampling = s;
  t.priority = priority;
  t.logprobs = logprobs;
  t.speculation = speculation;
  t.max_draft = max_draft;
  t.draft_model = draft_model;
  t.policy = policy;
  t.n = n;
  t.response_cache = response_cache;
  return chat_request(id, t);
}

Bytes cancel_request(uint64_t id, uint64_t target) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return request(id, wire::RequestBody::Cancel, wire::CreateCancel(fbb, target).Union(), fbb);
}

Bytes stats_request(uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return request(id, wire::RequestBody::Stats, wire::CreateStats(fbb).Union(), fbb);
}

Bytes ping_request(uint64_t id, uint64_t nonce) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return request(id, wire::RequestBody::Ping, wire::CreatePing(fbb, nonce).Union(), fbb);
}

Bytes accepted_response(uint64_t id, int32_t prompt_tokens, int32_t queue_position, uint64_t tool_call_seed) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return response(id, wire::ResponseBody::Accepted,
                  wire::CreateAccepted(fbb, prompt_tokens, queue_position, tool_call_seed).Union(), fbb);
}

Bytes tokens_response(uint64_t id, std::string_view text, std::span<const int32_t> token_ids,
                      std::span<const float> logprobs, int32_t sample, std::span<const int32_t> top_ids,
                      std::span<const float> top_logprobs) {
  flatbuffers::FlatBufferBuilder fbb(128 + text.size() + 8 * token_ids.size() + 8 * top_ids.size());
  const auto t = fbb.CreateString(text.data(), text.size());
  const auto ids = fbb.CreateVector(token_ids.data(), token_ids.size());
  const auto lp = logprobs.empty() ? flatbuffers::Offset<flatbuffers::Vector<float>>()
                                   : fbb.CreateVector(logprobs.data(), logprobs.size());
  const auto tids = top_ids.empty() ? flatbuffers::Offset<flatbuffers::Vector<int32_t>>()
                                    : fbb.CreateVector(top_ids.data(), top_ids.size());
  const auto tlps = top_logprobs.empty() ? flatbuffers::Offset<flatbuffers::Vector<float>>()
                                         : fbb.CreateVector(top_logprobs.data(), top_logprobs.size());
  return response(id, wire::ResponseBody::Tokens, wire::CreateTokens(fbb, t, ids, lp, sample, tids, tlps).Union(), fbb);
}

Bytes done_response(uint64_t id, const DoneFields& d) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto usage = wire::CreateUsage(fbb, d.prompt_tokens, d.cached_prompt_tokens, d.completion_tokens);
  const auto timings = wire::CreateTimings(fbb, d.queue_ms, d.ttft_ms, d.per_token_ms, d.total_ms);
  flatbuffers::Offset<wire::SpeculationStats> spec;
  if (d.speculated)
    spec = wire::CreateSpeculationStats(fbb, fbb.CreateString(d.spec_source), d.spec_drafted, d.spec_accepted, d.spec_windows,
                                        d.spec_windows ? static_cast<float>(d.spec_accepted) / d.spec_windows : 0.0f);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::TierSegment>>> tiers;
  if (!d.tiers.empty()) {
    std::vector<flatbuffers::Offset<wire::TierSegment>> segments;
    for (const auto& [tier, tokens] : d.tiers) segments.push_back(wire::CreateTierSegment(fbb, fbb.CreateString(tier), tokens));
    tiers = fbb.CreateVector(segments);
  }
  const auto calls = build_tool_calls(fbb, d.tool_calls);
  return response(id, wire::ResponseBody::Done,
                  wire::CreateDone(fbb, d.reason, usage, timings, d.sample, spec, d.response_cache, tiers, calls).Union(),
                  fbb);
}

Bytes error_response(uint64_t id, wire::ErrorCode code, std::string_view message) {
  flatbuffers::FlatBufferBuilder fbb(128 + message.size());
  const auto m = fbb.CreateString(message.data(), message.size());
  return response(id, wire::ResponseBody::Error, wire::CreateError(fbb, code, m).Union(), fbb);
}

Bytes pong_response(uint64_t id, uint64_t nonce) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return response(id, wire::ResponseBody::Pong, wire::CreatePong(fbb, nonce).Union(), fbb);
}

Bytes stats_response(uint64_t id, const StatsFields& s) {
  flatbuffers::FlatBufferBuilder fbb(256);
  const auto model = fbb.CreateString(s.model);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::TierStats>>> tiers;
  if (!s.tiers.empty()) {
    std::vector<flatbuffers::Offset<wire::TierStats>> each;
    for (const TierStatsFields& t : s.tiers)
      each.push_back(wire::CreateTierStats(fbb, fbb.CreateString(t.name), t.requests, t.escalated_in, t.escalations, t.tokens,
                                           t.forward_tokens, t.steps, t.drafted, t.accepted, t.running, t.waiting,
                                           t.pages_used, t.pages_total, t.check_failures));
    tiers = fbb.CreateVector(each);
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::WorkerStats>>> workers;
  if (!s.workers.empty()) {
    std::vector<flatbuffers::Offset<wire::WorkerStats>> each;
    for (const WorkerStatsFields& w : s.workers)
      each.push_back(wire::CreateWorkerStats(fbb, fbb.CreateString(w.endpoint), fbb.CreateString(w.tier), w.up, w.requests,
                                             w.moved_in, w.moved_out, w.lost, w.tokens, w.forward_tokens, w.steps, w.running,
                                             w.waiting, w.pages_used, w.pages_total, w.step_ms));
    workers = fbb.CreateVector(each);
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::SpeculationSourceStats>>> speculation;
  if (!s.speculation.empty()) {
    std::vector<flatbuffers::Offset<wire::SpeculationSourceStats>> each;
    for (const SpeculationSourceFields& x : s.speculation)
      each.push_back(wire::CreateSpeculationSourceStats(fbb, fbb.CreateString(x.source), x.drafted, x.accepted, x.windows));
    speculation = fbb.CreateVector(each);
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::EscalationClassStats>>> classes;
  if (!s.escalation_classes.empty()) {
    std::vector<flatbuffers::Offset<wire::EscalationClassStats>> each;
    for (const EscalationClassFields& c : s.escalation_classes)
      each.push_back(wire::CreateEscalationClassStats(fbb, fbb.CreateString(c.name), c.judged, c.share, c.threshold));
    classes = fbb.CreateVector(each);
  }
  const auto body = wire::CreateStatsReply(fbb, s.running, s.waiting, s.pages_total, s.pages_used, s.pages_cached,
                                           s.pages_free, s.live_token_fraction, s.steps, s.tokens_generated, model,
                                           s.engine_ms, s.busy_ms, s.pages_spilled, s.pages_restored,
                                           s.pages_swapped_out, s.pages_swapped_in, s.tokens_shifted, s.preemptions,
                                           s.draining, tiers, workers,
                                           s.expert_tokens.empty() ? 0
                                                                   : fbb.CreateVector(s.expert_tokens.data(), s.expert_tokens.size()),
                                           s.local_pages_total, s.local_pages_used,
                                           s.store_degraded.empty() ? 0 : fbb.CreateString(s.store_degraded),
                                           speculation, s.suffix_tree_bytes, s.suffix_trees, s.suffix_tree_tokens,
                                           s.kv_evictions, s.kv_positions_evicted, classes);
  return response(id, wire::ResponseBody::StatsReply, body.Union(), fbb);
}

StatsFields read_stats(const wire::StatsReply& s) {
  StatsFields f;
  f.running = s.running(), f.waiting = s.waiting();
  f.pages_total = s.pages_total(), f.pages_used = s.pages_used(), f.pages_cached = s.pages_cached();
  f.pages_free = s.pages_free();
  f.live_token_fraction = s.live_token_fraction();
  f.steps = s.steps(), f.tokens_generated = s.tokens_generated();
  if (s.model()) f.model = s.model()->str();
  f.engine_ms = s.engine_ms(), f.busy_ms = s.busy_ms();
  f.pages_spilled = s.pages_spilled(), f.pages_restored = s.pages_restored();
  f.pages_swapped_out = s.pages_swapped_out(), f.pages_swapped_in = s.pages_swapped_in();
  f.tokens_shifted = s.tokens_shifted(), f.preemptions = s.preemptions();
  f.kv_evictions = s.kv_evictions(), f.kv_positions_evicted = s.kv_positions_evicted();
  f.draining = s.draining();
  if (s.tiers())
    for (const auto* t : *s.tiers())
      f.tiers.push_back({t->name() ? t->name()->str() : "", t->requests(), t->escalated_in(), t->escalations(), t->tokens(),
                         t->forward_tokens(), t->steps(), t->drafted(), t->accepted(), t->running(), t->waiting(),
                         t->pages_used(), t->pages_total(), t->check_failures()});
  if (s.workers())
    for (const auto* w : *s.workers())
      f.workers.push_back({w->endpoint() ? w->endpoint()->str() : "", w->tier() ? w->tier()->str() : "", w->up(),
                           w->requests(), w->moved_in(), w->moved_out(), w->lost(), w->tokens(), w->forward_tokens(),
                           w->steps(), w->running(), w->waiting(), w->pages_used(), w->pages_total(), w->step_ms()});
  if (s.expert_tokens()) f.expert_tokens.assign(s.expert_tokens()->begin(), s.expert_tokens()->end());
  f.local_pages_total = s.local_pages_total(), f.local_pages_used = s.local_pages_used();
  if (s.store_degraded()) f.store_degraded = s.store_degraded()->str();
  if (s.speculation())
    for (const auto* x : *s.speculation())
      f.speculation.push_back({x->source() ? x->source()->str() : "", x->drafted(), x->accepted(), x->windows()});
  f.suffix_tree_bytes = s.suffix_tree_bytes(), f.suffix_trees = s.suffix_trees();
  f.suffix_tree_tokens = s.suffix_tree_tokens();
  if (s.escalation_classes())
    for (const auto* c : *s.escalation_classes())
      f.escalation_classes.push_back({c->name() ? c->name()->str() : "", c->judged(), c->share(), c->threshold()});
  return f;
}

}  // namespace troupe::messages
