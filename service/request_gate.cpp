#include "service/request_gate.h"

#include "engine/grammar/text_check.h"

#include <algorithm>
#include <exception>

#include "engine/grammar/constraint.h"
#include "service/constraint_gate.h"
#include "service/response_tier.h"
#include "service/route_request.h"
#include "service/suffix_history.h"
#include "service/tool_gate.h"

namespace troupe::service {
namespace {

Priority priority_of(wire::Priority p) {
  switch (p) {
    case wire::Priority::chat: return Priority::chat;
    case wire::Priority::batch: return Priority::batch;
    default: return Priority::interactive;
  }
}

wire::Priority policy_priority(Priority p) {
  switch (p) {
    case Priority::chat: return wire::Priority::chat;
    case Priority::batch: return wire::Priority::batch;
    default: return wire::Priority::interactive;
  }
}

messages::Rejection rejection(uint64_t id, wire::ErrorCode code, std::string message) {
  messages::Rejection r;
  r.code = code;
  r.message = std::move(message);
  r.client_request_id = id;
  return r;
}

Query query(Query::Kind kind, const std::string& peer, uint64_t id, uint64_t number = 0, std::string name = {},
            JobQuery job = JobQuery::status) {
  return Query{kind, peer, id, number, std::move(name), job, {}, {}, {}};
}

JobSubmission submission(const wire::SubmitJob& j, const std::string& peer, uint64_t id) {
  JobSubmission sub;
  sub.peer = peer;
  sub.client_id = id;
  for (const auto* item : *j.items()) sub.items.push_back(item->str());
  if (j.requests())
    for (const auto* r : *j.requests()) sub.requests.emplace_back(reinterpret_cast<const char*>(r->data()->data()), r->data()->size());
  if (j.annotation()) sub.annotation = j.annotation()->str();
  if (j.template_()) sub.item_template = j.template_()->str();
  sub.sampling = messages::read_sampling(j.sampling());
  sub.priority = j.priority();
  sub.check = messages::read_job_check(j.check());
  return sub;
}

}  // namespace

RequestGate::RequestGate(GateConfig config)
    : cfg_(std::move(config)), grammars_(std::make_shared<grammar::GrammarCache>()) {}
RequestGate::~RequestGate() = default;

// The request's speculation against the server's default; why it cannot
// have it, if it cannot. Sampled requests with logprobs or n > 1 do not
// speculate: their per-token outputs are not defined for accepted drafts,
// and their forks share pages.
std::optional<std::string> RequestGate::resolve_speculation(AdmitRequest& a, wire::Speculation s, int32_t max_draft,
                                                            const flatbuffers::String* draft_model) const {
  switch (s) {
    case wire::Speculation::off: a.speculation = SpeculationMode::off; break;
    case wire::Speculation::ngram: a.speculation = SpeculationMode::ngram; break;
    case wire::Speculation::draft: a.speculation = SpeculationMode::draft; break;
    case wire::Speculation::auto_: a.speculation = SpeculationMode::automatic; break;
    case wire::Speculation::suffix: a.speculation = SpeculationMode::suffix; break;
    default: a.speculation = cfg_.speculation.of(a.sampling.temperature);
  }
  a.max_draft = max_draft > 0 ? max_draft : cfg_.max_draft;
  // (Logprobs come from the verify pass: the target model's, speculating or not.)
  if (a.samples > 1) a.speculation = SpeculationMode::off;
  if (a.speculation == SpeculationMode::draft && !cfg_.draft_model)
    return "speculation: this server has no draft model (serve --draft-model NAME); use ngram or auto";
  if (!draft_model || draft_model->size() == 0) return std::nullopt;
  const std::string name = draft_model->str();
  if (std::find(cfg_.draft_names.begin(), cfg_.draft_names.end(), name) != cfg_.draft_names.end()) return std::nullopt;
  if (cfg_.draft_names.empty()) return "draft_model: this server has no draft model";
  return "draft_model: this server drafts with " + cfg_.draft_names.front() + ", not " + name;
}

// Tokens past the vocabulary would index past the logits.
std::optional<std::string> RequestGate::bias_problem(const messages::SamplingFields& s) const {
  const size_t vocab = cfg_.tokenizer->size();
  for (const auto& [token, bias] : s.logit_bias)
    if (static_cast<size_t>(token) >= vocab)
      return "sampling.logit_bias: token " + std::to_string(token) + " is not in the vocabulary (" +
             std::to_string(vocab) + " tokens)";
  return std::nullopt;
}

std::optional<messages::Rejection> RequestGate::read_generate(const wire::Generate& g, AdmitRequest& a) const {
  a.sampling = messages::read_sampling(g.sampling());
  if (auto why = bias_problem(a.sampling)) return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  a.priority = priority_of(g.priority());
  a.logprobs = g.logprobs();
  a.top_logprobs = g.top_logprobs();
  a.ignore_eos = g.ignore_eos();
  if (auto why = lower_constraint(a.sampling, a.ignore_eos, *grammars_))
    return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  a.samples = g.n();
  if (auto why = resolve_speculation(a, g.speculation(), g.max_draft(), g.draft_model()))
    return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  if (auto why = route_request(cfg_.tiers.get(), a)) return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  a.prompt = cfg_.tokenizer->encode(g.prompt()->string_view(), cfg_.tokenizer->add_bos_by_default(), g.special());
  a.policy = resolve_policy(g.context_policy(), false);
  const int64_t budget = prompt_budget(a);
  if (a.policy == ContextPolicy::window && static_cast<int64_t>(a.prompt.size()) > budget && budget > 2 * kSinkTokens) {
    // The first tokens (attention sinks) and the most recent ones stay.
    const auto tail = static_cast<size_t>(budget - kSinkTokens);
    a.prompt.erase(a.prompt.begin() + kSinkTokens, a.prompt.end() - static_cast<int64_t>(tail));
  }
  return std::nullopt;
}

std::optional<messages::Rejection> RequestGate::read_chat(const wire::ChatTurn& t, AdmitRequest& a,
                                                          std::vector<ChatMessage>& chat) const {
  const bool session = t.session_id() && t.session_id()->size() > 0;
  std::vector<std::string> call_ids, results;
  if (auto why = read_messages(t, cfg_.chat_format, chat, call_ids, results))
    return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  for (uint32_t i = 0; i < t.messages()->size(); ++i)
    if (t.messages()->Get(i)->pinned()) a.pinned_messages.push_back(static_cast<int32_t>(i));
  a.sampling = messages::read_sampling(t.sampling());
  if (auto why = bias_problem(a.sampling)) return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  if (auto why = lower_constraint(a.sampling, false, *grammars_))
    return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  ChatTools tools;
  if (auto why = read_tools(t, tools)) return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  if (auto why = lower_tools(tools, cfg_.chat_format, a.sampling, *grammars_))
    return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  if (tools.active()) {
    a.tool_format = cfg_.chat_format;
    a.tool_seed = conversation_seed(chat);  // a session's: once its history is read
  }
  // tool_choice none: the model is not told of the tools at all.
  if (tools.choice != ToolChoice::none) a.tools = std::move(tools.specs);
  const std::vector<std::string> made = stored_call_ids(cfg_.chat_format, chat);
  call_ids.insert(call_ids.end(), made.begin(), made.end());
  if (session) {
    // The calls they answer may be the session's: checked with its history.
    a.tool_results = std::move(results);
    a.turn_call_ids = std::move(call_ids);
  } else if (auto r = unanswered(results, call_ids)) {
    return rejection(a.client_id, wire::ErrorCode::invalid_field,
                     "messages: a tool result answers call '" + r->substr(0, 64) + "', which no assistant message made");
  }
  a.priority = priority_of(t.priority());
  a.logprobs = t.logprobs();
  a.top_logprobs = t.top_logprobs();
  a.samples = t.n();
  a.policy = resolve_policy(t.context_policy(), t.session_id() && t.session_id()->size() > 0);
  if (t.response_cache() && t.session_id() && t.session_id()->size() > 0)
    return rejection(a.client_id, wire::ErrorCode::invalid_field,
                     "response_cache: a session turn is never answered from the cache (its history is the session's)");
  if (auto why = resolve_speculation(a, t.speculation(), t.max_draft(), t.draft_model()))
    return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  if (auto why = route_request(cfg_.tiers.get(), a)) return rejection(a.client_id, wire::ErrorCode::invalid_field, *why);
  return std::nullopt;
}

Admission RequestGate::to_admit(const std::string& peer, std::string_view bytes, int64_t now,
                                const std::string& client) const {
  persistence::Principal who;
  uint32_t weight = 1;
  Priority cap = Priority::interactive;
  if (cfg_.clients && client == kGatewayStats) {
    Admission what = read(peer, bytes, now);
    const auto* q = std::get_if<Query>(&what);
    if (q && q->kind == Query::Kind::stats) return what;
    return rejection(q ? q->client_id : 0, wire::ErrorCode::internal, "the gateway's own requests read only stats");
  }
  if (cfg_.clients) {
    const messages::ClientPolicy* policy = cfg_.clients->by_name(client);
    if (!policy)  // CURVE admitted it, so its name is known: anything else is a bug, refused
      return rejection(0, wire::ErrorCode::internal, "this connection is not an authenticated client");
    who = {policy->name, policy->admin};
    weight = policy->weight;
    cap = priority_of(policy->max_priority);
  }
  Admission what = read(peer, bytes, now);
  auto stamp = [&](AdmitRequest& a) {
    // Without authentication `client` is the sender's host or process: its
    // fair share and queue places, never an owner of sessions or jobs.
    a.tenant = cfg_.clients ? who.name : client;
    a.weight = weight;
    a.priority = std::max(a.priority, cap);  // no more urgent than the client may claim
  };
  if (auto* a = std::get_if<AdmitRequest>(&what)) stamp(*a);
  if (auto* t = std::get_if<SessionTurn>(&what)) stamp(t->request), t->who = who;
  if (auto* q = std::get_if<Query>(&what)) {
    q->who = who;
    // A front end takes sessions for any of its clients: only an admin key may.
    if (q->kind == Query::Kind::take_session && !who.admin)
      return rejection(q->client_id, wire::ErrorCode::forbidden,
                       "TakeSession is for front ends: their key must be an admin client (admin = true)");
  }
  if (auto* j = std::get_if<JobSubmission>(&what)) {
    j->who = who;
    if (static_cast<int>(j->priority) < static_cast<int>(policy_priority(cap))) j->priority = policy_priority(cap);
  }
  return what;
}

Admission RequestGate::read(const std::string& peer, std::string_view bytes, int64_t now) const {
  messages::Rejection why;
  const wire::Request* req = messages::check_request(bytes, cfg_.limits, why);
  if (!req) return why;
  const uint64_t id = req->client_request_id();
  AdmitRequest a;
  a.peer = peer;
  a.client_id = id;
  a.accepted_ns = now;
  try {
    switch (req->body_type()) {
      case wire::RequestBody::Ping: return query(Query::Kind::ping, peer, id, req->body_as_Ping()->nonce());
      case wire::RequestBody::Stats: return query(Query::Kind::stats, peer, id);
      case wire::RequestBody::Cancel:
        return query(Query::Kind::cancel, peer, id, req->body_as_Cancel()->target_request_id());
      case wire::RequestBody::Generate:
        if (auto r = read_generate(*req->body_as_Generate(), a)) return *r;
        resolve_response_cache(a, req->body_as_Generate()->response_cache());
        return a;
      case wire::RequestBody::ChatTurn: return chat_turn(*req->body_as_ChatTurn(), std::move(a));
      case wire::RequestBody::ListSessions: return query(Query::Kind::list_sessions, peer, id);
      case wire::RequestBody::TakeSession: {
        Query q = query(Query::Kind::take_session, peer, id, 0, req->body_as_TakeSession()->session_id()->str());
        q.take = messages::read_take_session(*req->body_as_TakeSession());
        return q;
      }
      case wire::RequestBody::ShowSession:
        return query(Query::Kind::show_session, peer, id, 0, req->body_as_ShowSession()->session_id()->str());
      case wire::RequestBody::DeleteSession:
        return query(Query::Kind::delete_session, peer, id, 0, req->body_as_DeleteSession()->session_id()->str());
      case wire::RequestBody::SubmitJob: return submit_job(*req->body_as_SubmitJob(), peer, id, now);
      case wire::RequestBody::PutFile:
      case wire::RequestBody::GetFile:
      case wire::RequestBody::ListFiles:
      case wire::RequestBody::DeleteFile: {
        Query q = query(Query::Kind::file, peer, id);
        q.request = std::string(bytes);
        return q;
      }
      case wire::RequestBody::JobStatus:
        return query(Query::Kind::job, peer, id, 0, req->body_as_JobStatus()->job_id()->str(), JobQuery::status);
      case wire::RequestBody::JobResults:
        return query(Query::Kind::job, peer, id, 0, req->body_as_JobResults()->job_id()->str(), JobQuery::results);
      case wire::RequestBody::CancelJob:
        return query(Query::Kind::job, peer, id, 0, req->body_as_CancelJob()->job_id()->str(), JobQuery::cancel);
      case wire::RequestBody::ListJobs: return query(Query::Kind::job, peer, id, 0, {}, JobQuery::list);
      default: break;  // check_request admits no other body
    }
  } catch (const std::exception& e) {
    return rejection(id, wire::ErrorCode::invalid_field, std::string("prompt: ") + e.what());
  }
  return rejection(id, wire::ErrorCode::invalid_field, "body: not a request this server answers");
}

// A chat turn: a session's (its history is the store's), or a one-off
// conversation tokenized here, fitted to the context by the window policy.
Admission RequestGate::chat_turn(const wire::ChatTurn& t, AdmitRequest a) const {
  std::vector<ChatMessage> chat;
  if (auto r = read_chat(t, a, chat)) return *r;
  if (t.session_id() && t.session_id()->size() > 0) {
    a.session_id = t.session_id()->str();
    a.turn_messages = std::move(chat);
    return SessionTurn{std::move(a), {}, t.expected_turns()};
  }
  if (a.policy == ContextPolicy::refuse || chat.size() < 2) {
    const auto messages = with_tools(cfg_.chat_format, chat, a.tools, cfg_.tokenizer->vocabulary().chat_template);
    a.prompt = encode_chat(*cfg_.tokenizer, cfg_.chat_format, messages, true);
    resolve_response_cache(a, t.response_cache());
    return a;
  }
  // A one-off conversation under window: each earlier message is a turn that may go.
  persistence::SessionStart earlier;
  for (size_t i = 0; i + 1 < chat.size(); ++i) {
    earlier.turns.push_back({chat[i]});
    const bool pinned = std::binary_search(a.pinned_messages.begin(), a.pinned_messages.end(), static_cast<int32_t>(i));
    earlier.pinned.push_back(pinned ? std::vector<int32_t>{0} : std::vector<int32_t>{});
  }
  const ChatMessage last[] = {chat.back()};
  a.prompt =
      fit_context(*cfg_.tokenizer, cfg_.chat_format, earlier, last, prompt_budget(a), ContextPolicy::window, a.tools).prompt;
  resolve_response_cache(a, t.response_cache());
  return a;
}

Admission RequestGate::submit_job(const wire::SubmitJob& job, const std::string& peer, uint64_t id, int64_t now) const {
  JobSubmission sub = submission(job, peer, id);
  // A check that cannot run exactly is refused now, as a constraint is.
  if (sub.check.kind != wire::JobCheckKind::none) {
    try {
      grammar::TextCheck(static_cast<grammar::TextCheckKind>(sub.check.kind), sub.check.text);
    } catch (const std::exception& e) {
      return rejection(id, wire::ErrorCode::invalid_field, std::string("SubmitJob.check: ") + e.what());
    }
  }
  // A job of requests: each one is refused now as it would be alone, never part way.
  for (size_t i = 0; i < sub.requests.size(); ++i) {
    auto item = job_item(sub.requests[i], now);
    if (auto* r = std::get_if<messages::Rejection>(&item))
      return rejection(id, r->code, "SubmitJob.requests[" + std::to_string(i) + "]: " + r->message);
  }
  if (!sub.requests.empty()) return sub;
  // A job's schema is refused at submission, not item by item.
  if (auto why = lower_constraint(sub.sampling, false, *grammars_)) return rejection(id, wire::ErrorCode::invalid_field, *why);
  // Its items take the route the job asks for: a bad tier is refused now, not per item.
  static const TierTable kNone;
  auto route = resolve_route(cfg_.tiers ? *cfg_.tiers : kNone, sub.sampling, 1);
  if (auto* why = std::get_if<std::string>(&route)) return rejection(id, wire::ErrorCode::invalid_field, *why);
  return sub;
}

// A request that asks for the response cache gets its key, or bypasses the
// cache when its answer is not its own (or the server keeps none).
void RequestGate::resolve_response_cache(AdmitRequest& a, bool asked) const {
  if (!asked) return;
  a.response_cache = wire::ResponseCacheOutcome::bypassed;
  // A cached answer carries no calls: turns with tools are computed.
  if (!cfg_.response_cache || a.tool_format) return;
  CacheableRequest r{cfg_.model_fingerprint, a.prompt,      &a.sampling,        a.ignore_eos,
                     a.logprobs,             a.samples,     a.speculation,      route_key(a.route),
                     route_learns(cfg_.tiers ? *cfg_.tiers : TierTable{}, a.route, a.sampling)};
  if (auto key = response_cache_key(r)) {
    a.response_cache = wire::ResponseCacheOutcome::miss;  // until ingestion finds it
    a.response_cache_key = std::move(*key);
  }
}

// Room a prompt may take: the context less what the answer needs (its
// max_tokens, at most a quarter of the context).
int64_t RequestGate::prompt_budget(const AdmitRequest& a) const {
  const int64_t reserve = std::clamp<int64_t>(a.sampling.max_tokens, 16, std::max<int64_t>(16, cfg_.max_context / 4));
  return cfg_.max_context - reserve;
}

std::variant<AdmitRequest, messages::Rejection> RequestGate::with_history(SessionTurn turn,
                                                                          persistence::SessionStart start) const {
  AdmitRequest& a = turn.request;
  // A turn that continues the session as the client last read it: not once it moved on.
  if (turn.expected_turns >= 0 && start.turns.size() != static_cast<size_t>(turn.expected_turns))
    return rejection(a.client_id, wire::ErrorCode::session_busy,
                     "session '" + a.session_id + "' holds " + std::to_string(start.turns.size()) +
                         " turns, not the " + std::to_string(turn.expected_turns) + " this turn continues");
  try {
    const int64_t budget = prompt_budget(a);
    if (!a.tool_results.empty() || a.tool_format) {
      // The whole conversation: the session's turns, then this one's messages.
      std::vector<ChatMessage> all;
      for (const auto& stored : start.turns) all.insert(all.end(), stored.begin(), stored.end());
      all.insert(all.end(), a.turn_messages.begin(), a.turn_messages.end());
      a.tool_seed = conversation_seed(all);
      std::vector<std::string> ids = stored_call_ids(cfg_.chat_format, all);
      ids.insert(ids.end(), a.turn_call_ids.begin(), a.turn_call_ids.end());
      if (auto r = unanswered(a.tool_results, ids))
        return rejection(a.client_id, wire::ErrorCode::invalid_field,
                         "messages: a tool result answers call '" + r->substr(0, 64) + "', which the session never made");
    }
    ContextWindow w = fit_context(*cfg_.tokenizer, cfg_.chat_format, start, a.turn_messages, budget, a.policy, a.tools);
    a.prompt = std::move(w.prompt);
    a.window_first_turn = w.first_turn;
    // What the prompt no longer shows, for a suffix tree this server may not hold.
    if (drafts_from_suffix(a.speculation) && w.first_turn > 0)
      a.suffix_seed = answers_before(*cfg_.tokenizer, start, w.first_turn, SuffixLimits{}.scope_tokens);
    if (w.summarize_through > 0) {
      a.summary_messages = summary_request(*cfg_.tokenizer, cfg_.chat_format, start, w.summarize_through, budget);
      a.summarize_through = w.summarize_through;
    }
  } catch (const std::exception& e) {
    return rejection(a.client_id, wire::ErrorCode::invalid_field, std::string("prompt: ") + e.what());
  }
  a.session_escalations = start.escalations;
  const auto ps = static_cast<size_t>(cfg_.page_size);
  size_t same = 0;
  while (same < a.prompt.size() && same < start.kv_tokens.size() && a.prompt[same] == start.kv_tokens[same]) ++same;
  a.persisted_pages = std::min(static_cast<int32_t>(same / ps), start.kv_stored);
  // Past the window, the kept turns' KV moves from where the history had it.
  if (a.window_first_turn > 0) a.reuse = find_reuse(a.prompt, start.kv_tokens, cfg_.page_size);
  size_t restore = static_cast<size_t>(a.persisted_pages);
  if (a.reuse.count > 0) {
    restore = std::min<size_t>((static_cast<size_t>(a.reuse.src_begin + a.reuse.count) + ps - 1) / ps,
                               static_cast<size_t>(start.kv_stored));
    a.restore_tokens = start.kv_tokens;
  }
  start.kv_data.resize(std::min(start.kv_data.size(), restore));
  a.restore_pages = std::move(start.kv_data);
  return std::move(a);
}

std::variant<AdmitRequest, messages::Rejection> RequestGate::job_item(std::string_view request, int64_t now) const {
  Admission what = read(std::string(), request, now);
  if (auto* r = std::get_if<messages::Rejection>(&what)) return *r;
  auto* a = std::get_if<AdmitRequest>(&what);
  if (!a) return rejection(0, wire::ErrorCode::invalid_field, "an item must be a Generate or a ChatTurn without a session");
  if (auto r = check(*a)) return *r;
  return std::move(*a);
}

std::optional<messages::Rejection> RequestGate::check(const AdmitRequest& a) const {
  if (a.samples > cfg_.max_samples)
    return rejection(a.client_id, wire::ErrorCode::invalid_field,
                     "n: " + std::to_string(a.samples) + " samples; this server's backend serves at most " +
                         std::to_string(cfg_.max_samples));
  if (a.prompt.empty()) return rejection(a.client_id, wire::ErrorCode::invalid_field, "prompt: no tokens");
  if (static_cast<int64_t>(a.prompt.size()) >= cfg_.max_context) {
    std::string problem = "the prompt has " + std::to_string(a.prompt.size()) + " tokens; the context holds " +
                          std::to_string(cfg_.max_context);
    if (!a.session_id.empty()) problem += " (session '" + a.session_id + "' has outgrown it)";
    return rejection(a.client_id, wire::ErrorCode::too_long, problem);
  }
  return std::nullopt;
}

}  // namespace troupe::service
