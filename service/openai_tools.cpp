#include "service/openai_tools.h"

#include <nlohmann/json.hpp>

#include "service/openai_api.h"
#include "service/tool_gate.h"

namespace troupe::service {
namespace {

using json = nlohmann::ordered_json;

// The tool format the HTTP side reads calls in. The service refuses tools on
// a model without one, so every answer with calls that reaches here is in
// the one format troupe knows (engine/chat_tools.h).
constexpr ChatFormat kToolFormat = ChatFormat::chatml;

ToolsError bad_tools(const std::string& param, const std::string& message) { return {param, message}; }

std::optional<ToolsError> content_of(const json& c, size_t index, std::string& out) {
  out.clear();
  if (c.is_null()) return std::nullopt;
  if (c.is_string()) return out = c.get<std::string>(), std::nullopt;
  if (!c.is_array()) return bad_tools("messages", "message " + std::to_string(index) + ": content must be a string or text parts");
  for (const auto& part : c) {
    if (!part.is_object() || string_field(part, "type") != "text" || !part.contains("text") || !part["text"].is_string())
      return bad_tools("messages", "message " + std::to_string(index) + ": only text content parts are supported");
    out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

std::optional<ToolsError> read_openai_tools(const json& body, messages::ChatToolsFields& into) {
  into = {};
  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    if (!t->is_array()) return bad_tools("tools", "tools must be an array of tool objects");
    for (const auto& tool : *t) {
      if (!tool.is_object()) return bad_tools("tools", "each tool must be an object");
      into.tools.push_back(tool.dump());
    }
  }
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) return bad_tools("parallel_tool_calls", "parallel_tool_calls must be a boolean");
    into.parallel = p->get<bool>();
  }
  auto c = body.find("tool_choice");
  if (c == body.end() || c->is_null()) return std::nullopt;
  if (c->is_string()) {
    const std::string v = c->get<std::string>();
    if (v == "auto") into.choice = wire::ToolChoice::auto_;
    else if (v == "none") into.choice = wire::ToolChoice::none;
    else if (v == "required") into.choice = wire::ToolChoice::required;
    else return bad_tools("tool_choice", "tool_choice must be auto, none, required or {\"type\": \"function\", ...}");
  } else if (c->is_object() && c->contains("function") && (*c)["function"].is_object() &&
             (*c)["function"].contains("name") && (*c)["function"]["name"].is_string()) {
    into.choice = wire::ToolChoice::named;
    into.name = (*c)["function"]["name"].get<std::string>();
  } else {
    return bad_tools("tool_choice", "tool_choice must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (into.tools.empty() && into.choice != wire::ToolChoice::auto_ && into.choice != wire::ToolChoice::none)
    return bad_tools("tool_choice", "tool_choice " + std::string(into.choice == wire::ToolChoice::named ? "naming a function" : "required") +
                                  " needs tools");
  return std::nullopt;
}

namespace {

// An assistant message's tool_calls, as OpenAI writes them.
std::optional<ToolsError> read_message_calls(const json& calls, const std::string& at,
                                             std::vector<messages::ToolCallFields>& into) {
  if (!calls.is_array()) return bad_tools("messages", at + ": tool_calls must be an array");
  for (const auto& c : calls) {
    const auto fn = c.is_object() ? c.find("function") : c.end();
    if (!c.is_object() || fn == c.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      return bad_tools("messages", at + ": each tool call needs function.name");
    messages::ToolCallFields call;
    call.id = c.contains("id") && c["id"].is_string() ? c["id"].get<std::string>() : "";
    call.name = (*fn)["name"].get<std::string>();
    const json args = fn->contains("arguments") ? (*fn)["arguments"] : json("{}");
    // OpenAI's arguments are a JSON text; some clients send the object.
    call.arguments = args.is_string() ? args.get<std::string>() : args.dump();
    into.push_back(std::move(call));
  }
  return std::nullopt;
}

}  // namespace

std::optional<ToolsError> read_openai_message(const json& m, size_t index, messages::ChatMessageFields& into) {
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) return bad_tools("messages", "each message needs a role");
  into = {};
  into.role = m["role"].get<std::string>();
  if (into.role == "developer") into.role = "system";
  if (auto err = content_of(m.contains("content") ? m["content"] : json(), index, into.content)) return err;
  const std::string at = "message " + std::to_string(index);
  if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
    if (into.role != "assistant") return bad_tools("messages", at + ": only an assistant message has tool_calls");
    if (auto err = read_message_calls(*calls, at, into.tool_calls)) return err;
  }
  if (into.role == "tool") {
    const auto id = m.find("tool_call_id");
    if (id == m.end() || !id->is_string() || id->get<std::string>().empty())
      return bad_tools("messages", at + ": a tool message needs the tool_call_id of the call it answers");
    into.tool_call_id = id->get<std::string>();
  }
  // troupe's extension: a session keeps it verbatim (docs/HTTP.md).
  if (auto pinned = m.find("pinned"); pinned != m.end() && !pinned->is_null()) {
    if (!pinned->is_boolean()) return bad_tools("messages", at + ": pinned is true or false");
    into.pinned = pinned->get<bool>();
  }
  return std::nullopt;
}

OpenAiToolStream::OpenAiToolStream() : stream_(kToolFormat) {}

std::vector<std::string> OpenAiToolStream::take(std::string_view piece) {
  text_.append(piece);
  return deltas(stream_.take(piece));
}

std::vector<std::string> OpenAiToolStream::finish() { return deltas(stream_.finish()); }

std::vector<std::string> OpenAiToolStream::deltas(const std::vector<ToolCallStream::Event>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    switch (e.kind) {
      case ToolCallStream::Event::Kind::content: out.push_back(json{{"content", e.text}}.dump()); break;
      case ToolCallStream::Event::Kind::call: {
        const std::string id = tool_call_id(seed_, std::string_view(text_).substr(0, e.offset), static_cast<size_t>(e.index));
        json call = {{"index", e.index}, {"id", id}, {"type", "function"}, {"function", {{"name", e.text}, {"arguments", ""}}}};
        out.push_back(json{{"tool_calls", json::array({call})}}.dump());
        break;
      }
      case ToolCallStream::Event::Kind::arguments: {
        json call = {{"index", e.index}, {"function", {{"arguments", e.text}}}};
        out.push_back(json{{"tool_calls", json::array({call})}}.dump());
        break;
      }
    }
  }
  return out;
}

std::string answer_content(const std::string& text) { return parse_tool_calls(kToolFormat, text).content; }

}  // namespace troupe::service
