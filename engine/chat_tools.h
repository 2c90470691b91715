#pragma once
// Tool calls in a model's own chat format: the tools written into the
// prompt, an assistant's calls written into its turn, the grammar a call
// must follow, and the calls read back out of what the model wrote.
//
// One format carries tools today, Qwen2.5's (qwen2 and chatml, the Hermes
// layout its GGUF template writes):
//
//   system   SYSTEM\n\n# Tools\n\n...<tools>\n{tool}\n{tool}\n</tools>\n\n...
//   assistant  [CONTENT\n]<tool_call>\n{"name": "N", "arguments": {...}}\n</tool_call>
//                         [\n<tool_call>...</tool_call>]...
//   tool     results, consecutive ones in one user turn:
//            <tool_response>\nRESULT\n</tool_response>[\n<tool_response>...]
//
// JSON in the prompt is written as the template's `tojson` writes it
// (", " and ": ", UTF-8 as is), so a call sent back by a client renders to
// the tokens the model wrote. llama3 and gemma have no tool format here.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"

namespace troupe {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object's text
  bool operator==(const ToolCall&) const = default;
};

// A function the model may call: its name and the JSON Schema of its
// arguments (an object schema; "{}" when it takes none).
struct ToolSpec {
  std::string name;
  std::string description;
  std::string parameters = "{}";
  std::string json;  // the whole tool as the client sent it, written into the prompt
};

enum class ToolChoice { auto_, none, required, named };

// Whether `format` has a tool format (else: ChatTemplateError on tools).
bool supports_tools(ChatFormat format);

// `messages` with the tools in the system prompt, as the format writes
// them (a default system prompt when none leads). Tool messages (role
// "tool") stay as they are: apply_chat_template writes them. `chat_template`:
// the model's own (Vocabulary::chat_template), for the wording its preamble
// varies in (Qwen2.5-Coder 1.5B's doubles the braces of its example call).
std::vector<ChatMessage> with_tools(ChatFormat format, std::span<const ChatMessage> messages,
                                    std::span<const ToolSpec> tools, std::string_view chat_template = {});

// An assistant turn's text: its content, then its calls as the model writes
// them. Throws ChatTemplateError when an arguments text is not a JSON object.
std::string assistant_text(ChatFormat format, std::string_view content, std::span<const ToolCall> calls);

// The GBNF an answer follows: `required`, one or more calls (one with
// `parallel` false); `named`, one call of `name`; `auto_`, free text that
// never opens a call, then optionally calls, or (given `answer`, the GBNF of
// a response_format) either a sentence of `answer` or calls. Each call's
// arguments follow its tool's schema (grammar/json_schema.h, generation
// profile). Throws grammar::SchemaError naming the tool for a schema the
// engine cannot enforce.
std::string tool_call_grammar(ChatFormat format, std::span<const ToolSpec> tools, ToolChoice choice,
                              std::string_view name, bool parallel, std::string_view answer = {});

// What the model wrote, split: the content before its first call, and the
// calls (ids left empty), each with the offset of its opener in `text`.
// Text that opens a call but is not a {"name", "arguments"} object stays in
// the content; a call cut off keeps the arguments it wrote.
struct ParsedAnswer {
  std::string content;
  std::vector<ToolCall> calls;
  std::vector<size_t> offsets;
};
ParsedAnswer parse_tool_calls(ChatFormat format, std::string_view text);

// The same, as text arrives: content as it becomes final (text that may
// still open a call is held back), then each call's name and its arguments
// in pieces that join to exactly the arguments parse_tool_calls returns.
class ToolCallStream {
 public:
  struct Event {
    enum class Kind { content, call, arguments } kind;
    int32_t index = 0;  // the call's
    std::string text;   // content, the call's name, or a piece of its arguments
    size_t offset = 0;  // a call: where its opener starts in the text taken so far
  };
  explicit ToolCallStream(ChatFormat format) : format_(format) {}
  std::vector<Event> take(std::string_view delta);
  // The end of the answer: held-back text, and a call cut off (its
  // arguments as written so far).
  std::vector<Event> finish();
  int32_t calls() const { return calls_; }

 private:
  std::vector<Event> drain(bool at_end);
  // drain's steps; each returns whether there is more to drain.
  bool drain_text(bool at_end, std::vector<Event>& out);  // outside a call: content, up to an opener
  bool drain_call(bool at_end, std::vector<Event>& out);  // inside one: its name and arguments
  // The arguments' text beyond what was sent of it.
  void send_arguments(const std::string& args, std::vector<Event>& out);
  void end_call(std::string_view body, size_t close, std::vector<Event>& out);
  ChatFormat format_;
  size_t taken_ = 0;       // bytes taken; outside a call, pending_ is their tail
  size_t call_offset_ = 0; // the current call's opener
  std::string pending_;   // not yet said
  std::string held_space_;  // before the current call: content if it proves not to be one
  bool in_call_ = false;  // between an opener and its closer
  bool named_ = false;    // the current call's name is out
  std::string call_text_;  // the current call's JSON so far
  size_t args_sent_ = 0;   // of the arguments text
  int32_t calls_ = 0;
};

// The arguments text in a {"name": ..., "arguments": ...} call as the model
// wrote it (a JSON object), or nullopt when the text is not such a call.
std::optional<ToolCall> read_call(std::string_view json_text);

// JSON written as Python's json.dumps does (", " and ": "; what Jinja's
// tojson writes in the templates). Throws ChatTemplateError for text that is
// not JSON.
std::string python_json(std::string_view json_text);

}  // namespace troupe
