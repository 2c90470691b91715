#include "messages/client_validation.h"

#include <cctype>
#include <cmath>
#include <span>
#include <string>
#include <string_view>

#include "engine/kv_eviction.h"

namespace troupe::messages {
namespace {

struct Check {
  Rejection& why;
  bool fail(const std::string& field, const std::string& problem) {
    why.code = wire::ErrorCode::invalid_field;
    why.message = field + ": " + problem;
    return false;
  }
  bool too_long(const std::string& field, const std::string& problem) {
    fail(field, problem);
    why.code = wire::ErrorCode::too_long;
    return false;
  }
};

std::string num(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

bool in_range(Check& c, const std::string& field, double v, double lo, double hi, const char* range_text) {
  if (!std::isfinite(v) || v < lo || v > hi) return c.fail(field, num(v) + " is outside " + range_text);
  return true;
}

bool check_priority(Check& c, const std::string& field, wire::Priority p) {
  if (p < wire::Priority::MIN || p > wire::Priority::MAX)
    return c.fail(field, "unknown priority " + std::to_string(static_cast<int>(p)));
  return true;
}

// The shape only; whether the grammar or schema can be enforced is the
// service's to decide (it compiles it) with the keyword at fault.
bool check_constraint(Check& c, const std::string& f, const wire::Constraint* k) {
  if (!k || k->kind() == wire::ConstraintKind::none) return true;
  if (k->kind() < wire::ConstraintKind::MIN || k->kind() > wire::ConstraintKind::MAX)
    return c.fail(f + ".kind", "unknown kind " + std::to_string(static_cast<int>(k->kind())) +
                                   " (grammar, json_schema, regex, choice, json_object)");
  constexpr size_t kMaxText = size_t{1} << 20;
  const size_t text = k->text() ? k->text()->size() : 0;
  if (text > kMaxText) return c.fail(f + ".text", std::to_string(text) + " bytes, at most 1 MiB");
  const bool needs_text = k->kind() == wire::ConstraintKind::grammar || k->kind() == wire::ConstraintKind::json_schema ||
                          k->kind() == wire::ConstraintKind::regex;
  if (needs_text && text == 0) return c.fail(f + ".text", std::string("is empty; a ") + wire::EnumNameConstraintKind(k->kind()) + " needs one");
  if (k->kind() == wire::ConstraintKind::choice) {
    const auto* choices = k->choices();
    if (!choices || choices->size() == 0) return c.fail(f + ".choices", "is empty; a choice needs at least one string");
    if (choices->size() > 4096) return c.fail(f + ".choices", std::to_string(choices->size()) + " strings, at most 4096");
    size_t total = 0;
    for (uint32_t i = 0; i < choices->size(); ++i) {
      const auto* str = choices->Get(i);
      if (!str || str->size() == 0) return c.fail(f + ".choices[" + std::to_string(i) + "]", "is empty");
      total += str->size();
    }
    if (total > kMaxText) return c.fail(f + ".choices", std::to_string(total) + " bytes in all, at most 1 MiB");
  }
  return true;
}

bool check_logit_bias(Check& c, const std::string& f, const flatbuffers::Vector<const wire::TokenBias*>* bias) {
  if (!bias) return true;
  if (bias->size() > 1024) return c.fail(f + "logit_bias", std::to_string(bias->size()) + " tokens, at most 1024");
  for (const auto* b : *bias) {
    if (b->token() < 0) return c.fail(f + "logit_bias", "token " + std::to_string(b->token()) + " is negative");
    if (!in_range(c, f + "logit_bias[" + std::to_string(b->token()) + "]", b->bias(), -100, 100, "[-100, 100]"))
      return false;
  }
  return true;
}

bool check_stop(Check& c, const std::string& f, const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* stop,
                const ClientLimits& l) {
  if (!stop) return true;
  if (stop->size() > l.max_stop_strings)
    return c.fail(f + "stop", std::to_string(stop->size()) + " strings, at most " + std::to_string(l.max_stop_strings));
  for (uint32_t i = 0; i < stop->size(); ++i) {
    const auto* str = stop->Get(i);
    if (!str || str->size() == 0) return c.fail(f + "stop[" + std::to_string(i) + "]", "is empty");
    if (str->size() > l.max_stop_bytes)
      return c.fail(f + "stop[" + std::to_string(i) + "]", "longer than " + std::to_string(l.max_stop_bytes) + " bytes");
  }
  return true;
}

// A flat list of independent checks, in the order they are told
// (the first that fails is the refusal).
// The cascade's fields: the tier, escalate's threshold, and the budget
// rule's workload class (short, and safe in a metric's label).
bool check_routing(Check& c, const std::string& f, const wire::Sampling& s) {
  if (s.tier() && s.tier()->size() > 128) return c.fail(f + "tier", "longer than 128 bytes");
  if (!(s.escalate_threshold() >= 0.0f && s.escalate_threshold() < 1.0f))
    return c.fail(f + "escalate_threshold", std::to_string(s.escalate_threshold()) + " is outside (0, 1) (0: the server's default)");
  if (const auto* cls = s.escalate_class()) {
    if (cls->size() > 64) return c.fail(f + "escalate_class", "longer than 64 bytes");
    for (char ch : cls->string_view())
      if (!std::isalnum(static_cast<unsigned char>(ch)) && std::string_view("._-:/").find(ch) == std::string_view::npos)
        return c.fail(f + "escalate_class", "only letters, digits and . _ - : / (a workload class's name)");
  }
  return true;
}

// Its kind and size; whether it can run is the service's to say (it builds it).
bool check_job_check(Check& c, const wire::JobCheck* check) {
  if (!check) return true;
  if (check->kind() < wire::JobCheckKind::MIN || check->kind() > wire::JobCheckKind::MAX)
    return c.fail("SubmitJob.check.kind", "unknown kind " + std::to_string(static_cast<int>(check->kind())));
  if (check->text() && check->text()->size() > (1u << 20)) return c.fail("SubmitJob.check.text", "longer than 1 MiB");
  return true;
}

bool check_sampling(Check& c, const std::string& where, const wire::Sampling* s, const ClientLimits& l) {
  if (!s) return true;  // defaults apply
  const std::string f = where + ".sampling.";
  if (!in_range(c, f + "temperature", s->temperature(), 0, 100, "[0, 100]")) return false;
  if (s->top_k() < 0) return c.fail(f + "top_k", std::to_string(s->top_k()) + " is negative");
  if (!in_range(c, f + "top_p", s->top_p(), 0, 1, "[0, 1]")) return false;
  if (s->top_p() == 0.0f) return c.fail(f + "top_p", "0 keeps no token (use temperature 0 for greedy)");
  if (!in_range(c, f + "min_p", s->min_p(), 0, 1, "[0, 1]")) return false;
  // The engine's own bounds (SamplingParams::validate): what passes here never fails a step.
  if (!in_range(c, f + "repeat_penalty", s->repeat_penalty(), 0.01, 10, "[0.01, 10]")) return false;
  if (!in_range(c, f + "presence_penalty", s->presence_penalty(), -10, 10, "[-10, 10]")) return false;
  if (!in_range(c, f + "frequency_penalty", s->frequency_penalty(), -10, 10, "[-10, 10]")) return false;
  if (s->penalty_last_n() < 0) return c.fail(f + "penalty_last_n", "is negative");
  if (!(s->accept_ratio() > 0.0f && s->accept_ratio() <= 1.0f))
    return c.fail(f + "accept_ratio", std::to_string(s->accept_ratio()) + " is outside (0, 1]");
  if (s->accept_ratio() < 1.0f && s->temperature() > 0.0f)
    return c.fail(f + "accept_ratio", "below 1 only for greedy requests (temperature 0); sampled drafts are verified exactly");
  if (!check_routing(c, f, *s)) return false;
  if (s->kv_budget() != 0) {
    const int32_t least = EvictionPolicy{}.least();
    if (s->kv_budget() < least || s->kv_budget() > (1 << 24))
      return c.fail(f + "kv_budget", std::to_string(s->kv_budget()) + " is outside [" + std::to_string(least) +
                                         ", 16777216] (0: the server's budget)");
  }
  if (!check_logit_bias(c, f, s->logit_bias())) return false;
  if (s->max_tokens() < 1 || s->max_tokens() > l.max_tokens)
    return c.fail(f + "max_tokens", std::to_string(s->max_tokens()) + " is outside [1, " + std::to_string(l.max_tokens) + "]");
  if (!check_stop(c, f, s->stop(), l)) return false;
  return check_constraint(c, f + "constraint", s->constraint());
}

bool check_speculation(Check& c, const std::string& where, wire::Speculation s, int32_t max_draft,
                       const flatbuffers::String* draft_model) {
  if (s < wire::Speculation::MIN || s > wire::Speculation::MAX)
    return c.fail(where + ".speculation", "unknown mode " + std::to_string(static_cast<int>(s)));
  if (max_draft < 0 || max_draft > 8) return c.fail(where + ".max_draft", std::to_string(max_draft) + " is outside [0, 8]");
  if (draft_model && draft_model->size() > 256) return c.fail(where + ".draft_model", "longer than 256 bytes");
  return true;
}

bool check_policy(Check& c, const std::string& where, wire::ContextPolicy p) {
  if (p < wire::ContextPolicy::MIN || p > wire::ContextPolicy::MAX)
    return c.fail(where + ".context_policy", "unknown policy " + std::to_string(static_cast<int>(p)) +
                                                 " (server_default, refuse, window, summarize)");
  return true;
}

// top_logprobs: 0..20 (OpenAI's range), and only with logprobs.
bool check_top_logprobs(Check& c, const std::string& what, int32_t top, bool logprobs) {
  if (top < 0 || top > 20) return c.fail(what + ".top_logprobs", std::to_string(top) + " is outside [0, 20]");
  if (top > 0 && !logprobs) return c.fail(what + ".top_logprobs", "needs logprobs");
  return true;
}

bool check_generate(Check& c, const wire::Generate* g, const ClientLimits& l) {
  if (!g->prompt() || g->prompt()->size() == 0) return c.fail("Generate.prompt", "is empty");
  if (g->prompt()->size() > l.max_prompt_bytes)
    return c.fail("Generate.prompt", std::to_string(g->prompt()->size()) + " bytes, at most " + std::to_string(l.max_prompt_bytes));
  if (g->n() < 1 || g->n() > 16) return c.fail("Generate.n", std::to_string(g->n()) + " is outside [1, 16]");
  if (!check_speculation(c, "Generate", g->speculation(), g->max_draft(), g->draft_model())) return false;
  if (!check_policy(c, "Generate", g->context_policy())) return false;
  if (g->context_policy() == wire::ContextPolicy::summarize)
    return c.fail("Generate.context_policy", "summarize needs a conversation (a ChatTurn)");
  if (!check_top_logprobs(c, "Generate", g->top_logprobs(), g->logprobs())) return false;
  return check_priority(c, "Generate.priority", g->priority()) && check_sampling(c, "Generate", g->sampling(), l);
}

// Session and job ids become store keys: a bounded, printable alphabet
// (no separator byte of the key layouts can occur).
bool check_id(Check& c, const std::string& field, const flatbuffers::String* id, const ClientLimits& l, bool required) {
  if (!id || id->size() == 0) return required ? c.fail(field, "is empty") : true;
  if (id->size() > l.max_session_id_bytes)
    return c.fail(field, "longer than " + std::to_string(l.max_session_id_bytes) + " bytes");
  for (char ch : id->string_view())
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
      return c.fail(field, "may hold only letters, digits, '-', '_' and '.'");
  return true;
}

bool check_job(Check& c, const wire::SubmitJob* j, const ClientLimits& l) {
  const auto* items = j->items();
  if (!items || items->size() == 0) return c.fail("SubmitJob.items", "is empty");
  if (items->size() > l.max_job_items)
    return c.fail("SubmitJob.items", std::to_string(items->size()) + " items, at most " + std::to_string(l.max_job_items));
  for (uint32_t i = 0; i < items->size(); ++i) {
    const auto* item = items->Get(i);
    const std::string f = "SubmitJob.items[" + std::to_string(i) + "]";
    if (!item || item->size() == 0) return c.fail(f, "is empty");
    if (item->size() > l.max_prompt_bytes)
      return c.fail(f, std::to_string(item->size()) + " bytes, at most " + std::to_string(l.max_prompt_bytes));
  }
  if (const auto* requests = j->requests()) {
    // A job of whole requests: each is checked as it would be alone when the gate reads it.
    if (requests->size() != items->size())
      return c.fail("SubmitJob.requests", std::to_string(requests->size()) + " requests for " +
                                              std::to_string(items->size()) + " items");
    for (uint32_t i = 0; i < requests->size(); ++i) {
      const auto* r = requests->Get(i);
      if (!r || !r->data() || r->data()->size() == 0)
        return c.fail("SubmitJob.requests[" + std::to_string(i) + "]", "is empty");
    }
    if (j->annotation() && j->annotation()->size() > 65536)
      return c.fail("SubmitJob.annotation", "longer than 65,536 bytes");
    return check_priority(c, "SubmitJob.priority", j->priority());
  }
  if (!check_job_check(c, j->check())) return false;
  if (j->template_() && j->template_()->size() > l.max_prompt_bytes)
    return c.fail("SubmitJob.template", "longer than " + std::to_string(l.max_prompt_bytes) + " bytes");
  // Each item's prompt is the template with every "{item}" replaced: bounded
  // here, before anything is stored or expanded, like a single prompt.
  const std::string_view tmpl = j->template_() ? j->template_()->string_view() : std::string_view();
  size_t uses = 0;
  for (size_t at = 0; (at = tmpl.find("{item}", at)) != std::string_view::npos; at += 6) ++uses;
  for (uint32_t i = 0; i < items->size(); ++i) {
    const size_t item = items->Get(i)->size();
    const size_t bytes = tmpl.empty() ? item : tmpl.size() - 6 * uses + uses * item;
    if (bytes > l.max_prompt_bytes)
      return c.too_long("SubmitJob.items[" + std::to_string(i) + "]",
                        "expands to " + std::to_string(bytes) + " bytes through the template's " +
                            std::to_string(uses) + " '{item}'s, at most " + std::to_string(l.max_prompt_bytes));
  }
  return check_priority(c, "SubmitJob.priority", j->priority()) && check_sampling(c, "SubmitJob", j->sampling(), l);
}

constexpr uint32_t kMaxTools = 128, kMaxToolCalls = 64;
constexpr size_t kMaxToolName = 64;

// The tools' texts are read (and refused) by the service; here their counts and sizes.
bool check_tools(Check& c, const wire::ChatTurn* t, const ClientLimits& l) {
  const auto* tools = t->tools();
  const uint32_t n = tools ? tools->size() : 0;
  if (n > kMaxTools) return c.fail("ChatTurn.tools", std::to_string(n) + " tools, at most " + std::to_string(kMaxTools));
  size_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (!tools->Get(i) || tools->Get(i)->size() == 0)
      return c.fail("ChatTurn.tools[" + std::to_string(i) + "]", "is empty (an OpenAI tool object's JSON text)");
    total += tools->Get(i)->size();
  }
  if (total > l.max_prompt_bytes)
    return c.fail("ChatTurn.tools", std::to_string(total) + " bytes, at most " + std::to_string(l.max_prompt_bytes));
  const auto choice = t->tool_choice();
  if (choice < wire::ToolChoice::MIN || choice > wire::ToolChoice::MAX)
    return c.fail("ChatTurn.tool_choice", "unknown value " + std::to_string(static_cast<int>(choice)));
  const bool named = choice == wire::ToolChoice::named;
  const size_t name = t->tool_name() ? t->tool_name()->size() : 0;
  if (named && (name == 0 || name > kMaxToolName)) return c.fail("ChatTurn.tool_name", "named needs a tool's name (1 to 64 characters)");
  if (!named && name > 0) return c.fail("ChatTurn.tool_name", "is only for tool_choice named");
  if ((choice == wire::ToolChoice::required || named) && n == 0)
    return c.fail("ChatTurn.tool_choice", std::string(wire::EnumNameToolChoice(choice)) + " needs tools");
  return true;
}

// An assistant message's calls; their names and arguments count toward `total`.
bool check_calls(Check& c, const wire::ChatMessage* m, std::string_view role, const std::string& f, size_t& total) {
  const auto* calls = m->tool_calls();
  if (!calls || calls->size() == 0) return true;
  if (role != "assistant") return c.fail(f + ".tool_calls", "only an assistant message makes calls");
  if (calls->size() > kMaxToolCalls)
    return c.fail(f + ".tool_calls", std::to_string(calls->size()) + " calls, at most " + std::to_string(kMaxToolCalls));
  for (uint32_t k = 0; k < calls->size(); ++k) {
    const auto* call = calls->Get(k);
    const std::string g = f + ".tool_calls[" + std::to_string(k) + "]";
    if (!call->name() || call->name()->size() == 0 || call->name()->size() > kMaxToolName)
      return c.fail(g + ".name", "must be 1 to 64 characters");
    if (!call->arguments()) return c.fail(g + ".arguments", "is missing (a JSON object's text)");
    total += call->arguments()->size() + call->name()->size();
  }
  return true;
}

// One message of a turn, `f` its field; its content counts toward `total`.
bool check_message(Check& c, const wire::ChatMessage* m, const std::string& f, size_t& total) {
  if (!m || !m->role() || !m->content()) return c.fail(f, "needs a role and content");
  const auto role = m->role()->string_view();
  if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
    std::string problem = "'";  // built by append: GCC 12 warns falsely (-Wrestrict) on "'" + std::string
    problem.append(role.substr(0, 32)).append("' is not system, user, assistant or tool");
    return c.fail(f + ".role", problem);
  }
  total += m->content()->size();
  if (!check_calls(c, m, role, f, total)) return false;
  if (role == "tool" && m->tool_call_id() && m->tool_call_id()->size() > kMaxToolName * 4)
    return c.fail(f + ".tool_call_id", "is longer than 256 bytes");
  return true;
}

// A flat list of independent checks, in the order they are told
// (the first that fails is the refusal).
bool check_chat(Check& c, const wire::ChatTurn* t, const ClientLimits& l) {
  if (!check_id(c, "ChatTurn.session_id", t->session_id(), l, false)) return false;
  const auto* msgs = t->messages();
  if (!msgs || msgs->size() == 0) return c.fail("ChatTurn.messages", "is empty");
  if (msgs->size() > l.max_chat_messages)
    return c.too_long("ChatTurn.messages", std::to_string(msgs->size()) + " messages, at most " + std::to_string(l.max_chat_messages));
  size_t total = 0;
  for (uint32_t i = 0; i < msgs->size(); ++i)
    if (!check_message(c, msgs->Get(i), "ChatTurn.messages[" + std::to_string(i) + "]", total)) return false;
  if (total > l.max_prompt_bytes)
    return c.fail("ChatTurn.messages", std::to_string(total) + " bytes of content, at most " + std::to_string(l.max_prompt_bytes));
  if (t->n() < 1 || t->n() > 16) return c.fail("ChatTurn.n", std::to_string(t->n()) + " is outside [1, 16]");
  if (!check_speculation(c, "ChatTurn", t->speculation(), t->max_draft(), t->draft_model())) return false;
  if (!check_policy(c, "ChatTurn", t->context_policy())) return false;
  if (t->context_policy() == wire::ContextPolicy::summarize && !(t->session_id() && t->session_id()->size() > 0))
    return c.fail("ChatTurn.context_policy", "summarize needs a session (the summary is stored with it)");
  if (t->n() > 1 && t->session_id() && t->session_id()->size() > 0)
    return c.fail("ChatTurn.n", "a session turn has one answer (n = 1)");
  if (!check_tools(c, t, l)) return false;
  if (!check_top_logprobs(c, "ChatTurn", t->top_logprobs(), t->logprobs())) return false;
  return check_priority(c, "ChatTurn.priority", t->priority()) && check_sampling(c, "ChatTurn", t->sampling(), l);
}

bool check_take_session(Check& c, const wire::TakeSession* t, const ClientLimits& l) {
  if (!check_id(c, "TakeSession.session_id", t->session_id(), l, true)) return false;
  if (t->step() != wire::HandOffStep::ask && t->step() != wire::HandOffStep::done && t->step() != wire::HandOffStep::abort)
    return c.fail("TakeSession.step", "unknown step " + std::to_string(static_cast<int>(t->step())));
  if (!t->to() || t->to()->size() == 0 || t->to()->size() > 1024)
    return c.fail("TakeSession.to", "needs the taker's endpoint (at most 1,024 bytes)");
  if (t->owner() && t->owner()->size() > 1024) return c.fail("TakeSession.owner", "longer than 1,024 bytes");
  return true;
}

bool check_put_file(Check& c, const wire::PutFile* f) {
  if (!f->purpose() || f->purpose()->size() == 0 || f->purpose()->size() > 64)
    return c.fail("PutFile.purpose", "needs a purpose of at most 64 bytes");
  if (f->filename() && f->filename()->size() > 256) return c.fail("PutFile.filename", "longer than 256 bytes");
  if (!f->data() || f->data()->size() == 0) return c.fail("PutFile.data", "is empty");
  return true;
}

// The body's own checks, by its type: one case per request body.
bool check_body(Check& c, const wire::Request* req, const ClientLimits& limits) {
  switch (req->body_type()) {
    case wire::RequestBody::Generate: return check_generate(c, req->body_as_Generate(), limits);
    case wire::RequestBody::ChatTurn: return check_chat(c, req->body_as_ChatTurn(), limits);
    case wire::RequestBody::ShowSession:
      return check_id(c, "ShowSession.session_id", req->body_as_ShowSession()->session_id(), limits, true);
    case wire::RequestBody::DeleteSession:
      return check_id(c, "DeleteSession.session_id", req->body_as_DeleteSession()->session_id(), limits, true);
    case wire::RequestBody::TakeSession: return check_take_session(c, req->body_as_TakeSession(), limits);
    case wire::RequestBody::SubmitJob: return check_job(c, req->body_as_SubmitJob(), limits);
    case wire::RequestBody::JobStatus:
      return check_id(c, "JobStatus.job_id", req->body_as_JobStatus()->job_id(), limits, true);
    case wire::RequestBody::JobResults:
      return check_id(c, "JobResults.job_id", req->body_as_JobResults()->job_id(), limits, true);
    case wire::RequestBody::CancelJob:
      return check_id(c, "CancelJob.job_id", req->body_as_CancelJob()->job_id(), limits, true);
    case wire::RequestBody::PutFile: return check_put_file(c, req->body_as_PutFile());
    case wire::RequestBody::GetFile: return check_id(c, "GetFile.file_id", req->body_as_GetFile()->file_id(), limits, true);
    case wire::RequestBody::DeleteFile:
      return check_id(c, "DeleteFile.file_id", req->body_as_DeleteFile()->file_id(), limits, true);
    case wire::RequestBody::ListFiles:
    case wire::RequestBody::Cancel:
    case wire::RequestBody::Stats:
    case wire::RequestBody::Ping:
    case wire::RequestBody::ListSessions:
    case wire::RequestBody::ListJobs: return true;
    case wire::RequestBody::NONE:
    default:
      return c.fail("Request.body", "missing or unknown body type " + std::to_string(static_cast<int>(req->body_type())));
  }
}

// The buffer's size and FlatBuffers' verification, before anything reads it.
const wire::Request* verified_request(std::string_view text, const ClientLimits& limits, Rejection& why) {
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  if (bytes.size() > limits.max_message_bytes) {
    why = {wire::ErrorCode::too_long, "message of " + std::to_string(bytes.size()) + " bytes exceeds the limit of " +
                                          std::to_string(limits.max_message_bytes)};
    return nullptr;
  }
  flatbuffers::Verifier::Options opts;
  opts.max_depth = limits.max_depth;
  opts.max_tables = limits.max_tables;
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), opts);
  if (bytes.size() < sizeof(flatbuffers::uoffset_t) || !verifier.VerifyBuffer<wire::Request>(nullptr)) {
    why = {wire::ErrorCode::malformed, "not a valid Request buffer (" + std::to_string(bytes.size()) + " bytes failed verification)"};
    return nullptr;
  }
  return flatbuffers::GetRoot<wire::Request>(bytes.data());
}

}  // namespace

const wire::Request* check_request(std::string_view text, const ClientLimits& limits, Rejection& why) {
  why = Rejection{};
  const auto* req = verified_request(text, limits, why);
  if (!req) return nullptr;
  why.client_request_id = req->client_request_id();
  Check c{why};
  // The verifier accepts a union type with no table behind it: reject it
  // here, before anything reads the body.
  if (req->body_type() != wire::RequestBody::NONE && req->body() == nullptr) {
    c.fail("Request.body", "body type " + std::to_string(static_cast<int>(req->body_type())) + " without a body");
    return nullptr;
  }
  return check_body(c, req, limits) ? req : nullptr;
}

const wire::Response* check_response(std::string_view text, size_t max_bytes) {
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  if (bytes.size() > max_bytes) return nullptr;
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), flatbuffers::Verifier::Options{});
  if (bytes.size() < sizeof(flatbuffers::uoffset_t) || !verifier.VerifyBuffer<wire::Response>(nullptr)) return nullptr;
  const auto* r = flatbuffers::GetRoot<wire::Response>(bytes.data());
  return r->body_type() == wire::ResponseBody::NONE || r->body() == nullptr ? nullptr : r;
}

const char* error_code_name(wire::ErrorCode code) { return wire::EnumNameErrorCode(code); }

}  // namespace troupe::messages
