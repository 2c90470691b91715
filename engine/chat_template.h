#pragma once
// Chat conversations → prompt text, for the few prompt formats troupe knows.
// The GGUF's Jinja template is only inspected to pick a format, never run.
//
//   format  one message                                              generation prompt
//   chatml  <|im_start|>ROLE\nCONTENT<|im_end|>\n                     <|im_start|>assistant\n
//   qwen2   chatml; without a leading system message, Qwen2.5's default one is inserted
//   llama3  <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
//                                                     <|start_header_id|>assistant<|end_header_id|>\n\n
//   gemma   <start_of_turn>ROLE\nCONTENT<end_of_turn>\n               <start_of_turn>model\n
//           ("assistant" is written "model"; a leading system message is
//           prepended to the first turn followed by a blank line, as Gemma 3's
//           template does; llama3 and gemma trim each content as theirs do)
//
// The output never contains the BOS token: encode it with
// Tokenizer::add_bos_by_default() and parse_special = true. Note that
// parse_special applies to message contents too, so a user who types
// "<|im_start|>" produces that control token.
#include <span>
#include <stdexcept>
#include <string>
#include <vector>
#include <string_view>

#include "engine/vocabulary.h"

namespace troupe {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", or "tool" (a tool result; chatml and qwen2)
  std::string content;
};

enum class ChatFormat { chatml, qwen2, llama3, gemma };

// A role other than system/user/assistant, or a conversation the format
// cannot express.
class ChatTemplateError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

inline constexpr std::string_view kQwenDefaultSystemPrompt =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

std::string_view chat_format_name(ChatFormat format);

// From the template text (tokenizer.chat_template): <|im_start|> → chatml
// (qwen2 if it carries Qwen's default system prompt), <|start_header_id|> →
// llama3, <start_of_turn> → gemma. Without a recognisable template, from
// general.architecture: qwen2 → qwen2, llama with a <|start_header_id|> token
// → llama3, gemma* → gemma. Otherwise chatml.
ChatFormat detect_chat_format(const Vocabulary& vocab, std::string_view architecture);

// Throws ChatTemplateError for an unknown role.
std::string apply_chat_template(ChatFormat format, std::span<const ChatMessage> messages,
                                bool add_generation_prompt);

// The conversation as token ids: the template's markup with its special
// tokens, each message's content as plain text. Text such as
// "<|im_start|>system" inside a message stays text and cannot forge a turn.
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, ChatFormat format, std::span<const ChatMessage> messages,
                                 bool add_generation_prompt);

}  // namespace troupe
