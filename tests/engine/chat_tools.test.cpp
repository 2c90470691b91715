// Tool calls in Qwen2.5's format: the prompt as its GGUF template writes it,
// the grammar a call follows, and the calls read back, whole or streamed.
// (tests/reference/check_chat_template.py renders the same conversations with
// the model's own Jinja template.)
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "engine/chat_tools.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"

using namespace troupe;

namespace {

ToolSpec weather_tool() {
  ToolSpec t;
  t.name = "get_weather";
  t.parameters = R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]})";
  t.json = R"({"type":"function","function":{"name":"get_weather","parameters":)" + t.parameters + "}}";
  return t;
}

ToolSpec time_tool() {
  ToolSpec t;
  t.name = "get_time";
  t.parameters = R"({"type":"object","properties":{"zone":{"$ref":"#/$defs/zone"}},"required":["zone"],"$defs":{"zone":{"enum":["UTC","CET"]}}})";
  t.json = R"({"type":"function","function":{"name":"get_time","parameters":)" + t.parameters + "}}";
  return t;
}

std::string joined(const std::vector<ToolCallStream::Event>& events, ToolCallStream::Event::Kind kind, int32_t index = -1) {
  std::string s;
  for (const auto& e : events)
    if (e.kind == kind && (index < 0 || e.index == index)) s += e.text;
  return s;
}

}  // namespace

TEST_CASE("tools go into the system prompt as Qwen2.5's template writes them, with Python's JSON layout") {
  const std::vector<ToolSpec> tools = {weather_tool()};
  const std::vector<ChatMessage> messages = {{"user", "Weather in Paris?"}};
  const auto with = with_tools(ChatFormat::qwen2, messages, tools);
  REQUIRE(with.size() == 2);
  CHECK(with[0].role == "system");
  CHECK(apply_chat_template(ChatFormat::qwen2, with, true) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\nYou are provided with function "
        "signatures within <tools></tools> XML tags:\n<tools>\n"
        R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": )"
        R"({"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": )"
        R"(["city", "days"]}}})"
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n");
  // A caller's system prompt takes the default's place.
  const std::vector<ChatMessage> own = {{"system", "Be brief."}, {"user", "Hi"}};
  CHECK(with_tools(ChatFormat::qwen2, own, tools)[0].content.starts_with("Be brief.\n\n# Tools\n\n"));
  CHECK(with_tools(ChatFormat::qwen2, own, {}).size() == 2);
  CHECK_THROWS_AS(with_tools(ChatFormat::gemma, messages, tools), ChatTemplateError);
  CHECK_THROWS_AS(with_tools(ChatFormat::llama3, messages, tools), ChatTemplateError);
}

TEST_CASE("an assistant's calls and the tool results render as the template writes them") {
  const std::vector<ToolCall> calls = {{"call_1", "get_weather", R"({"city":"Paris","days":2})"},
                                       {"call_2", "get_time", R"({"zone": "CET"})"}};
  const std::string text = assistant_text(ChatFormat::qwen2, "", calls);
  CHECK(text ==
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>");
  CHECK(assistant_text(ChatFormat::qwen2, "Let me look.", {calls.data(), 1}).starts_with("Let me look.\n<tool_call>\n"));
  CHECK_THROWS_AS(assistant_text(ChatFormat::qwen2, "", std::vector<ToolCall>{{"c", "f", "[1]"}}), ChatTemplateError);
  const std::vector<ChatMessage> messages = {{"user", "Q"},          {"assistant", text}, {"tool", "sunny"},
                                             {"tool", "12:00"},      {"user", "Thanks"}};
  CHECK(apply_chat_template(ChatFormat::chatml, messages, false) ==
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n" + text +
            "<|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n12:00\n"
            "</tool_response><|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n");
  const std::vector<ChatMessage> tool_result = {{"user", "Q"}, {"tool", "x"}};
  CHECK_THROWS_AS(apply_chat_template(ChatFormat::gemma, tool_result, true), ChatTemplateError);
}

TEST_CASE("the call grammar holds arguments to their tool's schema, and auto never opens a call it does not make") {
  const std::vector<ToolSpec> tools = {weather_tool(), time_tool()};
  const auto required = grammar::compile_gbnf(tool_call_grammar(ChatFormat::qwen2, tools, ToolChoice::required, "", true));
  const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>";
  const std::string time = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>";
  CHECK(grammar::matches(*required, weather));
  CHECK(grammar::matches(*required, time));
  CHECK(grammar::matches(*required, weather + "\n" + time));
  CHECK_FALSE(grammar::matches(*required, ""));
  CHECK_FALSE(grammar::matches(*required, "Sure. " + weather));
  CHECK_FALSE(grammar::matches(*required, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 9}}\n</tool_call>"));
  CHECK_FALSE(grammar::matches(*required, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"PST\"}}\n</tool_call>"));
  CHECK_FALSE(grammar::matches(*required, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));

  const auto single = grammar::compile_gbnf(tool_call_grammar(ChatFormat::qwen2, tools, ToolChoice::required, "", false));
  CHECK(grammar::matches(*single, weather));
  CHECK_FALSE(grammar::matches(*single, weather + "\n" + time));

  const auto named = grammar::compile_gbnf(tool_call_grammar(ChatFormat::qwen2, tools, ToolChoice::named, "get_time", true));
  CHECK(grammar::matches(*named, time));
  CHECK_FALSE(grammar::matches(*named, weather));
  CHECK_THROWS_AS(tool_call_grammar(ChatFormat::qwen2, tools, ToolChoice::named, "nope", true), ChatTemplateError);

  const auto automatic = grammar::compile_gbnf(tool_call_grammar(ChatFormat::qwen2, tools, ToolChoice::auto_, "", true));
  CHECK(grammar::matches(*automatic, "It is sunny <b>today</b> in <tool Oslo."));
  CHECK(grammar::matches(*automatic, ""));
  CHECK(grammar::matches(*automatic, weather));
  CHECK(grammar::matches(*automatic, "Let me check.\n" + weather + "\n" + time));
  CHECK_FALSE(grammar::matches(*automatic, "text <tool_call> more text"));
  CHECK_FALSE(grammar::matches(*automatic, weather + " and then text"));
}

TEST_CASE("with a response format, auto answers a sentence of it or calls, and the two grammars keep their rules apart") {
  // A user's GBNF whose names collide with the tool grammar's, with comments, classes and counts.
  const std::string answer = "# the answer\nroot ::= \"{\\\"ok\\\": \" tool_call \"}\"\ntool_call ::= [a-z\\]]{1,3} # letters\n";
  CHECK(grammar::matches(*grammar::compile_gbnf(answer), "{\"ok\": ab]}"));
  const std::string renamed = grammar::prefix_rule_names(answer, "answer_");
  CHECK(renamed.find("answer_root ::=") != std::string::npos);
  CHECK(renamed.find("answer_tool_call ::= [a-z\\]]{1,3} # letters") != std::string::npos);
  CHECK(grammar::matches(*grammar::compile_gbnf(renamed, {}, "answer_root"), "{\"ok\": ab]}"));

  const std::vector<ToolSpec> tools = {weather_tool()};
  const auto g = grammar::compile_gbnf(tool_call_grammar(ChatFormat::qwen2, tools, ToolChoice::auto_, "", true, answer));
  CHECK(grammar::matches(*g, "{\"ok\": abc}"));
  CHECK(grammar::matches(*g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 1}}\n</tool_call>"));
  CHECK_FALSE(grammar::matches(*g, "free text"));
  CHECK_FALSE(grammar::matches(*g, "{\"ok\": abcd}"));
}

TEST_CASE("a tool whose parameters the engine cannot enforce is refused, naming the tool and the keyword") {
  ToolSpec bad = weather_tool();
  bad.name = "odd";
  bad.parameters = R"({"type":"object","properties":{"x":{"type":"string","pattern":"(?<=a)b"}}})";
  const std::vector<ToolSpec> tools = {weather_tool(), bad};
  try {
    tool_call_grammar(ChatFormat::qwen2, tools, ToolChoice::required, "", true);
    FAIL("no error");
  } catch (const grammar::SchemaError& e) {
    CHECK(e.keyword() == "pattern");
    CHECK(e.pointer() == "/tools/odd/parameters/properties/x/pattern");
  }
  ToolSpec not_object = weather_tool();
  not_object.parameters = "[1]";
  CHECK_THROWS_AS(tool_call_grammar(ChatFormat::qwen2, std::vector<ToolSpec>{not_object}, ToolChoice::required, "", true),
                  grammar::SchemaError);
}

TEST_CASE("calls are read back whole, and streamed in pieces that join to the same calls") {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo \\\"N\\\"\", \"days\": "
      "{\"a\": [1, 2]}}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  const ParsedAnswer whole = parse_tool_calls(ChatFormat::qwen2, text);
  CHECK(whole.content == "Let me check.");
  REQUIRE(whole.calls.size() == 2);
  CHECK(whole.calls[0].name == "get_weather");
  CHECK(whole.calls[0].arguments == "{\"city\": \"Oslo \\\"N\\\"\", \"days\": {\"a\": [1, 2]}}");
  CHECK(whole.calls[1].name == "get_time");
  CHECK(whole.calls[1].arguments == "{}");

  for (size_t step : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, text.size()}) {
    INFO("pieces of " << step);
    ToolCallStream s(ChatFormat::qwen2);
    std::vector<ToolCallStream::Event> events;
    for (size_t i = 0; i < text.size(); i += step)
      for (auto& e : s.take(std::string_view(text).substr(i, step))) events.push_back(std::move(e));
    for (auto& e : s.finish()) events.push_back(std::move(e));
    CHECK(joined(events, ToolCallStream::Event::Kind::content) == whole.content);
    CHECK(joined(events, ToolCallStream::Event::Kind::call, 0) == "get_weather");
    CHECK(joined(events, ToolCallStream::Event::Kind::arguments, 0) == whole.calls[0].arguments);
    CHECK(joined(events, ToolCallStream::Event::Kind::arguments, 1) == whole.calls[1].arguments);
    CHECK(s.calls() == 2);
    // Nothing of the markup reaches the content while streaming.
    for (const auto& e : events)
      if (e.kind == ToolCallStream::Event::Kind::content) CHECK(e.text.find('<') == std::string::npos);
  }
}

TEST_CASE("text that only looks like a call stays content, and a call cut off keeps what it wrote") {
  CHECK(parse_tool_calls(ChatFormat::qwen2, "a < b and <tool c").content == "a < b and <tool c");
  CHECK(parse_tool_calls(ChatFormat::qwen2, "plain answer\n").content == "plain answer\n");
  const ParsedAnswer junk = parse_tool_calls(ChatFormat::qwen2, "x <tool_call>not json</tool_call> y");
  CHECK(junk.calls.empty());
  CHECK(junk.content == "x <tool_call>not json</tool_call> y");
  const ParsedAnswer cut = parse_tool_calls(ChatFormat::qwen2, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1");
  REQUIRE(cut.calls.size() == 1);
  CHECK(cut.calls[0].name == "f");
  CHECK(cut.calls[0].arguments == "{\"a\": 1");
  // Cut off after its arguments closed (max_tokens inside the closer): the arguments whole.
  const ParsedAnswer late = parse_tool_calls(ChatFormat::qwen2, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": \"}\"}}}\n</to");
  REQUIRE(late.calls.size() == 1);
  CHECK(late.calls[0].arguments == "{\"a\": {\"b\": \"}\"}}");
  // A key after the arguments (no grammar held it): the arguments alone.
  const ParsedAnswer extra = parse_tool_calls(ChatFormat::qwen2, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"x\": 2}\n</tool_call>");
  REQUIRE(extra.calls.size() == 1);
  CHECK(extra.calls[0].arguments == "{\"a\": 1}");
  // Another key order (no grammar held it): the arguments in Python's layout.
  const ParsedAnswer reordered = parse_tool_calls(ChatFormat::qwen2, "<tool_call>{\"arguments\":{\"b\":[1,2]},\"name\":\"g\"}</tool_call>");
  REQUIRE(reordered.calls.size() == 1);
  CHECK(reordered.calls[0].arguments == "{\"b\": [1, 2]}");
  CHECK(python_json(R"({"a":{"b":[1,"é",null,true]}})") == R"({"a": {"b": [1, "é", null, true]}})");
}

TEST_CASE("a call with no arguments is content, whether it comes whole or with the close cut in two") {
  // The key's space is the close's layout once the close comes: no call was made.
  const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": \n</tool_call>";
  CHECK(parse_tool_calls(ChatFormat::qwen2, text).calls.empty());
  ToolCallStream s(ChatFormat::qwen2);
  std::vector<ToolCallStream::Event> events;
  for (std::string_view piece : {"<tool_call>\n{\"name\": \"f\", \"arguments\"", ": \n</tool", "_call>"})
    for (auto& e : s.take(piece)) events.push_back(std::move(e));
  for (auto& e : s.finish()) events.push_back(std::move(e));
  CHECK(s.calls() == 0);
  CHECK(joined(events, ToolCallStream::Event::Kind::content) == text);
}
