#include "service/openai_api.h"

#include <nlohmann/json.hpp>

#include "engine/tokenizer.h"
#include "messages/client_validation.h"
#include "service/openai_constraint.h"

namespace troupe::service {
namespace {

// Ordered: a JSON Schema's properties keep the order the client wrote (the
// grammar writes them in that order).
using json = nlohmann::ordered_json;

}  // namespace

std::string string_field(const json& object, const char* key, const std::string& fallback) {
  if (!object.is_object()) return fallback;
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : fallback;
}

const char* finish_name(wire::FinishReason r) {
  switch (r) {
    case wire::FinishReason::length:
    case wire::FinishReason::context_full: return "length";
    // The constraint allowed no token: the output is cut, and says so.
    case wire::FinishReason::grammar_blocked: return "grammar_blocked";
    case wire::FinishReason::tool_calls: return "tool_calls";
    default: return "stop";
  }
}

namespace {

// A number field of the body, if present; a wrong type is the caller's error.
template <typename T>
std::optional<ApiError> number(const json& body, const char* key, T& into, double lo, double hi) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return bad_field(key, std::string(key) + " must be a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) return bad_field(key, std::string(key) + " is outside [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  if constexpr (std::is_integral_v<T>) {
    if (v != static_cast<double>(static_cast<int64_t>(v))) return bad_field(key, std::string(key) + " must be a whole number");
    into = static_cast<T>(it->get<int64_t>());
  } else {
    into = static_cast<T>(v);
  }
  return std::nullopt;
}

}  // namespace

std::string ApiError::json() const {
  nlohmann::json e = {{"message", message},
                      {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                      {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                      {"code", code.empty() ? nlohmann::json() : nlohmann::json(code)}};
  return nlohmann::json{{"error", e}}.dump();
}

ApiError api_error(wire::ErrorCode code, const std::string& message) {
  int status = 500;
  switch (code) {
    case wire::ErrorCode::malformed:
    case wire::ErrorCode::invalid_field:
    case wire::ErrorCode::duplicate_id:
    case wire::ErrorCode::unknown_request: status = 400; break;
    case wire::ErrorCode::unknown_session:
    case wire::ErrorCode::unknown_job: status = 404; break;
    case wire::ErrorCode::too_long: status = 413; break;
    case wire::ErrorCode::queue_full:
    case wire::ErrorCode::overloaded: status = 429; break;
    case wire::ErrorCode::forbidden: status = 403; break;
    case wire::ErrorCode::session_busy: status = 409; break;
    case wire::ErrorCode::shutting_down: status = 503; break;
    default: status = 500;
  }
  return ApiError{status, message, "", wire::EnumNameErrorCode(code)};
}

namespace {

// Each reader takes its fields from the body, in the order a client's first
// error is told; none: they were absent or fine.
using Problem = std::optional<ApiError>;

Problem read_model(const json& body, const std::vector<std::string>& models, CompletionCall& call) {
  call.model = models.empty() ? "" : models.front();
  auto m = body.find("model");
  if (m == body.end() || m->is_null()) return std::nullopt;
  if (!m->is_string()) return bad_field("model", "model must be a string");
  const std::string name = m->get<std::string>();
  if (std::find(models.begin(), models.end(), name) == models.end())
    return ApiError{404, "the model '" + name + "' does not exist; this server serves " + call.model, "model",
                    "model_not_found"};
  call.model = name;
  return std::nullopt;
}

// OpenAI's defaults: temperature 1 and top_p 1 with no top-k or min-p cut.
Problem read_numbers(const json& body, int32_t max_tokens, messages::SamplingFields& s, CompletionCall& call) {
  s.temperature = 1.0f, s.top_p = 1.0f, s.top_k = 0, s.min_p = 0.0f;
  s.max_tokens = std::min(max_tokens, 1024);
  int64_t seed = 0;
  for (auto err : {number(body, "temperature", s.temperature, 0, 2), number(body, "top_p", s.top_p, 0, 1),
                   number(body, "presence_penalty", s.presence_penalty, -2, 2),
                   number(body, "frequency_penalty", s.frequency_penalty, -2, 2),
                   number(body, "repeat_penalty", s.repetition_penalty, 0.01, 10), number(body, "min_p", s.min_p, 0, 1),
                   number(body, "max_completion_tokens", s.max_tokens, 1, max_tokens),
                   number(body, "max_tokens", s.max_tokens, 1, max_tokens), number(body, "top_k", s.top_k, 0, 1 << 20),
                   number(body, "n", call.n, 1, 16), number(body, "seed", seed, -9.2e18, 9.2e18),
                   number(body, "troupe_accept_ratio", s.accept_ratio, 1e-6, 1)})
    if (err) return err;
  if (s.top_p == 0.0f) s.top_p = 1e-6f;  // OpenAI's 0 means the top token only; troupe's range is (0, 1]
  s.seed = static_cast<uint64_t>(seed);
  return std::nullopt;
}

Problem read_stop(const json& body, messages::SamplingFields& s) {
  auto st = body.find("stop");
  if (st == body.end() || st->is_null()) return std::nullopt;
  const char* why = "stop must be a string or an array of up to 4 strings";
  if (st->is_string()) s.stop.push_back(st->get<std::string>());
  else if (!st->is_array() || st->size() > 4) return bad_field("stop", why);
  else
    for (const auto& x : *st) {
      if (!x.is_string()) return bad_field("stop", why);
      s.stop.push_back(x.get<std::string>());
    }
  for (const auto& x : s.stop)
    if (x.empty()) return bad_field("stop", "a stop string is empty");
  return std::nullopt;
}

Problem read_logit_bias(const json& body, messages::SamplingFields& s) {
  auto lb = body.find("logit_bias");
  if (lb == body.end() || lb->is_null()) return std::nullopt;
  if (!lb->is_object()) return bad_field("logit_bias", "logit_bias must map token ids to biases");
  for (const auto& [key, v] : lb->items()) {
    char* end = nullptr;
    const long token = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || token < 0 || token > INT32_MAX || !v.is_number())
      return bad_field("logit_bias", "logit_bias keys are token ids and values numbers, not '" + key + "'");
    const double b = v.get<double>();
    if (!(b >= -100 && b <= 100)) return bad_field("logit_bias", "a bias is outside [-100, 100]");
    s.logit_bias.emplace_back(static_cast<int32_t>(token), static_cast<float>(b));
  }
  return std::nullopt;
}

// Chat: logprobs true and top_logprobs N; completions: logprobs N.
Problem read_logprobs(const json& body, bool chat, CompletionCall& call) {
  if (auto lp = body.find("logprobs"); lp != body.end() && !lp->is_null()) {
    if (!chat) {
      if (auto err = number(body, "logprobs", call.top_logprobs, 0, 20)) return err;
      call.logprobs = true;
    } else if (!lp->is_boolean()) {
      return bad_field("logprobs", "logprobs must be a boolean");
    } else {
      call.logprobs = lp->get<bool>();
    }
  }
  if (!chat) return std::nullopt;
  if (auto err = number(body, "top_logprobs", call.top_logprobs, 0, 20)) return err;
  if (call.top_logprobs > 0 && !call.logprobs) return bad_field("top_logprobs", "top_logprobs needs logprobs: true");
  return std::nullopt;
}

// A boolean field, if present.
Problem flag(const json& body, const char* key, const char* why, bool& into) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad_field(key, why);
  into = it->get<bool>();
  return std::nullopt;
}

Problem read_speculation(const json& body, wire::Speculation& spec) {
  auto sp = body.find("troupe_speculation");
  if (sp == body.end() || sp->is_null()) return std::nullopt;
  const std::string v = sp->is_string() ? sp->get<std::string>() : "";
  if (v == "off") spec = wire::Speculation::off;
  else if (v == "ngram") spec = wire::Speculation::ngram;
  else if (v == "draft") spec = wire::Speculation::draft;
  else if (v == "auto") spec = wire::Speculation::auto_;
  else if (v == "suffix") spec = wire::Speculation::suffix;
  else return bad_field("troupe_speculation", "troupe_speculation must be off, ngram, suffix, draft or auto");
  return std::nullopt;
}

// The fields a chat and a completion share, read into the call.
struct CommonFields {
  messages::SamplingFields sampling;
  wire::Speculation speculation = wire::Speculation::server_default;
  bool cache = false;  // troupe's extension: the response cache tier (greedy or seeded requests)
  std::string session;
};

Problem read_common(const json& body, bool chat, const std::vector<std::string>& models, int32_t max_tokens,
                    CompletionCall& call, CommonFields& f) {
  if (auto err = read_model(body, models, call)) return err;
  if (auto err = read_numbers(body, max_tokens, f.sampling, call)) return err;
  if (auto err = read_stop(body, f.sampling)) return err;
  if (auto err = read_logit_bias(body, f.sampling)) return err;
  if (auto e = read_constraint(body, f.sampling.constraint)) return bad_field(e->param, e->message);
  if (auto err = read_logprobs(body, chat, call)) return err;
  if (auto err = flag(body, "stream", "stream must be a boolean", call.stream)) return err;
  if (auto so = body.find("stream_options"); so != body.end() && so->is_object())
    call.include_usage = so->value("include_usage", false);
  if (auto err = read_speculation(body, f.speculation)) return err;
  if (auto err = flag(body, "troupe_response_cache", "troupe_response_cache must be true or false", f.cache)) return err;
  if (auto se = body.find("session"); se != body.end() && !se->is_null()) {
    if (!se->is_string()) return bad_field("session", "session must be a string");
    f.session = se->get<std::string>();
  }
  return std::nullopt;
}

Problem chat_call(const json& body, CommonFields f, CompletionCall& call) {
  auto m = body.find("messages");
  if (m == body.end() || !m->is_array() || m->empty()) return bad_field("messages", "messages must be a non-empty array");
  messages::ChatTurnFields turn;
  turn.session_id = f.session;
  for (size_t i = 0; i < m->size(); ++i) {
    turn.messages.emplace_back();
    if (auto err = read_openai_message((*m)[i], i, turn.messages.back())) return bad_field(err->param, err->message);
  }
  if (auto err = read_openai_tools(body, turn.tools)) return bad_field(err->param, err->message);
  call.tools = !turn.tools.tools.empty() && turn.tools.choice != wire::ToolChoice::none;
  turn.sampling = std::move(f.sampling);
  turn.speculation = f.speculation;
  turn.n = call.n;
  turn.response_cache = f.cache;
  turn.logprobs = call.logprobs;
  turn.top_logprobs = call.top_logprobs;
  call.request = messages::chat_request(1, turn);
  call.turn = std::move(turn);
  return std::nullopt;
}

Problem completion_call(const json& body, const CommonFields& f, CompletionCall& call) {
  if (!f.session.empty()) return bad_field("session", "sessions are for chat completions");
  auto p = body.find("prompt");
  std::string prompt;
  if (p != body.end() && p->is_string()) prompt = p->get<std::string>();
  else if (p != body.end() && p->is_array() && p->size() == 1 && (*p)[0].is_string()) prompt = (*p)[0].get<std::string>();
  else return bad_field("prompt", "prompt must be a string (one prompt per request)");
  bool ignore_eos = false;  // troupe's extension (benchmarks: fixed lengths)
  if (auto ie = body.find("ignore_eos"); ie != body.end() && ie->is_boolean()) ignore_eos = ie->get<bool>();
  call.request = messages::generate_request(1, prompt, f.sampling, wire::Priority::interactive, false, call.logprobs,
                                            ignore_eos, call.n, f.speculation, 0, {}, wire::ContextPolicy::server_default,
                                            f.cache, call.top_logprobs);
  return std::nullopt;
}

}  // namespace

std::variant<CompletionCall, ApiError> parse_completion(const std::string& text, bool chat, const std::string& session_header,
                                                        const std::vector<std::string>& models, int32_t max_tokens) {
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded()) return ApiError{400, "the body is not valid JSON", "", "malformed"};
  if (!body.is_object()) return ApiError{400, "the body must be a JSON object", "", "malformed"};
  CompletionCall call;
  call.chat = chat;
  CommonFields f;
  f.session = session_header;  // the body's `session` wins
  if (auto err = read_common(body, chat, models, max_tokens, call, f)) return *err;
  if (auto err = chat ? chat_call(body, std::move(f), call) : completion_call(body, f, call)) return *err;
  return call;
}

CompletionReply::CompletionReply(const CompletionCall& call, std::string id, int64_t created, const Tokenizer* tokenizer)
    : call_(call),
      id_(std::move(id)),
      created_(created),
      text_(call.n),
      finish_(call.n),
      started_(call.n, false),
      tool_streams_(call.tools ? static_cast<size_t>(call.n) : 0),
      calls_(call.n),
      tokenizer_(tokenizer),
      logprobs_(call.n) {}

CompletionReply::~CompletionReply() = default;

// One token's logprobs as chat writes them: its text, bytes, logprob and the most likely tokens.
json CompletionReply::entry(int32_t token, float logprob, const int32_t* top_ids, const float* top_lps, int32_t top) const {
  auto named = [&](int32_t id, float lp) {
    const std::string bytes = tokenizer_ && id >= 0 && static_cast<size_t>(id) < tokenizer_->size()
                                  ? tokenizer_->token_bytes(id)
                                  : std::to_string(id);
    json b = json::array();
    for (unsigned char c : bytes) b.push_back(c);
    // Bytes of a character split across tokens are not UTF-8 alone: U+FFFD in `token` (a JSON
    // round trip that replaces them), exact in `bytes`.
    const json text = json::parse(json(bytes).dump(-1, ' ', false, json::error_handler_t::replace));
    return json{{"token", text}, {"logprob", lp}, {"bytes", b}};
  };
  json e = named(token, logprob);
  json tops = json::array();
  for (int32_t k = 0; k < top; ++k) tops.push_back(named(top_ids[k], top_lps[k]));
  e["top_logprobs"] = std::move(tops);
  return e;
}

// A choice's `logprobs`: chat's {"content": [...]}, or completions' parallel
// lists (`offset`: the text's length before these tokens).
json CompletionReply::choice_logprobs(const std::vector<json>& entries, size_t offset) const {
  if (call_.chat) return {{"content", entries}, {"refusal", json()}};
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const json& e : entries) {
    tokens.push_back(e["token"]);
    lps.push_back(e["logprob"]);
    json top = json::object();
    for (const json& t : e["top_logprobs"]) top[t["token"].get<std::string>()] = t["logprob"];
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += e["token"].get<std::string>().size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// A chat stream's first chunk names the role.
void CompletionReply::start(int32_t index, std::string& sse) {
  if (!call_.chat || started_[static_cast<size_t>(index)]) return;
  sse += chunk(index, json{{"role", "assistant"}, {"content", ""}}.dump(), nullptr);
  started_[static_cast<size_t>(index)] = true;
}

std::string CompletionReply::chunk(int32_t index, const std::string& delta, const char* finish, const json* logprobs) const {
  json choice = {{"index", index}, {"finish_reason", finish ? json(finish) : json()},
                 {"logprobs", logprobs ? *logprobs : json()}};
  if (call_.chat) choice["delta"] = json::parse(delta);
  else choice["text"] = delta;
  json c = {{"id", id_}, {"object", call_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
            {"model", call_.model}, {"choices", json::array({choice})}};
  if (call_.include_usage) c["usage"] = json();
  return "data: " + c.dump() + "\n\n";
}

CompletionReply::Step CompletionReply::take(const std::string& frame, std::string& sse) {
  const auto* r = messages::check_response(frame);
  if (!r) return Step::more;
  switch (r->body_type()) {
    case wire::ResponseBody::Accepted:
      for (auto& s : tool_streams_) s.seed(r->body_as_Accepted()->tool_call_seed());
      return Step::more;
    case wire::ResponseBody::Tokens: return take_tokens(*r->body_as_Tokens(), sse);
    case wire::ResponseBody::Done: return take_done(*r->body_as_Done(), sse);
    case wire::ResponseBody::Error: {
      const auto* e = r->body_as_Error();
      error_ = api_error(e->code(), e->message() ? e->message()->str() : "");
      return Step::failed;
    }
    default: return Step::more;
  }
}

// This frame's tokens' logprobs (a token whose text is not whole yet has its own).
std::vector<json> CompletionReply::frame_logprobs(const wire::Tokens& t) const {
  std::vector<json> entries;
  if (!call_.logprobs || !t.token_ids() || !t.logprobs() || t.logprobs()->size() != t.token_ids()->size()) return entries;
  const auto top = static_cast<int32_t>(call_.top_logprobs);
  const bool tops = t.top_ids() && t.top_logprobs() && t.top_ids()->size() == t.token_ids()->size() * top &&
                    t.top_logprobs()->size() == t.top_ids()->size();
  for (uint32_t k = 0; k < t.token_ids()->size(); ++k)
    entries.push_back(entry(t.token_ids()->Get(k), t.logprobs()->Get(k), tops ? t.top_ids()->data() + k * top : nullptr,
                            tops ? t.top_logprobs()->data() + k * top : nullptr, tops ? top : 0));
  return entries;
}

CompletionReply::Step CompletionReply::take_tokens(const wire::Tokens& t, std::string& sse) {
  const int32_t i = t.sample();
  if (i < 0 || i >= call_.n) return Step::more;
  const auto at = static_cast<size_t>(i);
  const std::string piece = t.text() ? t.text()->str() : "";
  const size_t offset = text_[at].size();
  text_[at] += piece;
  const std::vector<json> entries = frame_logprobs(t);
  logprobs_[at].insert(logprobs_[at].end(), entries.begin(), entries.end());
  if (!call_.stream || (piece.empty() && entries.empty())) return Step::more;
  start(i, sse);
  std::vector<std::string> deltas;
  if (call_.tools) deltas = tool_streams_[at].take(piece);  // content and calls, apart
  else if (!piece.empty()) deltas.push_back(call_.chat ? json{{"content", piece}}.dump() : piece);
  if (deltas.empty() && !entries.empty()) deltas.push_back(call_.chat ? json{{"content", ""}}.dump() : "");
  const json lp = choice_logprobs(entries, offset);
  for (size_t k = 0; k < deltas.size(); ++k) sse += chunk(i, deltas[k], nullptr, k == 0 && !entries.empty() ? &lp : nullptr);
  return Step::more;
}

CompletionReply::Step CompletionReply::take_done(const wire::Done& d, std::string& sse) {
  const int32_t i = d.sample();
  if (i < 0 || i >= call_.n) return Step::more;
  const auto at = static_cast<size_t>(i);
  finish_[at] = finish_name(d.finish_reason());
  if (const auto* u = d.usage()) {
    prompt_tokens_ = u->prompt_tokens();  // the samples share one prompt
    cached_tokens_ = u->cached_prompt_tokens();
    completion_tokens_ += u->completion_tokens();
  }
  if (const auto* calls = d.tool_calls())
    for (const auto* c : *calls)
      calls_[at].push_back({c->id() ? c->id()->str() : "", c->name() ? c->name()->str() : "",
                            c->arguments() ? c->arguments()->str() : ""});
  if (call_.stream) {
    start(i, sse);
    if (call_.tools)
      for (const std::string& delta : tool_streams_[at].finish()) sse += chunk(i, delta, nullptr);
    sse += chunk(i, call_.chat ? "{}" : "", finish_[at].c_str());
  }
  return ++done_ >= call_.n ? Step::done : Step::more;
}

// A chat answer: its text, or (tools) the content before its calls and the calls.
json CompletionReply::message(size_t i) const {
  if (!call_.tools) return {{"role", "assistant"}, {"content", text_[i]}};
  const std::string content = answer_content(text_[i]);
  json m = {{"role", "assistant"}, {"content", content.empty() && !calls_[i].empty() ? json() : json(content)}};
  if (!calls_[i].empty()) {
    json calls = json::array();
    for (const auto& c : calls_[i])
      calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

std::string CompletionReply::whole() const {
  json choices = json::array();
  for (int32_t i = 0; i < call_.n; ++i) {
    json c = {{"index", i}, {"finish_reason", finish_[static_cast<size_t>(i)]},
              {"logprobs", call_.logprobs ? choice_logprobs(logprobs_[static_cast<size_t>(i)], 0) : json()}};
    if (call_.chat) c["message"] = message(static_cast<size_t>(i));
    else c["text"] = text_[static_cast<size_t>(i)];
    choices.push_back(std::move(c));
  }
  json usage = {{"prompt_tokens", prompt_tokens_}, {"completion_tokens", completion_tokens_},
                {"total_tokens", prompt_tokens_ + completion_tokens_},
                {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
  return json{{"id", id_}, {"object", call_.chat ? "chat.completion" : "text_completion"}, {"created", created_},
              {"model", call_.model}, {"choices", choices}, {"usage", usage}}
      .dump();
}

std::string CompletionReply::sse_end() const {
  std::string out;
  if (call_.include_usage) {
    json usage = {{"prompt_tokens", prompt_tokens_}, {"completion_tokens", completion_tokens_},
                  {"total_tokens", prompt_tokens_ + completion_tokens_},
                  {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
    json c = {{"id", id_}, {"object", call_.chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
              {"model", call_.model}, {"choices", json::array()}, {"usage", usage}};
    out += "data: " + c.dump() + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

}  // namespace troupe::service
