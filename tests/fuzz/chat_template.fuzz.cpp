// Arbitrary conversations through the chat templates, as a ChatTurn's
// messages reach them (service/request_gate.cpp). The first byte picks the
// format and the generation prompt; the rest is messages separated by 0x00,
// each a role byte (system, user, assistant, or any role up to a ':') then
// its content.
//
// Properties, on the real default model's tokenizer: apply_chat_template and
// encode_chat refuse the same conversations; the tokens encode_chat gives
// decode to exactly the text apply_chat_template renders (the prompt a
// server computes is the one its template shows); and a content can never
// forge a turn: there are as many turn-opening tokens as turns.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "engine/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

using namespace troupe;

namespace {

const Tokenizer& qwen2() {
  static const Tokenizer tok(fuzz::qwen2_vocabulary());
  return tok;
}

std::vector<ChatMessage> messages_from(std::string_view rest) {
  static constexpr const char* kRoles[] = {"system", "user", "assistant"};
  std::vector<ChatMessage> out;
  while (!rest.empty() && out.size() < 64) {
    const size_t end = std::min(rest.find('\0'), rest.size());
    std::string_view record = rest.substr(0, end);
    rest.remove_prefix(std::min(end + 1, rest.size()));
    if (record.empty()) continue;
    const auto role = static_cast<uint8_t>(record[0]) % 4;
    record.remove_prefix(1);
    ChatMessage m;
    if (role < 3) {
      m.role = kRoles[role];
    } else {
      const size_t colon = std::min(record.find(':'), record.size());
      m.role = std::string(record.substr(0, colon));
      record.remove_prefix(std::min(colon + 1, record.size()));
    }
    m.content = std::string(record);
    out.push_back(std::move(m));
  }
  return out;
}

// Turns the rendered text opens: one per message (gemma folds a leading
// system message into the first turn; consecutive tool results share one),
// Qwen's default system turn, the generation prompt.
size_t expected_turns(ChatFormat format, const std::vector<ChatMessage>& msgs, bool generation_prompt) {
  size_t n = generation_prompt ? 1 : 0;
  for (size_t i = 0; i < msgs.size(); ++i)
    if (!(i > 0 && msgs[i].role == "tool" && msgs[i - 1].role == "tool")) ++n;
  const bool leading_system = !msgs.empty() && msgs.front().role == "system";
  if (format == ChatFormat::qwen2 && !leading_system) ++n;
  if (format == ChatFormat::gemma && leading_system) --n;
  return n;
}

}  // namespace

// Loading happens before the first input, so it is not timed as one.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)qwen2();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr ChatFormat kFormats[] = {ChatFormat::chatml, ChatFormat::qwen2, ChatFormat::llama3, ChatFormat::gemma};
  const ChatFormat format = kFormats[data[0] % 4];
  const bool generation_prompt = data[0] & 0x04;
  const std::vector<ChatMessage> msgs =
      messages_from(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  const Tokenizer& tok = qwen2();

  std::optional<std::string> text;
  try {
    text = apply_chat_template(format, msgs, generation_prompt);
  } catch (const ChatTemplateError&) {
  }
  std::optional<std::vector<int32_t>> ids;
  try {
    ids = encode_chat(tok, format, msgs, generation_prompt);
  } catch (const ChatTemplateError&) {
  }
  if (text.has_value() != ids.has_value()) fuzz::fail("apply_chat_template and encode_chat disagree on refusing");
  if (!text) return 0;

  std::span<const int32_t> body(*ids);
  if (tok.add_bos_by_default() && !body.empty() && body.front() == tok.bos()) body = body.subspan(1);
  if (tok.decode(body) != *text) fuzz::fail("encode_chat's tokens are not the rendered template", chat_format_name(format));

  // Only chatml's opener is a token of this vocabulary; the others' markup is text here.
  if (format == ChatFormat::chatml || format == ChatFormat::qwen2) {
    const int32_t im_start = tok.find_token("<|im_start|>");
    const auto opened = static_cast<size_t>(std::count(body.begin(), body.end(), im_start));
    if (opened != expected_turns(format, msgs, generation_prompt)) fuzz::fail("a message's content opened a turn");
  }
  return 0;
}
