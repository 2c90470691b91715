#pragma once
// A chat turn's tools checked and lowered when the service admits it
// (docs/TOOLS.md): the tools read from their OpenAI JSON, the grammar every
// call follows (its arguments validate against its tool's parameters), an
// assistant's calls written into its text as the model writes them, and
// each tool result matched to a call. Refusals name the field.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_tools.h"
#include "messages/client_frames.h"

namespace troupe::grammar {
class GrammarCache;
}

namespace troupe::service {

struct ChatTools {
  std::vector<ToolSpec> specs;
  ToolChoice choice = ToolChoice::auto_;
  std::string name;  // named
  bool parallel = true;
  // Whether the answer may call: tools given and the choice not none.
  bool active() const { return !specs.empty() && choice != ToolChoice::none; }
};

// The turn's tools (each an OpenAI tool object's JSON text); an error for invalid_field.
std::optional<std::string> read_tools(const wire::ChatTurn& t, ChatTools& out);

// The turn's messages: an assistant's calls folded into its text, tool
// results kept as role "tool". `call_ids`: the calls those results may
// answer (the ids of earlier calls); the ids this turn's assistant
// messages give are added. A result answering no call, or a call whose
// arguments are not a JSON object: the error.
std::optional<std::string> read_messages(const wire::ChatTurn& t, ChatFormat format, std::vector<ChatMessage>& chat,
                                         std::vector<std::string>& call_ids, std::vector<std::string>& results);

// Sets s.grammar to the calls' grammar when the tools are active (with a
// constraint already lowered into s.grammar, under auto: that constraint's
// sentence or calls); an error when the model's format has no tool format or
// a tool's schema cannot be enforced.
std::optional<std::string> lower_tools(const ChatTools& tools, ChatFormat format, messages::SamplingFields& s,
                                       grammar::GrammarCache& cache);

// Call ids are derived, never stored: from the conversation before the
// answer (its seed), the answer's text before the call, and the call's
// index. So a stored session names its calls again, a stream names a call
// as it opens (the seed travels in Accepted), and the same call in two
// turns of one conversation gets two ids.
uint64_t conversation_seed(std::span<const ChatMessage> messages);
std::string tool_call_id(uint64_t seed, std::string_view before, size_t index);
// The ids of the calls the assistant messages of `conversation` made (each
// under the seed of the messages before it).
std::vector<std::string> stored_call_ids(ChatFormat format, std::span<const ChatMessage> conversation);
// The first of `results` that answers none of `call_ids` (nullopt: all do).
std::optional<std::string> unanswered(std::span<const std::string> results, std::span<const std::string> call_ids);

// The calls an answer makes, with their ids.
std::vector<messages::ToolCallFields> answer_calls(ChatFormat format, std::string_view answer, uint64_t seed);

}  // namespace troupe::service
