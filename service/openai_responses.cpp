#include "service/openai_responses.h"

#include <cstdio>
#include <random>
#include <span>

#include "messages/client_frames.h"
#include "service/tool_gate.h"

namespace troupe::service {
namespace {

using json = nlohmann::ordered_json;

// An item's text: a string, or its parts' texts (input_text, output_text).
std::optional<ApiError> item_text(const json& content, const std::string& where, std::string& out) {
  if (content.is_string()) return out = content.get<std::string>(), std::nullopt;
  if (content.is_null()) return std::nullopt;
  if (!content.is_array()) return bad_field(where, "content must be a string or an array of parts");
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const std::string at = where + "[" + std::to_string(k) + "]";
    const std::string type = string_field(part, "type");
    if (type == "input_text" || type == "output_text" || type == "text") {
      if (!part.contains("text") || !part["text"].is_string()) return bad_field(at + ".text", "a text part needs its text");
      out += part["text"].get<std::string>();
    } else if (type == "refusal") {
      out += string_field(part, "refusal");
    } else {
      return bad_field(at + ".type", "troupe's models read text: a part of type '" + type + "' is not supported");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> required_string(const json& item, const char* key, const std::string& where, std::string& out) {
  auto it = item.find(key);
  if (it == item.end() || !it->is_string() || it->get<std::string>().empty())
    return bad_field(where + "." + key, std::string(key) + " must be a non-empty string");
  out = it->get<std::string>();
  return std::nullopt;
}

// Input items as chat messages: messages as they are (developer is system),
// a call joined to the assistant message before it (one answer may write
// text and calls), a call's output as a tool message.
std::optional<ApiError> read_input(const json& input, json& messages) {
  if (input.is_string()) return messages.push_back({{"role", "user"}, {"content", input}}), std::nullopt;
  if (!input.is_array() || input.empty()) return bad_field("input", "input must be a string or a non-empty array of items");
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return bad_field(where, "an input item must be an object");
    const std::string type = string_field(item, "type", item.contains("role") ? "message" : "");
    if (type == "message") {
      std::string role = string_field(item, "role");
      if (role == "developer") role = "system";
      if (role != "user" && role != "assistant" && role != "system")
        return bad_field(where + ".role", "role must be user, assistant, system or developer");
      std::string text;
      if (auto e = item_text(item.contains("content") ? item["content"] : json(), where + ".content", text)) return e;
      messages.push_back({{"role", role}, {"content", text}});
    } else if (type == "function_call") {
      std::string name, call_id, arguments;
      if (auto e = required_string(item, "name", where, name)) return e;
      if (auto e = required_string(item, "call_id", where, call_id)) return e;
      if (auto e = required_string(item, "arguments", where, arguments)) return e;
      if (messages.empty() || messages.back()["role"] != "assistant")
        messages.push_back({{"role", "assistant"}, {"content", nullptr}});
      messages.back()["tool_calls"].push_back(
          {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}});
    } else if (type == "function_call_output") {
      std::string call_id, output;
      if (auto e = required_string(item, "call_id", where, call_id)) return e;
      if (auto e = item_text(item.contains("output") ? item["output"] : json(), where + ".output", output)) return e;
      messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", output}});
    } else if (type == "item_reference") {
      return bad_field(where + ".type", "item_reference is not supported: continue a chain with previous_response_id");
    } else {
      return bad_field(where + ".type", "an input item of type '" + type + "' is not supported");
    }
  }
  return std::nullopt;
}

// Function tools, from the Responses layout ({type, name, parameters}) to chat's.
std::optional<ApiError> read_tools(const json& body, json& chat) {
  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    if (!t->is_array()) return bad_field("tools", "tools must be an array");
    json tools = json::array();
    for (size_t i = 0; i < t->size(); ++i) {
      const json& tool = (*t)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object()) return bad_field(where, "a tool must be an object");
      const std::string type = string_field(tool, "type");
      if (type != "function")
        return bad_field(where + ".type", "troupe runs function tools; '" + type + "' is not one (hosted tools are OpenAI's)");
      if (!tool.contains("name") || !tool["name"].is_string())
        return bad_field(where + ".name", "a function tool needs its name");
      json function = json::object();
      for (const char* key : {"name", "description", "parameters", "strict"})
        if (tool.contains(key)) function[key] = tool[key];
      tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    chat["tools"] = std::move(tools);
  }
  if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
    if (string_field(*c, "type") == "function" && c->contains("name"))
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*c)["name"]}}}};
    else if (c->is_string())
      chat["tool_choice"] = *c;
    else
      return bad_field("tool_choice", "tool_choice must be auto, none, required or {\"type\": \"function\", \"name\": ...}");
  }
  return std::nullopt;
}

// text.format as chat's response_format.
std::optional<ApiError> read_format(const json& body, json& chat) {
  auto t = body.find("text");
  if (t == body.end() || t->is_null()) return std::nullopt;
  if (!t->is_object()) return bad_field("text", "text must be an object");
  auto f = t->find("format");
  if (f == t->end() || f->is_null()) return std::nullopt;
  const std::string type = string_field(*f, "type");
  if (type == "text") return std::nullopt;
  if (type == "json_object") return chat["response_format"] = {{"type", "json_object"}}, std::nullopt;
  if (type != "json_schema") return bad_field("text.format.type", "text.format.type must be text, json_object or json_schema");
  json schema = json::object();
  for (const char* key : {"name", "description", "schema", "strict"})
    if (f->contains(key)) schema[key] = (*f)[key];
  chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  return std::nullopt;
}

// A chat field's name in the error, as the Responses body names it.
ApiError renamed(ApiError e) {
  static const std::pair<std::string_view, std::string_view> names[] = {
      {"messages", "input"}, {"max_tokens", "max_output_tokens"}, {"response_format.json_schema", "text.format"},
      {"response_format", "text.format"}, {"logprobs", "include"}};
  for (const auto& [chat, ours] : names)
    if (e.param.starts_with(chat)) {
      e.param = std::string(ours) + e.param.substr(chat.size());
      break;
    }
  if (e.message.starts_with("messages")) e.message.replace(0, 8, "input");
  // A tool's fields sit in the tool itself, not under "function".
  for (std::string* text : {&e.param, &e.message})
    for (size_t f; (f = text->find("].function")) != std::string::npos;) text->erase(f + 1, 9);
  return e;
}

// The settings a Response object repeats: as asked, or the defaults.
json echo(const json& body, const std::string& model, bool store) {
  auto given = [&](const char* key, json fallback) {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? fallback : *it;
  };
  return {{"model", model},
          {"instructions", given("instructions", nullptr)},
          {"max_output_tokens", given("max_output_tokens", nullptr)},
          {"parallel_tool_calls", given("parallel_tool_calls", true)},
          {"previous_response_id", given("previous_response_id", nullptr)},
          {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
          {"store", store},
          {"temperature", given("temperature", 1.0)},
          {"text", given("text", json{{"format", {{"type", "text"}}}})},
          {"tool_choice", given("tool_choice", "auto")},
          {"tools", given("tools", json::array())},
          {"top_logprobs", given("top_logprobs", 0)},
          {"top_p", given("top_p", 1.0)},
          {"truncation", given("truncation", "disabled")},
          {"metadata", given("metadata", json::object())},
          {"user", given("user", nullptr)},
          {"background", false},
          {"service_tier", "default"}};
}

// What a finished answer holds, from a chat completion or a stored turn.
struct Outcome {
  std::string text;
  std::vector<messages::ToolCallFields> calls;
  json logprobs = json::array();
  std::string finish = "stop";
  int32_t input_tokens = 0, cached_tokens = 0, output_tokens = 0;
};

std::string message_id(const std::string& response_id) { return "msg_" + response_id.substr(5); }

json text_part(const std::string& text, const json& logprobs) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", logprobs}};
}

json call_item(const messages::ToolCallFields& c, const char* status) {
  return {{"type", "function_call"}, {"id", "fc_" + c.id},  {"call_id", c.id},
          {"name", c.name},          {"arguments", c.arguments}, {"status", status}};
}

json response_object(const std::string& id, int64_t created, const char* status, const json& settings) {
  json r = {{"id", id},          {"object", "response"},   {"created_at", created}, {"status", status},
            {"error", nullptr},  {"incomplete_details", nullptr}, {"output", json::array()}};
  for (const auto& [k, v] : settings.items()) r[k] = v;
  r["usage"] = nullptr;
  return r;
}

json finished(const std::string& id, int64_t created, const json& settings, const Outcome& o) {
  const bool cut = o.finish == "length";
  json r = response_object(id, created, cut ? "incomplete" : "completed", settings);
  if (cut) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  if (!o.text.empty() || o.calls.empty())
    r["output"].push_back({{"type", "message"},
                           {"id", message_id(id)},
                           {"status", cut ? "incomplete" : "completed"},
                           {"role", "assistant"},
                           {"content", json::array({text_part(o.text, o.logprobs)})}});
  for (const auto& c : o.calls) r["output"].push_back(call_item(c, "completed"));
  r["usage"] = {{"input_tokens", o.input_tokens},
                {"input_tokens_details", {{"cached_tokens", o.cached_tokens}}},
                {"output_tokens", o.output_tokens},
                {"output_tokens_details", {{"reasoning_tokens", 0}}},
                {"total_tokens", o.input_tokens + o.output_tokens}};
  return r;
}

CompletionCall streaming(CompletionCall c) {
  c.stream = true;  // the chat chunks are what the events are made of
  c.include_usage = false;
  return c;
}

// A stored chain's messages, each with the turn it belongs to.
std::vector<std::pair<ChatMessage, int32_t>> chain_messages(const wire::Session& s) {
  std::vector<std::pair<ChatMessage, int32_t>> out;
  const auto* m = s.messages();
  const auto* per = s.turn_messages();
  if (!m || !per) return out;
  uint32_t at = 0;
  for (uint32_t t = 0; t < per->size(); ++t)
    for (int32_t k = 0; k < per->Get(t) && at < m->size(); ++k, ++at)
      out.push_back({ChatMessage{messages::text_of(m->Get(at)->role()), messages::text_of(m->Get(at)->content())}, static_cast<int32_t>(t)});
  return out;
}

}  // namespace

std::string ResponseId::str() const { return turn < 0 ? chain : chain + "_" + std::to_string(turn); }

std::optional<ResponseId> read_response_id(std::string_view id) {
  constexpr size_t kChain = 5 + 24;  // "resp_" and the hex
  if (id.size() < kChain || !id.starts_with("resp_")) return std::nullopt;
  for (char c : id.substr(5, 24))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  ResponseId r{std::string(id.substr(0, kChain)), -1};
  if (id.size() == kChain) return r;
  const std::string_view turn = id.substr(kChain + 1);
  if (id[kChain] != '_' || turn.empty() || turn.size() > 9) return std::nullopt;
  int32_t n = 0;
  for (char c : turn) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  r.turn = n;
  return r;
}

std::string new_chain() {
  static thread_local std::mt19937_64 random(std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32));
  char buf[32];
  std::snprintf(buf, sizeof buf, "resp_%016llx%08llx", static_cast<unsigned long long>(random()),
                static_cast<unsigned long long>(random() & 0xffffffffull));
  return buf;
}

namespace {

// What troupe does not do is refused, never ignored.
std::optional<ApiError> refuse_unsupported(const json& body) {
  if (auto b = body.find("background"); b != body.end() && b->is_boolean() && b->get<bool>())
    return bad_field("background", "background responses are not supported; troupe's batch jobs run work in the background");
  for (const char* key : {"conversation", "prompt"})
    if (auto it = body.find(key); it != body.end() && !it->is_null())
      return bad_field(key, std::string(key) + " is not supported: continue a chain with previous_response_id");
  return std::nullopt;
}

// The fields a chat completion reads as they are, renamed where the APIs differ.
std::optional<ApiError> read_sampling(const json& body, json& chat) {
  for (const char* key : {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "seed", "top_k", "min_p",
                          "repeat_penalty", "presence_penalty", "frequency_penalty", "troupe_speculation",
                          "troupe_accept_ratio"})
    if (auto it = body.find(key); it != body.end()) chat[key] = *it;
  if (auto it = body.find("max_output_tokens"); it != body.end()) chat["max_tokens"] = *it;
  // Logprobs: asked by `include`, their number by top_logprobs.
  if (auto inc = body.find("include"); inc != body.end() && !inc->is_null()) {
    if (!inc->is_array()) return bad_field("include", "include must be an array");
    for (const json& x : *inc)
      if (x == "message.output_text.logprobs") chat["logprobs"] = true;
  }
  if (auto tl = body.find("top_logprobs"); tl != body.end() && !tl->is_null()) {
    chat["top_logprobs"] = *tl;
    if (tl->is_number() && tl->get<double>() > 0) chat["logprobs"] = true;
  }
  return std::nullopt;
}

// The chain's own fields: store, previous_response_id, metadata.
std::optional<ApiError> read_chain(const json& body, ResponsesCall& call) {
  if (auto s = body.find("store"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) return bad_field("store", "store must be a boolean");
    call.store = s->get<bool>();
  }
  if (auto p = body.find("previous_response_id"); p != body.end() && !p->is_null()) {
    if (!p->is_string() || p->get<std::string>().empty())
      return bad_field("previous_response_id", "previous_response_id must be a response's id");
    call.previous = p->get<std::string>();
  }
  if (auto m = body.find("metadata"); m != body.end() && !m->is_null() && (!m->is_object() || m->size() > 16))
    return bad_field("metadata", "metadata must be an object of at most 16 keys");
  return std::nullopt;
}

// instructions and input, as the chat's messages.
std::optional<ApiError> read_messages(const json& body, json& chat) {
  json messages = json::array();
  if (auto in = body.find("instructions"); in != body.end() && !in->is_null()) {
    if (!in->is_string()) return bad_field("instructions", "instructions must be a string");
    messages.push_back({{"role", "system"}, {"content", *in}});
  }
  if (!body.contains("input")) return bad_field("input", "input is required");
  if (auto e = read_input(body["input"], messages)) return e;
  chat["messages"] = std::move(messages);
  return std::nullopt;
}

}  // namespace

std::variant<ResponsesCall, ApiError> parse_responses(const std::string& text, const std::vector<std::string>& models,
                                                      int32_t max_tokens) {
  const json body = json::parse(text, nullptr, false);
  if (body.is_discarded()) return ApiError{400, "the body is not valid JSON", "", "malformed"};
  if (!body.is_object()) return ApiError{400, "the body must be a JSON object", "", "malformed"};
  if (auto e = refuse_unsupported(body)) return *e;
  ResponsesCall call;
  json chat = json::object();
  if (auto e = read_sampling(body, chat)) return *e;
  if (auto e = read_chain(body, call)) return *e;
  if (auto e = read_messages(body, chat)) return *e;
  if (auto e = read_tools(body, chat)) return *e;
  if (auto e = read_format(body, chat)) return *e;
  auto parsed = parse_completion(chat.dump(), true, "", models, max_tokens);
  if (auto* e = std::get_if<ApiError>(&parsed)) return renamed(*e);
  call.chat = std::get<CompletionCall>(std::move(parsed));
  call.echo = echo(body, call.chat.model, call.store);
  return call;
}

std::vector<messages::ChatMessageFields> chain_history(const wire::Session& chain, int32_t through, ChatFormat format) {
  std::vector<messages::ChatMessageFields> out;
  std::vector<ChatMessage> before;
  std::vector<std::string> open_calls;  // the last answer's calls, for the results after it
  size_t answered = 0;
  for (auto& [m, turn] : chain_messages(chain)) {
    if (turn > through) break;
    if (m.role == "assistant") {
      auto calls = answer_calls(format, m.content, conversation_seed(before));
      open_calls.clear();
      answered = 0;
      for (const auto& c : calls) open_calls.push_back(c.id);
      out.emplace_back(m.role, calls.empty() ? m.content : answer_content(m.content), std::move(calls));
    } else if (m.role == "tool") {
      const std::string id = open_calls.empty() ? std::string() : open_calls[std::min(answered++, open_calls.size() - 1)];
      out.emplace_back(m.role, m.content, std::vector<messages::ToolCallFields>{}, id);
    } else {
      out.emplace_back(m.role, m.content);
    }
    before.push_back(std::move(m));
  }
  return out;
}

std::optional<std::string> stored_response(const wire::Session& chain, const ResponseId& id, ChatFormat format) {
  const auto* per = chain.turn_messages();
  if (id.turn < 0 || !per || static_cast<uint32_t>(id.turn) >= per->size()) return std::nullopt;
  std::vector<ChatMessage> before;
  std::optional<ChatMessage> answer;
  for (auto& [m, turn] : chain_messages(chain)) {
    if (turn > id.turn) break;
    if (answer) before.push_back(*answer);
    answer = std::move(m);
  }
  if (!answer || answer->role != "assistant") return std::nullopt;
  Outcome o;
  o.calls = answer_calls(format, answer->content, conversation_seed(before));
  o.text = o.calls.empty() ? answer->content : answer_content(answer->content);
  int64_t created = 0;
  if (const auto* usage = chain.turn_usage(); usage && static_cast<uint32_t>(id.turn) < usage->size()) {
    const wire::TurnUsage* u = usage->Get(static_cast<uint32_t>(id.turn));
    o.input_tokens = u->prompt_tokens(), o.output_tokens = u->completion_tokens();
    const auto r = u->finish_reason();
    o.finish = r == wire::FinishReason::length || r == wire::FinishReason::context_full ? "length" : "stop";
    created = u->time_ms() / 1000;
  }
  const json settings = {{"model", chain.summary() ? messages::text_of(chain.summary()->model()) : ""},
                         {"previous_response_id", id.turn > 0 ? json(ResponseId{id.chain, id.turn - 1}.str()) : json()},
                         {"store", true}};
  return finished(id.str(), created, settings, o).dump();
}

ResponsesReply::ResponsesReply(const ResponsesCall& call, std::string id, int64_t created, const Tokenizer* tokenizer)
    : call_(call), chat_(streaming(call.chat), id, created, tokenizer), id_(std::move(id)), created_(created) {}

void ResponsesReply::event(std::string& sse, const char* type, json body) {
  json e = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [k, v] : body.items()) e[k] = std::move(v);
  sse += "event: ";
  sse += type;
  sse += "\ndata: " + e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

json ResponsesReply::object(const char* status) const { return response_object(id_, created_, status, call_.echo); }

FrameReply::Step ResponsesReply::take(const std::string& frame, std::string& sse) {
  std::string chunks;
  const Step step = chat_.take(frame, chunks);
  if (step == Step::failed) error_ = renamed(chat_.error());
  if (!call_.chat.stream || step == Step::failed) return step;
  if (sequence_ == 0) {
    event(sse, "response.created", {{"response", object("in_progress")}});
    event(sse, "response.in_progress", {{"response", object("in_progress")}});
  }
  for (size_t at = 0; (at = chunks.find("data: ", at)) != std::string::npos;) {
    const size_t end = chunks.find("\n\n", at);
    const json c = json::parse(chunks.substr(at + 6, end - at - 6), nullptr, false);
    at = end == std::string::npos ? chunks.size() : end;
    if (c.is_object()) chunk(c, sse);
  }
  if (step == Step::done) {
    close_items(sse);
    const json r = finished_response();
    event(sse, r["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", r}});
  }
  return step;
}

// One chat chunk's delta as the events of the items it opens and extends.
void ResponsesReply::chunk(const json& c, std::string& sse) {
  if (!c.contains("choices") || c["choices"].empty()) return;
  const json& choice = c["choices"][0];
  const json& delta = choice["delta"];
  if (auto t = delta.find("content"); t != delta.end() && t->is_string() && !t->get<std::string>().empty()) {
    if (message_ < 0) {
      message_ = static_cast<int32_t>(items_.size());
      items_.push_back({{"id", message_id(id_)}, {"type", "message"}, {"status", "in_progress"}, {"role", "assistant"},
                        {"content", json::array()}, {"text", ""}});
      json item = items_.back();
      item.erase("text");
      event(sse, "response.output_item.added", {{"output_index", message_}, {"item", item}});
      event(sse, "response.content_part.added", {{"item_id", message_id(id_)}, {"output_index", message_},
                                                 {"content_index", 0}, {"part", text_part("", json::array())}});
    }
    items_[static_cast<size_t>(message_)]["text"] = items_[static_cast<size_t>(message_)]["text"].get<std::string>() + t->get<std::string>();
    json lp = choice.contains("logprobs") && choice["logprobs"].is_object() ? choice["logprobs"].value("content", json::array())
                                                                           : json::array();
    event(sse, "response.output_text.delta", {{"item_id", message_id(id_)}, {"output_index", message_},
                                              {"content_index", 0}, {"delta", *t}, {"logprobs", lp}});
  }
  if (auto calls = delta.find("tool_calls"); calls != delta.end() && calls->is_array())
    for (const json& tc : *calls) {
      if (tc.contains("id")) {  // a call opens
        close_items(sse);
        open_call_ = static_cast<int32_t>(items_.size());
        const std::string name = tc["function"].value("name", "");
        items_.push_back(call_item({tc["id"].get<std::string>(), name, ""}, "in_progress"));
        event(sse, "response.output_item.added", {{"output_index", open_call_}, {"item", items_.back()}});
      }
      const std::string args = tc.contains("function") ? tc["function"].value("arguments", "") : "";
      if (open_call_ < 0 || args.empty()) continue;
      json& item = items_[static_cast<size_t>(open_call_)];
      item["arguments"] = item["arguments"].get<std::string>() + args;
      event(sse, "response.function_call_arguments.delta", {{"item_id", item["id"]}, {"output_index", open_call_}, {"delta", args}});
    }
}

// The open message and call end: their done events, with what they hold.
void ResponsesReply::close_items(std::string& sse) {
  if (message_ >= 0) {
    json& item = items_[static_cast<size_t>(message_)];
    const std::string text = item["text"].get<std::string>();
    item.erase("text");
    const json part = text_part(text, json::array());
    event(sse, "response.output_text.done",
          {{"item_id", item["id"]}, {"output_index", message_}, {"content_index", 0}, {"text", text}, {"logprobs", json::array()}});
    event(sse, "response.content_part.done", {{"item_id", item["id"]}, {"output_index", message_}, {"content_index", 0}, {"part", part}});
    item["status"] = "completed";
    item["content"] = json::array({part});
    event(sse, "response.output_item.done", {{"output_index", message_}, {"item", item}});
    message_ = -1;
  }
  if (open_call_ >= 0) {
    json& item = items_[static_cast<size_t>(open_call_)];
    event(sse, "response.function_call_arguments.done",
          {{"item_id", item["id"]}, {"output_index", open_call_}, {"name", item["name"]}, {"arguments", item["arguments"]}});
    item["status"] = "completed";
    event(sse, "response.output_item.done", {{"output_index", open_call_}, {"item", item}});
    open_call_ = -1;
  }
}

std::string ResponsesReply::whole() const {
  return finished_response().dump(-1, ' ', false, json::error_handler_t::replace);
}

json ResponsesReply::finished_response() const {
  const json chat = json::parse(chat_.whole());
  const json& choice = chat["choices"][0];
  const json& message = choice["message"];
  Outcome o;
  if (message["content"].is_string()) o.text = message["content"].get<std::string>();
  if (auto calls = message.find("tool_calls"); calls != message.end())
    for (const json& c : *calls)
      o.calls.push_back({c["id"].get<std::string>(), c["function"]["name"].get<std::string>(),
                         c["function"]["arguments"].get<std::string>()});
  if (choice["logprobs"].is_object()) o.logprobs = choice["logprobs"].value("content", json::array());
  o.finish = choice["finish_reason"].is_string() ? choice["finish_reason"].get<std::string>() : "stop";
  o.input_tokens = chat["usage"]["prompt_tokens"].get<int32_t>();
  o.cached_tokens = chat["usage"]["prompt_tokens_details"]["cached_tokens"].get<int32_t>();
  o.output_tokens = chat["usage"]["completion_tokens"].get<int32_t>();
  return finished(id_, created_, call_.echo, o);
}

std::string ResponsesReply::sse_error() const {
  json r = object("failed");
  r["error"] = {{"code", error().code}, {"message", error().message}};
  json e = {{"type", "response.failed"}, {"sequence_number", sequence_}, {"response", r}};
  return "event: response.failed\ndata: " + e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace troupe::service
