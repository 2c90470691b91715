// Tool calls end to end over ZeroMQ (ChatTurn.tools): `troupe serve` on the
// synthetic model, whose answers are arbitrary; the grammar makes them calls
// whose arguments validate, checked here by reading the JSON (not by
// troupe's grammar). Sessions keep the calls and their results; results
// that answer no call, and tools the engine cannot hold, are refused.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "engine/chat_tools.h"
#include "engine/gguf_file.h"
#include "messages/client_connection.h"
#include "messages/session_frames.h"
#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;

namespace {

const std::string kWeather =
    R"({"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": )"
    R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", )"
    R"("minimum": 1, "maximum": 7}}, "required": ["city", "days"]}}})";
const std::string kTime =
    R"({"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": )"
    R"({"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}})";

messages::ChatTurnFields turn_with_tools(const std::string& session, std::vector<messages::ChatMessageFields> msgs,
                                         wire::ToolChoice choice, const std::string& name = "") {
  messages::ChatTurnFields t;
  t.session_id = session;
  t.messages = std::move(msgs);
  t.sampling = greedy(96);
  t.tools.tools = {kWeather, kTime};
  t.tools.choice = choice;
  t.tools.name = name;
  return t;
}

messages::StreamOutcome send_turn(const std::string& endpoint, const messages::ChatTurnFields& t) {
  messages::ClientConnection c(endpoint);
  const uint64_t id = c.next_id();
  return c.stream(messages::chat_request(id, t), id, {}, 60s, t.n);
}

// Whether a call's arguments hold its tool's schema (read as JSON, checked by hand).
bool valid_call(const messages::ToolCallFields& call) {
  const auto a = nlohmann::json::parse(call.arguments, nullptr, false);
  if (a.is_discarded() || !a.is_object()) return false;
  if (call.name == "get_weather")
    return a.size() == 2 && a.contains("city") && a["city"].is_string() && a["city"].get<std::string>().size() <= 12 &&
           a.contains("days") && a["days"].is_number_integer() && a["days"] >= 1 && a["days"] <= 7;
  if (call.name == "get_time") return a.size() == 1 && a.contains("zone") && (a["zone"] == "UTC" || a["zone"] == "CET");
  return false;
}

}  // namespace

TEST_CASE("required and named tool choices answer with calls whose arguments hold their schemas", "[service]") {
  Server server("tools");
  const auto required = send_turn(server.endpoint, turn_with_tools("", {{"user", "Weather in Oslo for 3 days?"}},
                                                                   wire::ToolChoice::required));
  INFO(required.message << " text: " << required.text);
  REQUIRE(required.done);
  CHECK(required.usage.reason == wire::FinishReason::tool_calls);
  REQUIRE_FALSE(required.usage.tool_calls.empty());
  for (const auto& call : required.usage.tool_calls) {
    INFO(call.name << " " << call.arguments);
    CHECK(valid_call(call));
    CHECK(call.id.starts_with("call_"));
  }
  // The streamed text is the calls as the model wrote them; read back, the same calls.
  const ParsedAnswer parsed = parse_tool_calls(ChatFormat::chatml, required.text);
  REQUIRE(parsed.calls.size() == required.usage.tool_calls.size());
  for (size_t i = 0; i < parsed.calls.size(); ++i) {
    CHECK(parsed.calls[i].name == required.usage.tool_calls[i].name);
    CHECK(parsed.calls[i].arguments == required.usage.tool_calls[i].arguments);
  }

  auto one = turn_with_tools("", {{"user", "What time is it?"}}, wire::ToolChoice::named, "get_time");
  one.tools.parallel = false;
  const auto named = send_turn(server.endpoint, one);
  REQUIRE(named.done);
  REQUIRE(named.usage.tool_calls.size() == 1);
  CHECK(named.usage.tool_calls[0].name == "get_time");
  CHECK(valid_call(named.usage.tool_calls[0]));

  // n = 2: each sample's answer is read for its own calls.
  auto two = turn_with_tools("", {{"user", "Weather in Oslo?"}}, wire::ToolChoice::required);
  two.n = 2;
  two.sampling.temperature = 0.9f;
  two.sampling.seed = 7;
  const auto both = send_turn(server.endpoint, two);
  REQUIRE(both.done);
  REQUIRE(both.sample_done.size() == 2);
  CHECK(both.sample_done[0].reason == wire::FinishReason::tool_calls);
  CHECK(both.sample_done[1].reason == wire::FinishReason::tool_calls);

  // none: the model is not told of the tools, and nothing is read as a call.
  const auto none = send_turn(server.endpoint, turn_with_tools("", {{"user", "Hi"}}, wire::ToolChoice::none));
  REQUIRE(none.done);
  CHECK(none.usage.tool_calls.empty());
  const auto plain = send_turn(server.endpoint, [] {
    messages::ChatTurnFields t;
    t.messages = {{"user", "Hi"}};
    t.sampling = greedy(96);
    return t;
  }());
  CHECK(none.usage.prompt_tokens == plain.usage.prompt_tokens);
  CHECK(required.usage.prompt_tokens > plain.usage.prompt_tokens + 50);  // the tools are in its prompt
}

TEST_CASE("a tool loop: the assistant's calls and their results go back into the conversation, in a session too",
          "[service]") {
  Server server("toolloop");
  const auto first = send_turn(server.endpoint, turn_with_tools("", {{"user", "Weather in Oslo?"}}, wire::ToolChoice::required));
  REQUIRE(first.done);
  REQUIRE_FALSE(first.usage.tool_calls.empty());
  const auto& call = first.usage.tool_calls[0];

  // Stateless: the client sends the calls back with their results.
  std::vector<messages::ChatMessageFields> history = {{"user", "Weather in Oslo?"},
                                                      {"assistant", "", first.usage.tool_calls},
                                                      {"tool", "sunny, 21 C", {}, call.id}};
  const auto answer = send_turn(server.endpoint, turn_with_tools("", history, wire::ToolChoice::auto_));
  INFO(answer.message);
  REQUIRE(answer.done);
  for (const auto& c : answer.usage.tool_calls) CHECK(valid_call(c));
  // A result for a call nobody made is refused, and says which.
  history[2].tool_call_id = "call_nobody";
  const auto orphan = send_turn(server.endpoint, turn_with_tools("", history, wire::ToolChoice::auto_));
  CHECK_FALSE(orphan.done);
  CHECK(orphan.error == wire::ErrorCode::invalid_field);
  CHECK_THAT(orphan.message, Catch::Contains("call_nobody"));

  // A session: the calls are stored as the model wrote them; the next turn's
  // result names a call by the id the server gave it.
  const auto s1 = send_turn(server.endpoint, turn_with_tools("loop", {{"user", "Weather in Oslo?"}}, wire::ToolChoice::required));
  REQUIRE(s1.done);
  REQUIRE_FALSE(s1.usage.tool_calls.empty());
  const auto s2 = send_turn(server.endpoint,
                            turn_with_tools("loop", {{"tool", "sunny", {}, s1.usage.tool_calls[0].id}}, wire::ToolChoice::auto_));
  INFO(s2.message);
  REQUIRE(s2.done);
  const auto bad = send_turn(server.endpoint, turn_with_tools("loop", {{"tool", "sunny", {}, "call_x"}}, wire::ToolChoice::auto_));
  CHECK(bad.error == wire::ErrorCode::invalid_field);
  // The stored session holds the call's text, and the result as a tool message.
  messages::ClientConnection c(server.endpoint);
  const uint64_t id = c.next_id();
  c.send(messages::show_session_request(id, "loop"));
  std::optional<messages::Bytes> f;
  while ((f = c.receive(10s)) && messages::check_response(*f)->client_request_id() != id) {
  }
  REQUIRE(f);
  const auto* s = messages::check_response(*f)->body_as_Session();
  REQUIRE(s);
  REQUIRE(s->messages()->size() == 4);
  CHECK(s->messages()->Get(1)->content()->str() == s1.text);
  CHECK(s->messages()->Get(2)->role()->str() == "tool");
}

TEST_CASE("bad tools get one line naming the field, and the server serves on", "[service]") {
  Server server("toolsbad");
  auto refused = [&](std::vector<std::string> tools, wire::ToolChoice choice = wire::ToolChoice::auto_,
                     const std::string& name = "") {
    auto t = turn_with_tools("", {{"user", "Hi"}}, choice, name);
    t.tools.tools = std::move(tools);
    const auto out = send_turn(server.endpoint, t);
    CHECK_FALSE(out.done);
    CHECK(out.error == wire::ErrorCode::invalid_field);
    return out.message;
  };
  CHECK_THAT(refused({R"({"type": "function", "function": {"parameters": {}}})"}), Catch::Contains("function.name"));
  CHECK_THAT(refused({"not json"}), Catch::Contains("tools[0]"));
  CHECK_THAT(refused({kWeather, kWeather}), Catch::Contains("given twice"));
  CHECK_THAT(refused({R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": )"
                      R"({"x": {"type": "string", "pattern": "(?<=a)b"}}}}})"}),
             Catch::Contains("/tools/f/parameters/properties/x"));
  CHECK_THAT(refused({kWeather}, wire::ToolChoice::named, "get_time"), Catch::Contains("not among the tools"));
  // A call whose arguments are not an object, sent back by a client.
  auto t = turn_with_tools("", {{"user", "Hi"}, {"assistant", "", {{"call_1", "get_time", "[1]"}}}}, wire::ToolChoice::auto_);
  const auto args = send_turn(server.endpoint, t);
  CHECK(args.error == wire::ErrorCode::invalid_field);
  // Tools and a response format: a JSON object, or calls; nothing else.
  auto both = turn_with_tools("", {{"user", "Hi"}}, wire::ToolChoice::auto_);
  both.sampling.constraint.kind = static_cast<uint8_t>(wire::ConstraintKind::json_object);
  const auto either = send_turn(server.endpoint, both);
  REQUIRE(either.done);
  const auto object = nlohmann::json::parse(either.text, nullptr, false);
  CHECK((!either.usage.tool_calls.empty() || (!object.is_discarded() && object.is_object())));
  // Everyone else is served.
  const auto ok = send_turn(server.endpoint, turn_with_tools("", {{"user", "Hi"}}, wire::ToolChoice::required));
  CHECK(ok.done);
}
