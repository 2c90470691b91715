// Arbitrary bytes as what a model wrote under tools (or what a client sent
// back as an assistant's text), read for calls: whole, and streamed in the
// pieces the NUL bytes of the input cut it into.
//
// Properties: reading never throws; the stream's content and calls equal the
// whole text's, and the arguments streamed join to the same arguments; calls
// whose arguments are JSON objects, written back as the model writes them
// (assistant_text), read back as the same names and arguments.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_tools.h"
#include "tests/fuzz/fuzz_support.h"

using namespace troupe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string text;
  std::vector<std::string_view> pieces;
  for (size_t at = 0; at <= input.size();) {
    const size_t cut = std::min(input.find('\0', at), input.size());
    pieces.push_back(input.substr(at, cut - at));
    text.append(input.substr(at, cut - at));
    at = cut + 1;
  }
  const ParsedAnswer whole = parse_tool_calls(ChatFormat::chatml, text);
  if (whole.calls.size() != whole.offsets.size()) fuzz::fail("a call without its offset");

  ToolCallStream stream(ChatFormat::chatml);
  ParsedAnswer streamed;
  auto take = [&](const std::vector<ToolCallStream::Event>& events) {
    for (const auto& e : events) {
      switch (e.kind) {
        case ToolCallStream::Event::Kind::content: streamed.content += e.text; break;
        case ToolCallStream::Event::Kind::call:
          if (e.index != static_cast<int32_t>(streamed.calls.size())) fuzz::fail("a call's index out of order");
          streamed.calls.push_back({"", e.text, ""});
          streamed.offsets.push_back(e.offset);
          break;
        case ToolCallStream::Event::Kind::arguments:
          if (streamed.calls.empty() || e.index + 1 != static_cast<int32_t>(streamed.calls.size()))
            fuzz::fail("arguments for a call not open");
          streamed.calls.back().arguments += e.text;
          break;
      }
    }
  };
  for (std::string_view p : pieces) take(stream.take(p));
  take(stream.finish());
  if (streamed.content != whole.content) fuzz::fail("streamed content differs from the whole text's");
  if (streamed.calls != whole.calls) fuzz::fail("streamed calls differ from the whole text's");
  if (streamed.offsets != whole.offsets) fuzz::fail("streamed call offsets differ");

  // Calls with object arguments round-trip through the format.
  std::vector<ToolCall> objects;
  for (const ToolCall& c : whole.calls) {
    try {
      python_json(c.arguments);
    } catch (const ChatTemplateError&) {
      continue;
    }
    if (!c.arguments.empty() && c.arguments.front() == '{') objects.push_back(c);
  }
  std::string again;
  try {
    again = assistant_text(ChatFormat::chatml, "", objects);
  } catch (const ChatTemplateError&) {
    return 0;  // a name or arguments the format refuses
  }
  const ParsedAnswer back = parse_tool_calls(ChatFormat::chatml, again);
  if (back.calls.size() != objects.size()) fuzz::fail("calls written back are not read back as many");
  for (size_t i = 0; i < objects.size(); ++i) {
    if (back.calls[i].name != objects[i].name) fuzz::fail("a call's name changed on the way back");
    if (back.calls[i].arguments != python_json(objects[i].arguments)) fuzz::fail("a call's arguments changed on the way back");
  }
  return 0;
}
