#include "engine/chat_template.h"

#include <algorithm>

#include "engine/tokenizer.h"

namespace troupe {
namespace {

// Tool results (role "tool") only where the format has a tool format
// (engine/chat_tools.h).
void check_roles(ChatFormat format, std::span<const ChatMessage> messages) {
  const bool tools = format == ChatFormat::chatml || format == ChatFormat::qwen2;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role == "tool" && !tools)
      throw ChatTemplateError("chat message " + std::to_string(i) + " is a tool result; this model's chat format (" +
                              std::string(chat_format_name(format)) + ") has no tool format");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      throw ChatTemplateError("chat message " + std::to_string(i) + " has role '" + role +
                              "'; expected system, user, assistant or tool");
    }
  }
}

// Jinja's |trim: strips whitespace at both ends.
std::string_view jinja_trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

void chatml_turn(std::string& out, std::string_view role, std::string_view content) {
  out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
}

std::string render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt,
                          std::string_view default_system) {
  std::string out;
  if (!default_system.empty() && (messages.empty() || messages.front().role != "system")) {
    chatml_turn(out, "system", default_system);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "tool") {
      chatml_turn(out, messages[i].role, messages[i].content);
      continue;
    }
    // Consecutive tool results share one user turn, each in its own block.
    out.append("<|im_start|>user");
    for (; i < messages.size() && messages[i].role == "tool"; ++i)
      out.append("\n<tool_response>\n").append(messages[i].content).append("\n</tool_response>");
    out.append("<|im_end|>\n");
    --i;
  }
  if (add_generation_prompt) out.append("<|im_start|>assistant\n");
  return out;
}

std::string render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  const auto header = [&](std::string_view role) {
    out.append("<|start_header_id|>").append(role).append("<|end_header_id|>\n\n");
  };
  for (const ChatMessage& m : messages) {
    header(m.role);
    out.append(jinja_trim(m.content)).append("<|eot_id|>");
  }
  if (add_generation_prompt) header("assistant");
  return out;
}

std::string render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string prefix;
  if (!messages.empty() && messages.front().role == "system") {
    prefix.append(messages.front().content).append("\n\n");
    messages = messages.subspan(1);
  }
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      throw ChatTemplateError("chat message " + std::to_string(i + 1) +
                              ": gemma accepts a system message only at the start");
    }
    out.append("<start_of_turn>").append(m.role == "assistant" ? "model" : m.role).append("\n");
    if (i == 0) out.append(prefix);
    out.append(jinja_trim(m.content)).append("<end_of_turn>\n");
  }
  if (add_generation_prompt) out.append("<start_of_turn>model\n");
  return out;
}

// A message's content as its format's renderer writes it: llama3 and gemma
// trim each turn's content, but gemma not the leading system message it
// folds into the first turn.
std::string_view rendered_content(ChatFormat format, std::span<const ChatMessage> messages, size_t i) {
  const bool folded_system = format == ChatFormat::gemma && i == 0 && messages[0].role == "system";
  if (format == ChatFormat::llama3 || (format == ChatFormat::gemma && !folded_system)) return jinja_trim(messages[i].content);
  return messages[i].content;
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

bool has_token(const Vocabulary& vocab, std::string_view text) {
  return std::find(vocab.tokens.begin(), vocab.tokens.end(), text) != vocab.tokens.end();
}

}  // namespace

std::string_view chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::qwen2: return "qwen2";
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::gemma: return "gemma";
  }
  return "unknown";
}

ChatFormat detect_chat_format(const Vocabulary& vocab, std::string_view architecture) {
  const std::string_view tmpl = vocab.chat_template;
  if (contains(tmpl, "<|im_start|>")) {
    return contains(tmpl, kQwenDefaultSystemPrompt) ? ChatFormat::qwen2 : ChatFormat::chatml;
  }
  if (contains(tmpl, "<|start_header_id|>")) return ChatFormat::llama3;
  if (contains(tmpl, "<start_of_turn>")) return ChatFormat::gemma;

  if (architecture == "qwen2") return ChatFormat::qwen2;
  if (architecture == "llama" && has_token(vocab, "<|start_header_id|>")) return ChatFormat::llama3;
  if (architecture.starts_with("gemma")) return ChatFormat::gemma;
  return ChatFormat::chatml;
}

std::string apply_chat_template(ChatFormat format, std::span<const ChatMessage> messages,
                                bool add_generation_prompt) {
  check_roles(format, messages);
  switch (format) {
    case ChatFormat::chatml: return render_chatml(messages, add_generation_prompt, {});
    case ChatFormat::qwen2: return render_chatml(messages, add_generation_prompt, kQwenDefaultSystemPrompt);
    case ChatFormat::llama3: return render_llama3(messages, add_generation_prompt);
    case ChatFormat::gemma: return render_gemma(messages, add_generation_prompt);
  }
  throw ChatTemplateError("unknown chat format " + std::to_string(static_cast<int>(format)));
}

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, ChatFormat format, std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) {
  // Render the template around sentinels in place of the contents, then
  // encode the markup with special tokens and each content without.
  std::vector<ChatMessage> marked(messages.begin(), messages.end());
  for (size_t i = 0; i < marked.size(); ++i) {
    std::string& c = marked[i].content;  // by append: GCC 12 warns falsely (-Wrestrict) on "literal" + string
    c.assign(1, '\x01');
    c.append(std::to_string(i)).push_back('\x02');
  }
  const std::string text = apply_chat_template(format, marked, add_generation_prompt);
  std::vector<int32_t> ids;
  bool first = true;
  auto append = [&](std::string_view piece, bool special) {
    if (piece.empty() && !first) return;
    const auto part = tokenizer.encode(piece, first && tokenizer.add_bos_by_default(), special);
    ids.insert(ids.end(), part.begin(), part.end());
    first = false;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find('\x01', pos);
    if (open == std::string::npos) break;
    const size_t close = text.find('\x02', open);
    append(std::string_view(text).substr(pos, open - pos), true);
    const size_t index = std::stoul(text.substr(open + 1, close - open - 1));
    append(rendered_content(format, messages, index), false);
    pos = close + 1;
  }
  append(std::string_view(text).substr(pos), true);
  return ids;
}

}  // namespace troupe
