// The Responses API translation (service/openai_responses.h): bodies and
// input items to a chat turn, ids to chains and turns, a chat answer's
// frames to a Response object and its events, a stored chain read back.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "messages/client_frames.h"
#include "messages/client_validation.h"
#include "messages/session_frames.h"
#include "service/openai_responses.h"
#include "service/tool_gate.h"

using namespace troupe;
using nlohmann::json;

namespace {

const std::vector<std::string> kModels{"m"};

service::ResponsesCall parse_ok(const std::string& body) {
  auto r = service::parse_responses(body, kModels, 4096);
  if (auto* e = std::get_if<service::ApiError>(&r)) FAIL("refused: " << e->param << ": " << e->message);
  return std::get<service::ResponsesCall>(r);
}

service::ApiError parse_error(const std::string& body) {
  auto r = service::parse_responses(body, kModels, 4096);
  REQUIRE(std::holds_alternative<service::ApiError>(r));
  return std::get<service::ApiError>(r);
}

// SSE text as (event name, data JSON) pairs.
std::vector<std::pair<std::string, json>> events(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  for (size_t at = 0; at < sse.size();) {
    const size_t end = sse.find("\n\n", at);
    REQUIRE(end != std::string::npos);
    const std::string e = sse.substr(at, end - at);
    const size_t nl = e.find('\n');
    REQUIRE(e.rfind("event: ", 0) == 0);
    REQUIRE(e.compare(nl + 1, 6, "data: ") == 0);
    out.emplace_back(e.substr(7, nl - 7), json::parse(e.substr(nl + 7)));
    at = end + 2;
  }
  return out;
}

}  // namespace

TEST_CASE("a response id names its chain and turn, and anything else is no id") {
  const auto id = service::read_response_id("resp_0123456789abcdef01234567_12");
  REQUIRE(id);
  CHECK(id->chain == "resp_0123456789abcdef01234567");
  CHECK(id->turn == 12);
  CHECK(id->str() == "resp_0123456789abcdef01234567_12");
  CHECK(service::read_response_id("resp_0123456789abcdef01234567")->turn == -1);
  for (const char* bad : {"", "resp_", "resp_0123456789ABCDEF01234567_1", "resp_0123456789abcdef01234567_",
                          "resp_0123456789abcdef01234567_1x", "resp_0123456789abcdef01234567_1234567890",
                          "msg_0123456789abcdef01234567_1", "resp_0123456789abcdef0123456_1"})
    CHECK_FALSE(service::read_response_id(bad));
  const std::string chain = service::new_chain();
  CHECK(service::read_response_id(chain + "_0"));
  CHECK(chain != service::new_chain());
}

TEST_CASE("instructions and input items become the turn's messages: calls join their answer, outputs name their call") {
  const auto call = parse_ok(R"({"model":"m","instructions":"be brief","max_output_tokens":9,"temperature":0,
      "input":[{"role":"developer","content":"use tools"},
               {"type":"message","role":"user","content":[{"type":"input_text","text":"weather "},{"type":"input_text","text":"in Oslo?"}]},
               {"role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
               {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\": \"Oslo\"}"},
               {"type":"function_call","call_id":"call_2","name":"get_time","arguments":"{}"},
               {"type":"function_call_output","call_id":"call_1","output":"sunny"},
               {"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"noon"}]}],
      "tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}},
               {"type":"function","name":"get_time","parameters":{"type":"object"}}],
      "tool_choice":{"type":"function","name":"get_time"}})");
  const auto& m = call.chat.turn.messages;
  REQUIRE(m.size() == 6);
  CHECK((m[0].role == "system" && m[0].content == "be brief"));
  CHECK((m[1].role == "system" && m[1].content == "use tools"));
  CHECK((m[2].role == "user" && m[2].content == "weather in Oslo?"));
  CHECK((m[3].role == "assistant" && m[3].content == "Checking."));
  REQUIRE(m[3].tool_calls.size() == 2);
  CHECK(m[3].tool_calls[0] == messages::ToolCallFields{"call_1", "get_weather", "{\"city\": \"Oslo\"}"});
  CHECK((m[4].role == "tool" && m[4].tool_call_id == "call_1" && m[4].content == "sunny"));
  CHECK((m[5].tool_call_id == "call_2" && m[5].content == "noon"));
  CHECK(call.chat.turn.tools.tools.size() == 2);
  CHECK(json::parse(call.chat.turn.tools.tools[0])["function"]["name"] == "get_weather");
  CHECK(call.chat.turn.tools.choice == wire::ToolChoice::named);
  CHECK(call.chat.turn.tools.name == "get_time");
  CHECK(call.chat.turn.sampling.max_tokens == 9);
  CHECK(call.store);
  CHECK(call.echo["instructions"] == "be brief");
  CHECK(call.echo["max_output_tokens"] == 9);
  CHECK(call.echo["tool_choice"]["name"] == "get_time");
}

TEST_CASE("text.format, logprobs, store and the chain's id are read, and a string input is the user's") {
  const auto call = parse_ok(R"({"input":"hi","store":false,"previous_response_id":"resp_0123456789abcdef01234567_0",
      "include":["message.output_text.logprobs"],"top_logprobs":3,"stream":true,
      "text":{"format":{"type":"json_schema","name":"x","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}})");
  REQUIRE(call.chat.turn.messages.size() == 1);
  CHECK(call.chat.turn.messages[0].role == "user");
  CHECK_FALSE(call.store);
  CHECK(call.previous == "resp_0123456789abcdef01234567_0");
  CHECK(call.chat.logprobs);
  CHECK(call.chat.top_logprobs == 3);
  CHECK(call.chat.stream);
  CHECK(call.chat.turn.sampling.constraint.kind == static_cast<uint8_t>(wire::ConstraintKind::json_schema));
  CHECK_FALSE(call.echo["store"].get<bool>());
}

TEST_CASE("what troupe cannot do is refused, the Responses field named") {
  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : {Case{R"({"model":"m"})", "input"},
                        Case{R"({"input":[]})", "input"},
                        Case{R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})",
                             "input[0].content[0].type"},
                        Case{R"({"input":[{"type":"item_reference","id":"x"}]})", "input[0].type"},
                        Case{R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})", "input[0].call_id"},
                        Case{R"({"input":[{"role":"critic","content":"x"}]})", "input[0].role"},
                        Case{R"({"input":"x","tools":[{"type":"file_search"}]})", "tools[0].type"},
                        Case{R"({"input":"x","tools":[{"type":"function","parameters":{}}]})", "tools[0].name"},
                        Case{R"({"input":"x","max_output_tokens":0})", "max_output_tokens"},
                        Case{R"({"input":"x","text":{"format":{"type":"grammar"}}})", "text.format.type"},
                        Case{R"({"input":"x","background":true})", "background"},
                        Case{R"({"input":"x","conversation":"c"})", "conversation"},
                        Case{R"({"input":"x","store":"yes"})", "store"},
                        Case{R"({"input":"x","model":"other"})", "model"},
                        // Fields of another type than asked are the client's error, never the server's.
                        Case{R"({"input":[{"type":7}]})", "input[0].type"},
                        Case{R"({"input":[{"role":["user"],"content":"x"}]})", "input[0].role"},
                        Case{R"({"input":[{"role":"user","content":[{"type":{}}]}]})", "input[0].content[0].type"},
                        Case{R"({"input":"x","tools":[{"type":1}]})", "tools[0].type"},
                        Case{R"({"input":"x","text":{"format":{"type":null}}})", "text.format.type"},
                        Case{R"({"input":[{"role":"user","content":[{"type":"text","text":"a"}]}],"tool_choice":{"type":3}})",
                             "tool_choice"}}) {
    INFO(c.body);
    const service::ApiError e = parse_error(c.body);
    CHECK(e.param == c.param);
    CHECK(e.message.find(".function") == std::string::npos);
  }
}

TEST_CASE("a streamed answer with text and a call: the events in the Responses order, and the same object whole") {
  auto call = parse_ok(R"({"input":"x","stream":true,"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]})");
  service::ResponsesReply reply(call, "resp_0123456789abcdef01234567_2", 7);
  std::string sse;
  using Step = service::FrameReply::Step;
  CHECK(reply.take(messages::accepted_response(1, 5, 0, 99), sse) == Step::more);
  const std::string text = "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  for (size_t i = 0; i < text.size(); i += 7)
    CHECK(reply.take(messages::tokens_response(1, text.substr(i, 7), {}, {}, 0), sse) == Step::more);
  messages::DoneFields d;
  d.reason = wire::FinishReason::tool_calls;
  d.prompt_tokens = 5, d.cached_prompt_tokens = 4, d.completion_tokens = 20;
  d.tool_calls = service::answer_calls(ChatFormat::qwen2, text, 99);  // the ids the stream named
  CHECK(reply.take(messages::done_response(1, d), sse) == Step::done);
  CHECK(reply.sse_end().empty());
  const auto ev = events(sse);
  std::vector<std::string> types;
  std::string deltas, args;
  for (size_t i = 0; i < ev.size(); ++i) {
    CHECK(ev[i].first == ev[i].second["type"]);
    CHECK(ev[i].second["sequence_number"] == i);
    types.push_back(ev[i].first);
    if (ev[i].first == "response.output_text.delta") deltas += ev[i].second["delta"].get<std::string>();
    if (ev[i].first == "response.function_call_arguments.delta") args += ev[i].second["delta"].get<std::string>();
  }
  types.erase(std::unique(types.begin(), types.end()), types.end());
  CHECK(types == std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                          "response.content_part.added", "response.output_text.delta",
                                          "response.output_text.done", "response.content_part.done",
                                          "response.output_item.done", "response.output_item.added",
                                          "response.function_call_arguments.delta",
                                          "response.function_call_arguments.done", "response.output_item.done",
                                          "response.completed"});
  CHECK(deltas == "Let me look.");
  CHECK(args == "{\"a\": 1}");
  const json whole = json::parse(reply.whole());
  CHECK(ev.back().second["response"] == whole);
  CHECK(whole["status"] == "completed");
  REQUIRE(whole["output"].size() == 2);
  CHECK(whole["output"][0]["content"][0]["text"] == "Let me look.");
  CHECK(whole["output"][0]["id"] == "msg_0123456789abcdef01234567_2");
  CHECK(whole["output"][1]["call_id"] == d.tool_calls[0].id);
  CHECK(whole["output"][1]["arguments"] == "{\"a\": 1}");
  CHECK(whole["usage"]["input_tokens"] == 5);
  CHECK(whole["usage"]["input_tokens_details"]["cached_tokens"] == 4);
  CHECK(whole["usage"]["total_tokens"] == 25);
  // The item a call opened with is the one it closed with.
  for (const auto& [type, e] : ev)
    if (type == "response.output_item.added" && e["item"]["type"] == "function_call") CHECK(e["item"]["id"] == whole["output"][1]["id"]);
}

TEST_CASE("an answer cut at max_output_tokens is incomplete, and an error mid-stream ends it failed") {
  auto call = parse_ok(R"({"input":"x","stream":true})");
  service::ResponsesReply reply(call, "resp_0123456789abcdef01234567", 7);
  std::string sse;
  reply.take(messages::tokens_response(1, "abc", {}, {}, 0), sse);
  messages::DoneFields d;
  d.reason = wire::FinishReason::length;
  reply.take(messages::done_response(1, d), sse);
  const auto ev = events(sse);
  CHECK(ev.back().first == "response.incomplete");
  CHECK(ev.back().second["response"]["incomplete_details"]["reason"] == "max_output_tokens");
  service::ResponsesReply broken(call, "resp_0123456789abcdef01234567", 7);
  CHECK(broken.take(messages::error_response(1, wire::ErrorCode::shutting_down, "draining"), sse) ==
        service::FrameReply::Step::failed);
  const auto failed = events(broken.sse_error());
  CHECK(failed.back().first == "response.failed");
  CHECK(failed.back().second["response"]["error"]["message"] == "draining");
}

TEST_CASE("a stored chain gives back each response, and its history up to one as a new conversation's") {
  messages::SessionSummaryFields summary;
  summary.session_id = "resp_0123456789abcdef01234567";
  summary.model = kModels.front();  // (a literal here trips GCC 12's false -Wrestrict)
  const std::string call_text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  const std::vector<messages::RoleContent> msgs{{"system", "be brief"}, {"user", "hi"},    {"assistant", "hello"},
                                                {"user", "call f"},     {"assistant", call_text}, {"tool", "42"},
                                                {"assistant", "it is 42"}};
  const std::vector<int32_t> per_turn{3, 2, 2};
  const std::vector<wire::TurnUsage> usage{{1000000, 10, 2, wire::FinishReason::stop},
                                           {2000000, 20, 9, wire::FinishReason::tool_calls},
                                           {3000000, 30, 4, wire::FinishReason::length}};
  const auto frame = messages::session_response(1, summary, msgs, {}, {}, per_turn, usage);
  const auto* s = messages::check_response(frame)->body_as_Session();
  const std::string chain = "resp_0123456789abcdef01234567";
  const json first = json::parse(*service::stored_response(*s, {chain, 0}, ChatFormat::qwen2));
  CHECK(first["output"][0]["content"][0]["text"] == "hello");
  CHECK(first["previous_response_id"].is_null());
  CHECK(first["created_at"] == 1000);
  CHECK(first["usage"]["input_tokens"] == 10);
  const json second = json::parse(*service::stored_response(*s, {chain, 1}, ChatFormat::qwen2));
  REQUIRE(second["output"].size() == 1);
  CHECK(second["output"][0]["type"] == "function_call");
  CHECK(second["output"][0]["arguments"] == "{\"a\": 1}");
  CHECK(second["previous_response_id"] == chain + "_0");
  const json third = json::parse(*service::stored_response(*s, {chain, 2}, ChatFormat::qwen2));
  CHECK(third["status"] == "incomplete");
  CHECK_FALSE(service::stored_response(*s, {chain, 3}, ChatFormat::qwen2));

  const auto history = service::chain_history(*s, 2, ChatFormat::qwen2);
  REQUIRE(history.size() == 7);
  CHECK(history[4].role == "assistant");
  CHECK(history[4].content.empty());
  REQUIRE(history[4].tool_calls.size() == 1);
  // The call's id is the one the stored response shows, and its result names it.
  CHECK(history[4].tool_calls[0].id == second["output"][0]["call_id"]);
  CHECK(history[5].tool_call_id == history[4].tool_calls[0].id);
  CHECK(service::chain_history(*s, 1, ChatFormat::qwen2).size() == 5);
  CHECK(service::chain_history(*s, 0, ChatFormat::qwen2).size() == 3);
}
