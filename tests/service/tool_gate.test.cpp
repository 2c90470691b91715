// A turn's tools as the service admits them (service/tool_gate.h): tools read
// from their JSON with refusals naming the field, an assistant's calls folded
// into its text as the model writes them, tool results matched to calls, the
// calls' grammar, and call ids derived the same way wherever they are needed.
#include <catch2/catch.hpp>

#include "engine/grammar/constraint.h"
#include "messages/client_frames.h"
#include "messages/client_validation.h"
#include "service/tool_gate.h"

using namespace troupe;
using namespace troupe::service;

namespace {

const std::string kWeather =
    R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
    R"("properties":{"city":{"type":"string"}},"required":["city"]}}})";

// A ChatTurn as a client sends it, read back through the client check.
struct Turn {
  messages::Bytes bytes;
  const wire::ChatTurn* turn = nullptr;
  explicit Turn(const messages::ChatTurnFields& t) : bytes(messages::chat_request(1, t)) {
    messages::Rejection why;
    const auto* r = messages::check_request(bytes, {}, why);
    INFO(why.message);
    REQUIRE(r);
    turn = r->body_as_ChatTurn();
  }
};

messages::ChatTurnFields with_tools(std::vector<std::string> tools, wire::ToolChoice choice = wire::ToolChoice::auto_,
                                    std::string name = {}) {
  messages::ChatTurnFields t;
  t.messages.emplace_back("user", "Weather in Oslo?");
  t.tools.tools = std::move(tools);
  t.tools.choice = choice;
  t.tools.name = std::move(name);
  return t;
}

}  // namespace

TEST_CASE("tools are read from their JSON, and a bad one is refused naming its field") {
  ChatTools tools;
  Turn ok(with_tools({kWeather}, wire::ToolChoice::named, "get_weather"));
  REQUIRE_FALSE(read_tools(*ok.turn, tools));
  REQUIRE(tools.specs.size() == 1);
  CHECK(tools.specs[0].name == "get_weather");
  CHECK(tools.choice == ToolChoice::named);
  CHECK(tools.active());
  struct Case {
    std::vector<std::string> tools;
    wire::ToolChoice choice;
    std::string name, said;
  };
  for (const Case& c : {Case{{"[1]"}, wire::ToolChoice::auto_, "", "tools[0]: not a JSON object"},
                        Case{{R"({"type":"retrieval"})"}, wire::ToolChoice::auto_, "", "tools[0].type"},
                        Case{{R"({"type":7,"function":{"name":"f"}})"}, wire::ToolChoice::auto_, "", "tools[0].type"},
                        Case{{R"({"function":{"name":"a b"}})"}, wire::ToolChoice::auto_, "", "tools[0].function.name"},
                        Case{{R"({"function":{"name":"f","parameters":[1]}})"}, wire::ToolChoice::auto_, "",
                             "tools[0].function.parameters"},
                        Case{{kWeather, kWeather}, wire::ToolChoice::auto_, "", "given twice"},
                        Case{{kWeather}, wire::ToolChoice::named, "get_time", "tool_choice: names 'get_time'"}}) {
    Turn t(with_tools(c.tools, c.choice, c.name));
    const auto why = read_tools(*t.turn, tools);
    REQUIRE(why);
    CHECK_THAT(*why, Catch::Contains(c.said));
  }
}

TEST_CASE("an assistant's calls become its text as the model writes it, and results must answer a call") {
  messages::ChatTurnFields t = with_tools({kWeather});
  t.messages.emplace_back("assistant", "", std::vector<messages::ToolCallFields>{{"call_1", "get_weather", "{\"city\": \"Oslo\"}"}});
  t.messages.emplace_back("tool", "sunny", std::vector<messages::ToolCallFields>{}, "call_1");
  Turn turn(t);
  std::vector<ChatMessage> chat;
  std::vector<std::string> ids, results;
  REQUIRE_FALSE(read_messages(*turn.turn, ChatFormat::qwen2, chat, ids, results));
  REQUIRE(chat.size() == 3);
  CHECK(chat[1].content == "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>");
  CHECK(chat[2].role == "tool");
  CHECK(ids == std::vector<std::string>{"call_1"});
  CHECK(results == std::vector<std::string>{"call_1"});
  CHECK_FALSE(unanswered(results, ids));
  const std::vector<std::string> stray{"call_1", "call_9"};
  CHECK(unanswered(stray, ids) == "call_9");
  // A format without tools refuses a tool result.
  chat.clear(), ids.clear(), results.clear();
  const auto why = read_messages(*turn.turn, ChatFormat::gemma, chat, ids, results);
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("has no tool format"));
}

TEST_CASE("call ids derive from the conversation, the text before the call and its index, the same everywhere") {
  const std::vector<ChatMessage> before{{"user", "Weather in Oslo and Rome?"}};
  const uint64_t seed = conversation_seed(before);
  CHECK(seed == conversation_seed(before));
  CHECK(seed != conversation_seed(std::vector<ChatMessage>{{"user", "Weather in Rome and Oslo?"}}));
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"X\"}}\n</tool_call>";
  const std::string answer = "Both.\n" + call + "\n" + call;
  const auto calls = answer_calls(ChatFormat::qwen2, answer, seed);
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].id.rfind("call_", 0) == 0);
  CHECK(calls[0].id.size() == 5 + 16 + 2);
  CHECK(calls[0].id != calls[1].id);  // the same call twice: two ids
  CHECK(calls[0].id == tool_call_id(seed, "Both.\n", 0));
  CHECK(calls[0].arguments == "{\"city\": \"X\"}");
  // A stored conversation names the same calls again, under the seed of what came before each answer.
  std::vector<ChatMessage> stored = before;
  stored.push_back({"assistant", answer});
  stored.push_back({"tool", "sunny"});
  stored.push_back({"assistant", call});
  std::vector<ChatMessage> second_before(stored.begin(), stored.begin() + 3);
  const auto later = answer_calls(ChatFormat::qwen2, call, conversation_seed(second_before));
  CHECK(stored_call_ids(ChatFormat::qwen2, stored) ==
        std::vector<std::string>{calls[0].id, calls[1].id, later.at(0).id});
  CHECK(answer_calls(ChatFormat::gemma, answer, seed).empty());  // no tool format: no calls
}

TEST_CASE("active tools lower to the calls' grammar, refused where the format or a schema cannot hold them") {
  grammar::GrammarCache cache;
  ChatTools tools;
  Turn turn(with_tools({kWeather}, wire::ToolChoice::required));
  REQUIRE_FALSE(read_tools(*turn.turn, tools));
  messages::SamplingFields s;
  REQUIRE_FALSE(lower_tools(tools, ChatFormat::qwen2, s, cache));
  CHECK_THAT(s.grammar, Catch::Contains("tool_block"));
  CHECK(cache.compiled() == 1);
  messages::SamplingFields none;
  CHECK_THAT(*lower_tools(tools, ChatFormat::gemma, none, cache), Catch::Contains("has no tool format"));
  Turn refused(with_tools({R"({"function":{"name":"f","parameters":{"type":"number","multipleOf":0.01}}})"},
                          wire::ToolChoice::required));
  REQUIRE_FALSE(read_tools(*refused.turn, tools));
  const auto why = lower_tools(tools, ChatFormat::qwen2, none, cache);
  REQUIRE(why);
  CHECK_THAT(*why, Catch::Contains("/tools/f/parameters"));
  tools.choice = ToolChoice::none;
  messages::SamplingFields untouched;
  CHECK_FALSE(lower_tools(tools, ChatFormat::qwen2, untouched, cache));
  CHECK(untouched.grammar.empty());
}
