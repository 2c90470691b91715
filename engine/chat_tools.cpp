#include "engine/chat_tools.h"

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"

namespace troupe {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
constexpr std::string_view kCallPrefix = "{\"name\": \"";
constexpr std::string_view kArgsKey = ", \"arguments\": ";

constexpr std::string_view kToolsIntro =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";
// The same where the template's string literal doubles the braces (Jinja
// writes them as they are).
constexpr std::string_view kDoubledExample = "{{\\\"name\\\": <function-name>";

bool space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  return rtrim(s);
}

// The longest suffix of `s` that is a proper prefix of `word` (text that may
// still become `word`).
size_t partial_suffix(std::string_view s, std::string_view word) {
  for (size_t n = std::min(s.size(), word.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == word.substr(0, n)) return n;
  return 0;
}

// Where the JSON object or array `s` starts with ends (npos: not yet, or
// not one): brackets counted outside strings.
size_t json_value_end(std::string_view s) {
  if (s.empty() || (s.front() != '{' && s.front() != '[')) return std::string_view::npos;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// A call's arguments as far as they are written: the object whole once it
// closes (what follows is the call's own brace and closer), else all of it,
// less (while more may come: `open`) what may yet be the closer. A stream
// sends this; a call cut off ends with it.
std::string_view arguments_so_far(std::string_view after_key, bool open) {
  if (const size_t end = json_value_end(after_key); end != std::string_view::npos) return after_key.substr(0, end);
  return rtrim(open ? after_key.substr(0, after_key.size() - partial_suffix(after_key, kClose)) : after_key);
}

// A JSON string literal; bytes that are not UTF-8 become U+FFFD (a client's
// name may hold any bytes).
std::string json_string(const std::string& s) { return ojson(s).dump(-1, ' ', false, ojson::error_handler_t::replace); }

void write_python(std::string& out, const ojson& v) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) out += ", ";
      first = false;
      out += ojson(k).dump(-1, ' ', false, ojson::error_handler_t::replace);
      out += ": ";
      write_python(out, x);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      write_python(out, v[i]);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
}

// Every "$ref" pointing into the tool's schema now points into the call
// schema that holds it at `at` (a JSON Pointer fragment).
void rebase_refs(ojson& s, const std::string& at) {
  if (s.is_array()) {
    for (auto& x : s) rebase_refs(x, at);
    return;
  }
  if (!s.is_object()) return;
  for (auto& [k, v] : s.items()) {
    if (k == "enum" || k == "const" || k == "default" || k == "examples") continue;  // values, not schemas
    if (k == "$ref" && v.is_string()) {
      const std::string r = v.get<std::string>();
      if (r.starts_with("#")) v = "#" + at + r.substr(1);
    } else {
      rebase_refs(v, at);
    }
  }
}

ojson call_schema(const ToolSpec& t, const std::string& at) {
  ojson params = ojson::parse(t.parameters.empty() ? std::string("{}") : t.parameters, nullptr, false);
  if (params.is_discarded() || !params.is_object())
    throw grammar::SchemaError("parameters", "", "tool '" + t.name + "': parameters is not a JSON object");
  if (params.empty()) params = ojson{{"type", "object"}, {"properties", ojson::object()}};
  rebase_refs(params, at + "/properties/arguments");
  return ojson{{"type", "object"},
               {"properties", {{"name", {{"const", t.name}}}, {"arguments", std::move(params)}}},
               {"required", {"name", "arguments"}},
               {"additionalProperties", false}};
}

// Free text in which `word` never appears: the states of matching it, as
// rules text_K (K characters of it matched). `word` starts with a character
// found nowhere else in it ('<' in "<tool_call>"), so a mismatch falls back
// to state 0, or to 1 on that character.
std::string text_without(std::string_view word, const std::string& prefix) {
  auto cls = [](std::string_view chars) {
    std::string c = "[^";
    for (char ch : chars) {
      if (ch == ']' || ch == '\\' || ch == '^' || ch == '-') c += '\\';
      c += ch;
    }
    return c + "]";
  };
  auto lit = [](char ch) {
    std::string s = "\"";
    if (ch == '"' || ch == '\\') s += '\\';
    s += ch;
    return s + "\"";
  };
  std::string g;
  const char first = word.front();
  for (size_t k = 0; k < word.size(); ++k) {
    const std::string me = prefix + std::to_string(k);
    const std::string zero = prefix + "0", one = prefix + "1";
    if (k == 0) {
      g += me + " ::= ( " + cls(std::string(1, first)) + " " + zero + " | " + lit(first) + " " + one + " )?\n";
      continue;
    }
    const char next = word[k];
    std::string alts = cls(std::string{first, next}) + " " + zero + " | " + lit(first) + " " + one;
    if (k + 1 < word.size()) alts += " | " + lit(next) + " " + prefix + std::to_string(k + 1);
    g += me + " ::= ( " + alts + " )?\n";
  }
  return g;
}

}  // namespace

bool supports_tools(ChatFormat format) { return format == ChatFormat::qwen2 || format == ChatFormat::chatml; }

std::string python_json(std::string_view json_text) {
  const ojson v = ojson::parse(json_text, nullptr, false);
  if (v.is_discarded()) throw ChatTemplateError("not JSON: " + std::string(json_text.substr(0, 80)));
  std::string out;
  write_python(out, v);
  return out;
}

std::vector<ChatMessage> with_tools(ChatFormat format, std::span<const ChatMessage> messages,
                                    std::span<const ToolSpec> tools, std::string_view chat_template) {
  std::vector<ChatMessage> out(messages.begin(), messages.end());
  if (tools.empty()) return out;
  if (!supports_tools(format))
    throw ChatTemplateError("this model's chat format (" + std::string(chat_format_name(format)) +
                            ") has no tool format; tools are not supported with it");
  std::string system;
  if (!out.empty() && out.front().role == "system") {
    system = out.front().content;
    out.erase(out.begin());
  } else if (format == ChatFormat::qwen2) {
    system = kQwenDefaultSystemPrompt;
  }
  system += kToolsIntro;
  for (const ToolSpec& t : tools) system.append("\n").append(python_json(t.json));
  if (chat_template.find(kDoubledExample) == std::string_view::npos) {
    system += kToolsOutro;
  } else {
    std::string outro(kToolsOutro);
    outro.replace(outro.find("{\"name\""), 1, "{{");
    outro.replace(outro.rfind("}\n</tool_call>"), 1, "}}");
    system += outro;
  }
  out.insert(out.begin(), ChatMessage{"system", std::move(system)});
  return out;
}

std::string assistant_text(ChatFormat format, std::string_view content, std::span<const ToolCall> calls) {
  if (calls.empty()) return std::string(content);
  if (!supports_tools(format))
    throw ChatTemplateError("this model's chat format (" + std::string(chat_format_name(format)) + ") has no tool format");
  std::string out(content);
  for (const ToolCall& c : calls) {
    const ojson args = ojson::parse(c.arguments, nullptr, false);
    if (args.is_discarded() || !args.is_object())
      throw ChatTemplateError("tool call '" + c.name + "': arguments is not a JSON object");
    if (!out.empty()) out += '\n';
    out.append(kOpen).append("\n").append(kCallPrefix);
    out += json_string(c.name).substr(1);  // the name's JSON string, its opening quote already written
    out.append(kArgsKey);
    write_python(out, args);
    out.append("}\n").append(kClose);
  }
  return out;
}

namespace {

// The schema of one call: of the named tool, the only one, or any of them.
ojson calls_schema(std::span<const ToolSpec> tools, ToolChoice choice, std::string_view name) {
  if (choice == ToolChoice::named) {
    const ToolSpec* t = nullptr;
    for (const ToolSpec& x : tools)
      if (x.name == name) t = &x;
    if (!t) throw ChatTemplateError("tool_choice names '" + std::string(name) + "', which is not among the tools");
    return call_schema(*t, "");
  }
  if (tools.size() == 1) return call_schema(tools.front(), "");
  ojson any = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) any.push_back(call_schema(tools[i], "/anyOf/" + std::to_string(i)));
  return ojson{{"anyOf", std::move(any)}};
}

// The converter's error, told of the tool: its name and the keyword's place
// within its parameters.
grammar::SchemaError tool_schema_error(const grammar::SchemaError& e, std::span<const ToolSpec> tools, ToolChoice choice,
                                       std::string_view name) {
  std::string where = e.pointer();
  std::string tool;
  if (tools.size() > 1 && choice != ToolChoice::named && where.starts_with("/anyOf/")) {
    const size_t i = std::stoul(where.substr(7));
    tool = i < tools.size() ? tools[i].name : "";
    where = where.substr(where.find('/', 7));
  } else {
    tool = choice == ToolChoice::named ? std::string(name) : tools.front().name;
  }
  if (where.starts_with("/properties/arguments")) where = where.substr(21);
  const std::string said = e.what(), head = (e.pointer().empty() ? std::string("/") : e.pointer()) + ": " + e.keyword() + ": ";
  return grammar::SchemaError(e.keyword(), "/tools/" + tool + "/parameters" + where,
                              said.starts_with(head) ? said.substr(head.size()) : said);
}

// The call object's rule becomes `tool_call`; names with '_' are never the
// converter's, so the rules added after it cannot collide with its.
void rename_root_to_tool_call(std::string& g) {
  const size_t root = g.starts_with("root ::=") ? 0 : g.find("\nroot ::=");
  if (root == std::string::npos) throw std::logic_error("tool_call_grammar: the schema grammar has no root");
  g.replace(root == 0 ? 0 : root + 1, 4, "tool_call");
}

// The answer's root: the calls alone, or text (or the response format's
// answer) with or without them, as the choice asks.
std::string answer_rules(ToolChoice choice, const std::string& calls, std::string_view answer) {
  switch (choice) {
    case ToolChoice::required:
    case ToolChoice::named: return "root ::= " + calls + "\n";
    case ToolChoice::auto_:
      if (!answer.empty())  // the response format's own rules, renamed apart from these
        return grammar::prefix_rule_names(answer, "answer_") + "\nroot ::= answer_root | " + calls + "\n";
      return text_without(kOpen, "tool_text_") + "root ::= tool_text_0 ( " + calls + " )?\n";
    case ToolChoice::none: return "root ::= tool_text_0\n" + text_without(kOpen, "tool_text_");
  }
  return "";
}

}  // namespace

std::string tool_call_grammar(ChatFormat format, std::span<const ToolSpec> tools, ToolChoice choice,
                              std::string_view name, bool parallel, std::string_view answer) {
  if (!supports_tools(format))
    throw ChatTemplateError("this model's chat format (" + std::string(chat_format_name(format)) + ") has no tool format");
  const ojson schema = calls_schema(tools, choice, name);
  std::string g;
  try {
    g = grammar::json_schema_to_gbnf(schema.dump(-1, ' ', false, ojson::error_handler_t::replace));
  } catch (const grammar::SchemaError& e) {
    throw tool_schema_error(e, tools, choice, name);
  }
  rename_root_to_tool_call(g);
  g += "tool_block ::= \"<tool_call>\\n\" tool_call \"\\n</tool_call>\"\n";
  const std::string calls = parallel && choice != ToolChoice::named ? "tool_block ( \"\\n\" tool_block )*" : "tool_block";
  return g + answer_rules(choice, calls, answer);
}

std::optional<ToolCall> read_call(std::string_view json_text) {
  const std::string_view body = trim(json_text);
  const ojson v = ojson::parse(body, nullptr, false);
  if (v.is_discarded() || !v.is_object()) return std::nullopt;
  const auto n = v.find("name");
  auto a = v.find("arguments");
  if (a == v.end()) a = v.find("parameters");
  if (n == v.end() || !n->is_string() || a == v.end() || !a->is_object()) return std::nullopt;
  ToolCall c;
  c.name = n->get<std::string>();
  // The layout the grammar writes: the arguments as the model wrote them.
  const std::string prefix = std::string(kCallPrefix) + json_string(c.name).substr(1) + std::string(kArgsKey);
  const std::string_view rest = body.starts_with(prefix) ? body.substr(prefix.size()) : std::string_view();
  const size_t end = json_value_end(rest);
  if (end != std::string_view::npos && trim(rest.substr(end)) == "}")
    c.arguments = std::string(rest.substr(0, end));
  else
    write_python(c.arguments, *a);
  return c;
}

std::vector<ToolCallStream::Event> ToolCallStream::take(std::string_view delta) {
  pending_.append(delta);
  taken_ += delta.size();
  return drain(false);
}

std::vector<ToolCallStream::Event> ToolCallStream::finish() { return drain(true); }

namespace {

using Event = ToolCallStream::Event;

// Content joins the content event before it, if the last one is.
void add_content(std::vector<Event>& out, int32_t index, std::string_view s) {
  if (s.empty()) return;
  if (!out.empty() && out.back().kind == Event::Kind::content) out.back().text.append(s);
  else out.push_back({Event::Kind::content, index, std::string(s), 0});
}

// The call's name once `seen` (its text so far) holds it whole, in the
// grammar's layout; nullopt before then, or in any other layout.
std::optional<std::string> streamed_name(std::string_view seen) {
  if (!seen.starts_with(kCallPrefix)) return std::nullopt;
  const size_t args = seen.find(kArgsKey);
  if (args == std::string_view::npos) return std::nullopt;
  const ojson n = ojson::parse(seen.substr(kCallPrefix.size() - 1, args - kCallPrefix.size() + 1), nullptr, false);
  if (!n.is_string()) return std::nullopt;
  return n.get<std::string>();
}

// The arguments' text in a call body of the grammar's layout.
std::string_view after_args_key(std::string_view body) { return body.substr(body.find(kArgsKey) + kArgsKey.size()); }

}  // namespace

std::vector<ToolCallStream::Event> ToolCallStream::drain(bool at_end) {
  std::vector<Event> out;
  for (bool more = true; more;) more = in_call_ ? drain_call(at_end, out) : drain_text(at_end, out);
  return out;
}

bool ToolCallStream::drain_text(bool at_end, std::vector<Event>& out) {
  const size_t open = pending_.find(kOpen);
  if (open != std::string::npos) {
    // The space before a call is the layout's: it is content only if no call follows.
    const std::string_view before = std::string_view(pending_).substr(0, open);
    add_content(out, calls_, rtrim(before));
    held_space_ = before.substr(rtrim(before).size());
    call_offset_ = taken_ - pending_.size() + open;
    pending_.erase(0, open + kOpen.size());
    in_call_ = true, named_ = false, call_text_.clear(), args_sent_ = 0;
    return true;
  }
  if (at_end) {
    // After calls, only their layout's whitespace may follow.
    add_content(out, calls_, calls_ > 0 ? trim(pending_) : std::string_view(pending_));
    pending_.clear();
    return false;
  }
  const size_t keep_from = rtrim(std::string_view(pending_).substr(0, pending_.size() - partial_suffix(pending_, kOpen))).size();
  add_content(out, calls_, std::string_view(pending_).substr(0, keep_from));
  pending_.erase(0, keep_from);
  return false;
}

bool ToolCallStream::drain_call(bool at_end, std::vector<Event>& out) {
  call_text_ += pending_;
  pending_.clear();
  const size_t close = call_text_.find(kClose);
  const std::string_view body = trim(std::string_view(call_text_).substr(0, close));
  if (!named_) {
    // The grammar's layout: the name is out as soon as it is whole. While
    // the call is open, its text may end in the first bytes of the close
    // (and the key's space may yet turn out to be the layout's): only what
    // the whole call's body will hold names it.
    const std::string_view seen =
        close != std::string::npos || at_end ? body
                                             : trim(std::string_view(call_text_).substr(0, call_text_.size() - partial_suffix(call_text_, kClose)));
    if (auto name = streamed_name(seen)) {
      named_ = true;
      out.push_back({Event::Kind::call, calls_, std::move(*name), call_offset_});
    }
  }
  if (close == std::string::npos && !at_end) {
    if (named_) send_arguments(std::string(arguments_so_far(after_args_key(body), true)), out);
    return false;
  }
  end_call(body, close, out);
  return !(at_end && pending_.empty());
}

void ToolCallStream::send_arguments(const std::string& args, std::vector<Event>& out) {
  if (args.size() <= args_sent_) return;
  out.push_back({Event::Kind::arguments, calls_, args.substr(args_sent_), 0});
  args_sent_ = args.size();
}

// The call is whole (or cut off at the end). In the grammar's layout its
// arguments are what was streamed, and the rest; otherwise it is read whole.
void ToolCallStream::end_call(std::string_view body, size_t close, std::vector<Event>& out) {
  const std::optional<ToolCall> call = named_ || close == std::string::npos ? std::nullopt : read_call(body);
  if (call || named_) {
    if (!named_) out.push_back({Event::Kind::call, calls_, call->name, call_offset_});
    send_arguments(call ? call->arguments : std::string(arguments_so_far(after_args_key(body), false)), out);
    ++calls_;
  } else {
    // Not a call after all: the text is content, as written.
    std::string text = held_space_;
    text += kOpen;
    text += call_text_.substr(0, close == std::string::npos ? call_text_.size() : close + kClose.size());
    add_content(out, calls_, text);
  }
  pending_ = close == std::string::npos ? std::string() : call_text_.substr(close + kClose.size());
  call_text_.clear();
  in_call_ = false;
}

ParsedAnswer parse_tool_calls(ChatFormat format, std::string_view text) {
  ToolCallStream s(format);
  ParsedAnswer p;
  auto take = [&](const std::vector<ToolCallStream::Event>& events) {
    for (const auto& e : events) {
      switch (e.kind) {
        case ToolCallStream::Event::Kind::content: p.content += e.text; break;
        case ToolCallStream::Event::Kind::call:
          p.calls.push_back({"", e.text, ""});
          p.offsets.push_back(e.offset);
          break;
        case ToolCallStream::Event::Kind::arguments: p.calls.back().arguments += e.text; break;
      }
    }
  };
  take(s.take(text));
  take(s.finish());
  return p;
}

}  // namespace troupe
