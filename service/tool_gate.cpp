#include "service/tool_gate.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <set>

#include "engine/grammar/constraint.h"
#include "engine/grammar/json_schema.h"

namespace troupe::service {
namespace {

using ojson = nlohmann::ordered_json;

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

ToolChoice choice_of(wire::ToolChoice c) {
  switch (c) {
    case wire::ToolChoice::none: return ToolChoice::none;
    case wire::ToolChoice::required: return ToolChoice::required;
    case wire::ToolChoice::named: return ToolChoice::named;
    default: return ToolChoice::auto_;
  }
}

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The seed of a conversation one message longer.
uint64_t seed_with(uint64_t h, const ChatMessage& m) {
  h = fnv1a(m.role, h);
  h = fnv1a(std::string_view("\0", 1), h);
  h = fnv1a(m.content, h);
  return fnv1a(std::string_view("\0", 1), h);
}

}  // namespace

std::optional<std::string> read_tools(const wire::ChatTurn& t, ChatTools& out) {
  out = {};
  out.choice = choice_of(t.tool_choice());
  out.name = t.tool_name() ? t.tool_name()->str() : "";
  out.parallel = t.parallel_tool_calls();
  if (!t.tools()) return std::nullopt;
  std::set<std::string> names;
  for (uint32_t i = 0; i < t.tools()->size(); ++i) {
    const std::string field = "tools[" + std::to_string(i) + "]";
    const std::string text = t.tools()->Get(i)->str();
    const ojson tool = ojson::parse(text, nullptr, false);
    if (tool.is_discarded() || !tool.is_object()) return field + ": not a JSON object";
    if (const auto type = tool.find("type"); type != tool.end() && *type != "function")  // value() throws on a number
      return field + ".type: only function tools are supported";
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) return field + ".function: missing (an object with name and parameters)";
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || !valid_name(name->get<std::string>()))
      return field + ".function.name: must be 1 to 64 letters, digits, '_' or '-'";
    ToolSpec spec;
    spec.name = name->get<std::string>();
    if (!names.insert(spec.name).second) return field + ".function.name: '" + spec.name + "' is given twice";
    if (const auto d = fn->find("description"); d != fn->end() && d->is_string()) spec.description = d->get<std::string>();
    if (const auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
      if (!p->is_object()) return field + ".function.parameters: must be a JSON Schema object";
      spec.parameters = p->dump();
    }
    spec.json = text;
    out.specs.push_back(std::move(spec));
  }
  if (out.choice == ToolChoice::named && !names.count(out.name))
    return "tool_choice: names '" + out.name + "', which is not among the tools";
  return std::nullopt;
}

std::optional<std::string> read_messages(const wire::ChatTurn& t, ChatFormat format, std::vector<ChatMessage>& chat,
                                         std::vector<std::string>& call_ids, std::vector<std::string>& results) {
  for (uint32_t i = 0; i < t.messages()->size(); ++i) {
    const auto* m = t.messages()->Get(i);
    ChatMessage cm{m->role()->str(), m->content()->str()};
    if (m->tool_calls() && m->tool_calls()->size() > 0) {
      std::vector<ToolCall> calls;
      for (const auto* c : *m->tool_calls()) {
        calls.push_back({c->id() ? c->id()->str() : "", c->name()->str(), c->arguments()->str()});
        if (!calls.back().id.empty()) call_ids.push_back(calls.back().id);
      }
      try {
        cm.content = assistant_text(format, cm.content, calls);
      } catch (const std::invalid_argument& e) {
        return "messages[" + std::to_string(i) + "].tool_calls: " + e.what();
      }
    }
    if (cm.role == "tool") {
      if (!supports_tools(format))
        return "messages[" + std::to_string(i) + "]: a tool result, and this model's chat format (" +
               std::string(chat_format_name(format)) + ") has no tool format";
      results.push_back(m->tool_call_id() ? m->tool_call_id()->str() : "");
    }
    chat.push_back(std::move(cm));
  }
  return std::nullopt;
}

std::optional<std::string> lower_tools(const ChatTools& tools, ChatFormat format, messages::SamplingFields& s,
                                       grammar::GrammarCache& cache) {
  if (!tools.active()) return std::nullopt;
  if (!supports_tools(format))
    return "tools: this model's chat format (" + std::string(chat_format_name(format)) +
           ") has no tool format (docs/TOOLS.md lists the formats that do)";
  try {
    // With a response format (lowered already): its sentence or calls; a
    // required or named call leaves it nothing to format.
    std::string gbnf = tool_call_grammar(format, tools.specs, tools.choice, tools.name, tools.parallel, s.grammar);
    cache.get(gbnf);
    s.grammar = std::move(gbnf);
  } catch (const grammar::SchemaError& e) {
    return std::string("tools: ") + e.what();
  } catch (const std::invalid_argument& e) {
    return std::string("tools: ") + e.what();
  }
  return std::nullopt;
}

uint64_t conversation_seed(std::span<const ChatMessage> messages) {
  uint64_t h = fnv1a("troupe tool calls");
  for (const ChatMessage& m : messages) h = seed_with(h, m);
  return h;
}

std::string tool_call_id(uint64_t seed, std::string_view before, size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "call_%016llx%02zx", static_cast<unsigned long long>(fnv1a(before, seed)), index % 256);
  return buf;
}

std::vector<messages::ToolCallFields> answer_calls(ChatFormat format, std::string_view answer, uint64_t seed) {
  std::vector<messages::ToolCallFields> out;
  if (!supports_tools(format)) return out;
  const ParsedAnswer p = parse_tool_calls(format, answer);
  for (size_t i = 0; i < p.calls.size(); ++i)
    out.push_back({tool_call_id(seed, answer.substr(0, p.offsets[i]), i), p.calls[i].name, p.calls[i].arguments});
  return out;
}

std::vector<std::string> stored_call_ids(ChatFormat format, std::span<const ChatMessage> conversation) {
  std::vector<std::string> ids;
  uint64_t seed = conversation_seed({});  // of the messages before the current one, kept as it grows
  for (const ChatMessage& m : conversation) {
    if (m.role == "assistant")
      for (const auto& c : answer_calls(format, m.content, seed)) ids.push_back(c.id);
    seed = seed_with(seed, m);
  }
  return ids;
}

std::optional<std::string> unanswered(std::span<const std::string> results, std::span<const std::string> call_ids) {
  for (const std::string& r : results)
    if (std::find(call_ids.begin(), call_ids.end(), r) == call_ids.end()) return r;
  return std::nullopt;
}

}  // namespace troupe::service
