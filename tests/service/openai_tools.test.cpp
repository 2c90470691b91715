// OpenAI's tool calling read and written (service/openai_tools.h): tools,
// tool_choice and parallel_tool_calls; messages carrying calls and their
// results; an answer's calls streamed as delta.tool_calls with the ids Done
// gives them, and the content an answer with calls shows.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "messages/client_generated.h"
#include "service/openai_tools.h"
#include "service/tool_gate.h"

using namespace troupe;
using namespace troupe::service;
using json = nlohmann::ordered_json;

namespace {

messages::ChatToolsFields tools_ok(const std::string& body) {
  messages::ChatToolsFields t;
  const auto e = read_openai_tools(json::parse(body), t);
  if (e) FAIL("refused: " << e->param << ": " << e->message);
  return t;
}

ToolsError tools_error(const std::string& body) {
  messages::ChatToolsFields t;
  const auto e = read_openai_tools(json::parse(body), t);
  REQUIRE(e);
  return *e;
}

messages::ChatMessageFields message_ok(const std::string& m, size_t index = 0) {
  messages::ChatMessageFields f;
  const auto e = read_openai_message(json::parse(m), index, f);
  if (e) FAIL("refused: " << e->param << ": " << e->message);
  return f;
}

ToolsError message_error(const std::string& m, size_t index) {
  messages::ChatMessageFields f;
  const auto e = read_openai_message(json::parse(m), index, f);
  REQUIRE(e);
  return *e;
}

const std::string kWeather = R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}})";

// An answer as Qwen2.5 writes it: some content, then two calls.
const std::string kAnswer =
    "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>";

// What a client reads from the deltas: content, and each call's id, name and arguments.
struct Streamed {
  std::string content;
  std::vector<messages::ToolCallFields> calls;
};

void read_deltas(const std::vector<std::string>& deltas, Streamed& out) {
  for (const auto& d : deltas) {
    const json delta = json::parse(d);
    if (delta.contains("content")) out.content += delta["content"].get<std::string>();
    if (!delta.contains("tool_calls")) continue;
    REQUIRE(delta["tool_calls"].size() == 1);
    const json& call = delta["tool_calls"][0];
    const auto index = call["index"].get<size_t>();
    if (call.contains("id")) {
      REQUIRE(index == out.calls.size());  // a call opens once, in order
      CHECK(call["type"] == "function");
      CHECK(call["function"]["arguments"] == "");
      out.calls.push_back({call["id"].get<std::string>(), call["function"]["name"].get<std::string>(), ""});
    } else {
      REQUIRE(index < out.calls.size());
      CHECK_FALSE(call["function"].contains("name"));
      out.calls[index].arguments += call["function"]["arguments"].get<std::string>();
    }
  }
}

Streamed stream(const std::string& answer, uint64_t seed, size_t piece) {
  OpenAiToolStream s;
  s.seed(seed);
  Streamed out;
  for (size_t at = 0; at < answer.size(); at += piece) read_deltas(s.take(answer.substr(at, piece)), out);
  read_deltas(s.finish(), out);
  return out;
}

}  // namespace

TEST_CASE("openai tools: a body without tools has none, any choice but required or named, in parallel") {
  messages::ChatToolsFields t;
  t.tools = {"left over"};
  t.choice = wire::ToolChoice::required;
  t.name = "f";
  t.parallel = false;
  CHECK_FALSE(read_openai_tools(json::parse(R"({"messages":[]})"), t));
  CHECK(t.tools.empty());
  CHECK(t.choice == wire::ToolChoice::auto_);
  CHECK(t.name.empty());
  CHECK(t.parallel);
  const auto nulls = tools_ok(R"({"tools":null,"tool_choice":null,"parallel_tool_calls":null})");
  CHECK(nulls.tools.empty());
  CHECK(nulls.choice == wire::ToolChoice::auto_);
  CHECK(tools_ok(R"({"tool_choice":"none"})").choice == wire::ToolChoice::none);
  CHECK(tools_ok(R"({"tool_choice":"auto"})").choice == wire::ToolChoice::auto_);
}

TEST_CASE("openai tools: tools are kept as sent, in order, with the choice and parallel_tool_calls") {
  const auto t = tools_ok(R"({"tools":[)" + kWeather + R"(,{"type":"function","function":{"name":"get_time"}}],
      "tool_choice":{"type":"function","function":{"name":"get_time"}},"parallel_tool_calls":false})");
  REQUIRE(t.tools.size() == 2);
  CHECK(t.tools[0] == kWeather);  // key order kept: the prompt shows the tool as the client wrote it
  CHECK(json::parse(t.tools[1])["function"]["name"] == "get_time");
  CHECK(t.choice == wire::ToolChoice::named);
  CHECK(t.name == "get_time");
  CHECK_FALSE(t.parallel);
  CHECK(tools_ok(R"({"tools":[)" + kWeather + R"(],"tool_choice":"required"})").choice == wire::ToolChoice::required);
  CHECK(tools_ok(R"({"tools":[]})").tools.empty());
}

TEST_CASE("openai tools: bad tools, tool_choice or parallel_tool_calls are refused, naming the field") {
  auto e = tools_error(R"({"tools":{"type":"function"}})");
  CHECK(e.param == "tools");
  CHECK(e.message == "tools must be an array of tool objects");
  e = tools_error(R"({"tools":["get_weather"]})");
  CHECK(e.param == "tools");
  CHECK(e.message == "each tool must be an object");
  e = tools_error(R"({"parallel_tool_calls":"yes"})");
  CHECK(e.param == "parallel_tool_calls");
  CHECK(e.message == "parallel_tool_calls must be a boolean");
  e = tools_error(R"({"tools":[)" + kWeather + R"(],"tool_choice":"always"})");
  CHECK(e.param == "tool_choice");
  CHECK(e.message == R"(tool_choice must be auto, none, required or {"type": "function", ...})");
  for (const char* choice : {R"({"type":"function"})", R"({"function":"get_weather"})", R"({"function":{"name":3}})",
                             "7"}) {
    INFO(choice);
    e = tools_error(R"({"tools":[)" + kWeather + R"(],"tool_choice":)" + choice + "}");
    CHECK(e.param == "tool_choice");
    CHECK(e.message ==
          R"(tool_choice must be auto, none, required or {"type": "function", "function": {"name": ...}})");
  }
}

TEST_CASE("openai tools: a choice that must call a function needs tools to call") {
  auto e = tools_error(R"({"tool_choice":"required"})");
  CHECK(e.param == "tool_choice");
  CHECK(e.message == "tool_choice required needs tools");
  e = tools_error(R"({"tools":[],"tool_choice":{"type":"function","function":{"name":"get_weather"}}})");
  CHECK(e.param == "tool_choice");
  CHECK(e.message == "tool_choice naming a function needs tools");
}

TEST_CASE("openai tools: a message's role and content, developer read as system, text parts joined") {
  auto m = message_ok(R"({"role":"user","content":"hello"})");
  CHECK(m.role == "user");
  CHECK(m.content == "hello");
  CHECK(m.tool_calls.empty());
  CHECK(m.tool_call_id.empty());
  CHECK(message_ok(R"({"role":"developer","content":"be brief"})").role == "system");
  const auto parts =
      message_ok(R"({"role":"user","content":[{"type":"text","text":"one "},{"type":"text","text":"two"}]})");
  CHECK(parts.content == "one two");
  CHECK(message_ok(R"({"role":"assistant","content":null})").content.empty());
  CHECK(message_ok(R"({"role":"assistant"})").content.empty());
  CHECK(message_ok(R"({"role":"user","content":[]})").content.empty());
  // What was read before is not kept.
  messages::ChatMessageFields f{"tool", "old", {{"id", "n", "{}"}}, "call_old"};
  REQUIRE_FALSE(read_openai_message(json::parse(R"({"role":"user","content":"new"})"), 0, f));
  CHECK(f.content == "new");
  CHECK(f.tool_calls.empty());
  CHECK(f.tool_call_id.empty());
}

TEST_CASE("openai tools: a message without a role or with content other than text is refused, naming its index") {
  for (const char* m : {R"("hello")", R"({"content":"x"})", R"({"role":1,"content":"x"})"}) {
    INFO(m);
    const auto e = message_error(m, 4);
    CHECK(e.param == "messages");
    CHECK(e.message == "each message needs a role");
  }
  auto e = message_error(R"({"role":"user","content":5})", 2);
  CHECK(e.param == "messages");
  CHECK(e.message == "message 2: content must be a string or text parts");
  e = message_error(R"({"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]})", 3);
  CHECK(e.message == "message 3: only text content parts are supported");
  e = message_error(R"({"role":"user","content":[{"type":"text","text":7}]})", 3);
  CHECK(e.message == "message 3: only text content parts are supported");
  e = message_error(R"({"role":"user","content":["plain"]})", 0);
  CHECK(e.message == "message 0: only text content parts are supported");
}

TEST_CASE("openai tools: an assistant's calls are read with their ids and arguments, as text or an object") {
  const auto m = message_ok(R"({"role":"assistant","content":null,"tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},
      {"type":"function","function":{"name":"get_time","arguments":{"zone":"CET","dst":true}}},
      {"id":"call_3","function":{"name":"ping"}}]})");
  REQUIRE(m.tool_calls.size() == 3);
  CHECK(m.tool_calls[0] == messages::ToolCallFields{"call_1", "get_weather", R"({"city": "Paris"})"});
  CHECK(m.tool_calls[1] == messages::ToolCallFields{"", "get_time", R"({"zone":"CET","dst":true})"});
  CHECK(m.tool_calls[2] == messages::ToolCallFields{"call_3", "ping", "{}"});
  CHECK(message_ok(R"({"role":"assistant","content":"hi","tool_calls":null})").tool_calls.empty());
}

TEST_CASE("openai tools: calls anywhere but on an assistant, or without a function name, are refused") {
  auto e = message_error(R"({"role":"user","content":"x","tool_calls":[]})", 1);
  CHECK(e.param == "messages");
  CHECK(e.message == "message 1: only an assistant message has tool_calls");
  e = message_error(R"({"role":"assistant","tool_calls":{"id":"c"}})", 1);
  CHECK(e.message == "message 1: tool_calls must be an array");
  for (const char* call : {R"("call")", R"({"id":"c"})", R"({"function":"f"})", R"({"function":{"arguments":"{}"}})",
                           R"({"function":{"name":5}})"}) {
    INFO(call);
    e = message_error(std::string(R"({"role":"assistant","tool_calls":[)") + call + "]}", 6);
    CHECK(e.param == "messages");
    CHECK(e.message == "message 6: each tool call needs function.name");
  }
}

TEST_CASE("openai tools: a tool message names the call it answers, or is refused") {
  const auto m = message_ok(R"({"role":"tool","tool_call_id":"call_1","content":"18 C"})");
  CHECK(m.role == "tool");
  CHECK(m.tool_call_id == "call_1");
  CHECK(m.content == "18 C");
  for (const char* t : {R"({"role":"tool","content":"18 C"})", R"({"role":"tool","tool_call_id":"","content":"x"})",
                        R"({"role":"tool","tool_call_id":7,"content":"x"})"}) {
    INFO(t);
    const auto e = message_error(t, 3);
    CHECK(e.param == "messages");
    CHECK(e.message == "message 3: a tool message needs the tool_call_id of the call it answers");
  }
  // tool_call_id is a tool message's: another role's is not read.
  CHECK(message_ok(R"({"role":"user","tool_call_id":"call_1","content":"x"})").tool_call_id.empty());
}

TEST_CASE("openai tools: an answer's calls stream as deltas that join to the calls and ids Done gives") {
  const auto done = answer_calls(ChatFormat::chatml, kAnswer, 42);
  REQUIRE(done.size() == 2);
  for (const size_t piece : {size_t{1}, size_t{5}, kAnswer.size()}) {
    INFO("pieces of " << piece << " bytes");
    const Streamed s = stream(kAnswer, 42, piece);
    CHECK(s.content == answer_content(kAnswer));
    REQUIRE(s.calls.size() == 2);
    CHECK(s.calls[0] == done[0]);
    CHECK(s.calls[1] == done[1]);
  }
  CHECK(done[0].name == "get_weather");
  CHECK(json::parse(done[1].arguments) == json::parse(R"({"zone": "CET"})"));
  // Another seed (another conversation): other ids for the same calls.
  const Streamed other = stream(kAnswer, 43, 7);
  REQUIRE(other.calls.size() == 2);
  CHECK(other.calls[0].id != done[0].id);
  CHECK(other.calls[0].name == done[0].name);
}

TEST_CASE("openai tools: an answer without calls streams as content only, and shows all of its text") {
  const std::string text = "No tools needed: it is 18 C in Paris.";
  const Streamed s = stream(text, 1, 4);
  CHECK(s.content == text);
  CHECK(s.calls.empty());
  CHECK(answer_content(text) == text);
  CHECK(answer_content("").empty());
  OpenAiToolStream nothing;
  CHECK(nothing.finish().empty());
}

TEST_CASE("openai tools: the content an answer with calls shows is the text before its first call") {
  CHECK(answer_content(kAnswer) == "Let me look.");
  const std::string only_calls = kAnswer.substr(kAnswer.find("<tool_call>"));
  CHECK(answer_content(only_calls).empty());
  CHECK(stream(only_calls, 1, 3).content.empty());
}

TEST_CASE("openai tools: a call cut off mid-arguments is streamed with the arguments it wrote") {
  const std::string cut = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
  const Streamed s = stream(cut, 5, 4);
  REQUIRE(s.calls.size() == 1);
  CHECK(s.calls[0].name == "get_weather");
  const auto done = answer_calls(ChatFormat::chatml, cut, 5);
  REQUIRE(done.size() == 1);
  CHECK(s.calls[0] == done[0]);
}
