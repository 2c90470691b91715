// The OpenAI translation (service/openai_api.h): bodies to client Requests,
// Response frames to OpenAI's JSON, errors to status codes.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "messages/client_frames.h"
#include "messages/client_validation.h"
#include "service/openai_api.h"

using namespace troupe;
using nlohmann::json;

namespace {

const std::vector<std::string> kModels{"m"};

const wire::Request* request_of(const messages::Bytes& b) {
  messages::Rejection why;
  return messages::check_request(b, {}, why);
}

service::CompletionCall parse_ok(const std::string& body, bool chat, const std::string& header = "") {
  auto r = service::parse_completion(body, chat, header, kModels, 4096);
  if (auto* e = std::get_if<service::ApiError>(&r)) FAIL("refused: " << e->message);
  return std::get<service::CompletionCall>(r);
}

service::ApiError parse_error(const std::string& body, bool chat = true) {
  auto r = service::parse_completion(body, chat, "", kModels, 4096);
  REQUIRE(std::holds_alternative<service::ApiError>(r));
  return std::get<service::ApiError>(r);
}

}  // namespace

TEST_CASE("a chat body becomes a ChatTurn with every supported field") {
  const auto call = parse_ok(R"({"model":"m","messages":[{"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
      "max_tokens":7,"temperature":0.5,"top_p":0.9,"stop":["a","b"],"seed":42,"n":3,"presence_penalty":0.5,
      "frequency_penalty":-0.5,"logit_bias":{"5":-100,"9":2.5},"stream":true,"stream_options":{"include_usage":true},
      "troupe_speculation":"ngram"})",
                             true);
  CHECK(call.stream);
  CHECK(call.include_usage);
  CHECK(call.n == 3);
  const auto* req = request_of(call.request);
  REQUIRE(req);
  const auto* t = req->body_as_ChatTurn();
  REQUIRE(t);
  CHECK(t->n() == 3);
  CHECK(t->speculation() == wire::Speculation::ngram);
  REQUIRE(t->messages()->size() == 2);
  CHECK(t->messages()->Get(1)->content()->str() == "hi there");
  const messages::SamplingFields s = messages::read_sampling(t->sampling());
  CHECK(s.max_tokens == 7);
  CHECK(s.temperature == 0.5f);
  CHECK(s.top_p == 0.9f);
  CHECK(s.top_k == 0);  // OpenAI has no top-k cut
  CHECK(s.stop == std::vector<std::string>{"a", "b"});
  CHECK(s.seed == 42);
  CHECK(s.presence_penalty == 0.5f);
  CHECK(s.frequency_penalty == -0.5f);
  CHECK(s.logit_bias == std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {9, 2.5f}});
}

TEST_CASE("a session comes from the body or the X-Troupe-Session header, the body winning") {
  auto session_of = [](const service::CompletionCall& c) {
    return request_of(c.request)->body_as_ChatTurn()->session_id()->str();
  };
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  CHECK(session_of(parse_ok("{" + msgs + "}", true, "from-header")) == "from-header");
  CHECK(session_of(parse_ok("{" + msgs + R"(,"session":"from-body"})", true, "from-header")) == "from-body");
}

TEST_CASE("a completions body becomes a Generate, and a prompt list of one is taken") {
  const auto call = parse_ok(R"({"prompt":["def f():"],"max_tokens":3,"n":2})", false);
  const auto* g = request_of(call.request)->body_as_Generate();
  REQUIRE(g);
  CHECK(g->prompt()->str() == "def f():");
  CHECK(g->n() == 2);
}

TEST_CASE("bad bodies are refused with OpenAI's error object, the field named") {
  CHECK(parse_error("{not json").status == 400);
  CHECK(parse_error("[1]").status == 400);
  CHECK(parse_error(R"({"messages":[]})").param == "messages");
  CHECK(parse_error(R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})").param == "temperature");
  CHECK(parse_error(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})").param == "max_tokens");
  CHECK(parse_error(R"({"messages":[{"role":"user","content":"x"}],"n":1.5})").param == "n");
  CHECK(parse_error(R"({"messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})").param == "stop");
  CHECK(parse_error(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"x":1}})").param == "logit_bias");
  CHECK(parse_error(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"3":101}})").param == "logit_bias");
  CHECK(parse_error(R"({"messages":[{"role":"user","content":"x"}],"troupe_speculation":"fast"})").param ==
        "troupe_speculation");
  const service::ApiError unknown = parse_error(R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})");
  CHECK(unknown.status == 404);
  CHECK(unknown.code == "model_not_found");
  const json e = json::parse(unknown.json());
  CHECK(e["error"]["param"] == "model");
  CHECK(e["error"]["type"] == "invalid_request_error");
  CHECK(parse_error(R"({"prompt":"x","session":"s"})", false).param == "session");
}

TEST_CASE("troupe's error codes map to HTTP statuses") {
  CHECK(service::api_error(wire::ErrorCode::too_long, "").status == 413);
  CHECK(service::api_error(wire::ErrorCode::queue_full, "").status == 429);
  CHECK(service::api_error(wire::ErrorCode::overloaded, "").status == 429);
  CHECK(service::api_error(wire::ErrorCode::unknown_session, "").status == 404);
  CHECK(service::api_error(wire::ErrorCode::shutting_down, "").status == 503);
  CHECK(service::api_error(wire::ErrorCode::invalid_field, "").status == 400);
  CHECK(service::api_error(wire::ErrorCode::internal, "").status == 500);
}

TEST_CASE("frames become one chat.completion with usage, or SSE chunks ending in [DONE]") {
  auto call = parse_ok(R"({"messages":[{"role":"user","content":"x"}],"n":2,"stream":true,
                           "stream_options":{"include_usage":true}})",
                       true);
  service::CompletionReply reply(call, "chatcmpl-1", 7);
  std::string sse;
  using Step = service::CompletionReply::Step;
  CHECK(reply.take(messages::accepted_response(1, 5, 0), sse) == Step::more);
  CHECK(sse.empty());
  CHECK(reply.take(messages::tokens_response(1, "Hel", {}, {}, 0), sse) == Step::more);
  CHECK(reply.take(messages::tokens_response(1, "lo", {}, {}, 0), sse) == Step::more);
  CHECK(reply.take(messages::tokens_response(1, "Yo", {}, {}, 1), sse) == Step::more);
  messages::DoneFields d;
  d.reason = wire::FinishReason::stop_string;
  d.prompt_tokens = 5, d.cached_prompt_tokens = 2, d.completion_tokens = 2;
  CHECK(reply.take(messages::done_response(1, d), sse) == Step::more);
  d.sample = 1, d.reason = wire::FinishReason::length, d.completion_tokens = 1;
  CHECK(reply.take(messages::done_response(1, d), sse) == Step::done);
  sse += reply.sse_end();
  // Every event is "data: JSON" or the final [DONE].
  std::vector<json> chunks;
  for (size_t at = 0; at < sse.size();) {
    const size_t end = sse.find("\n\n", at);
    REQUIRE(end != std::string::npos);
    const std::string event = sse.substr(at, end - at);
    REQUIRE(event.rfind("data: ", 0) == 0);
    if (event != "data: [DONE]") chunks.push_back(json::parse(event.substr(6)));
    at = end + 2;
  }
  CHECK(sse.substr(sse.size() - 14) == "data: [DONE]\n\n");
  std::string text0;
  for (const auto& c : chunks)
    for (const auto& ch : c["choices"])
      if (ch["index"] == 0 && ch["delta"].contains("content")) text0 += ch["delta"]["content"].get<std::string>();
  CHECK(text0 == "Hello");
  const json& usage = chunks.back()["usage"];
  CHECK(chunks.back()["choices"].empty());
  CHECK(usage["prompt_tokens"] == 5);
  CHECK(usage["completion_tokens"] == 3);
  CHECK(usage["prompt_tokens_details"]["cached_tokens"] == 2);
  const json whole = json::parse(reply.whole());
  CHECK(whole["object"] == "chat.completion");
  CHECK(whole["choices"][0]["message"]["content"] == "Hello");
  CHECK(whole["choices"][0]["finish_reason"] == "stop");
  CHECK(whole["choices"][1]["finish_reason"] == "length");
  CHECK(whole["usage"]["total_tokens"] == 8);
}

TEST_CASE("an Error frame fails the reply with its status") {
  auto call = parse_ok(R"({"prompt":"x"})", false);
  service::CompletionReply reply(call, "cmpl-1", 7);
  std::string sse;
  CHECK(reply.take(messages::error_response(1, wire::ErrorCode::too_long, "the prompt has 9 tokens"), sse) ==
        service::CompletionReply::Step::failed);
  CHECK(reply.error().status == 413);
  CHECK(reply.error().message == "the prompt has 9 tokens");
}
