#pragma once
// OpenAI's tool calling in troupe's terms (docs/TOOLS.md): `tools`,
// `tool_choice` and `parallel_tool_calls`, and the messages that carry calls
// (an assistant's `tool_calls`) and their results (role `tool`), read into a
// ChatTurn; and the calls an answer makes, written as OpenAI writes them
// (`message.tool_calls`, streamed as `delta.tool_calls`).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/chat_tools.h"
#include "messages/client_frames.h"

namespace troupe::service {

struct ToolsError {
  std::string param, message;
};

// The body's tools (absent: none), read in order (ordered_json).
std::optional<ToolsError> read_openai_tools(const nlohmann::ordered_json& body, messages::ChatToolsFields& into);

// One of `messages`; `index` for messages.
std::optional<ToolsError> read_openai_message(const nlohmann::ordered_json& m, size_t index, messages::ChatMessageFields& into);

// An answer's calls as they stream: content and `delta.tool_calls` deltas
// (each a JSON object for a chunk's `delta`), the ids the service gives the
// same calls in Done (service/tool_gate.h).
class OpenAiToolStream {
 public:
  OpenAiToolStream();
  void seed(uint64_t s) { seed_ = s; }  // Accepted.tool_call_seed
  std::vector<std::string> take(std::string_view piece);
  std::vector<std::string> finish();

 private:
  std::vector<std::string> deltas(const std::vector<ToolCallStream::Event>& events);
  ToolCallStream stream_;
  std::string text_;  // the answer so far (call ids are derived from it)
  uint64_t seed_ = 0;
};

// The content an answer with calls shows (the text before its calls).
std::string answer_content(const std::string& text);

}  // namespace troupe::service
