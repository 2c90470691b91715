#pragma once
// OpenAI's Responses API in troupe's terms (docs/HTTP.md, "Responses"): a
// /v1/responses body becomes a chat turn; a chain of responses, each naming
// the one before by previous_response_id, is one stored session, and each
// response is a turn of it. So a chain lives as long as its session does,
// across restarts, and its prefix comes from the KV cache or the spilled
// pages. The chat answer's frames become a Response object, or the stream
// of typed events the Responses API sends.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/chat_template.h"
#include "service/openai_api.h"

namespace troupe::wire {
struct Session;
}

namespace troupe::service {

// A response's id names its chain (the session "resp_<24 hex>") and its turn
// there: "resp_<24 hex>_<turn>". A response not stored has no turn:
// "resp_<24 hex>".
struct ResponseId {
  std::string chain;
  int32_t turn = -1;  // -1: not stored
  std::string str() const;
};
std::optional<ResponseId> read_response_id(std::string_view id);
std::string new_chain();  // a fresh chain's session name, random

struct ResponsesCall {
  CompletionCall chat;          // the turn it runs as: chat.turn.messages is the new input
  std::string previous;         // previous_response_id ("" for a new chain)
  bool store = true;
  nlohmann::ordered_json echo;  // the request's settings a Response object repeats
};

// `models`, `max_tokens`: as parse_completion's.
std::variant<ResponsesCall, ApiError> parse_responses(const std::string& body, const std::vector<std::string>& models,
                                                      int32_t max_tokens);

// A stored chain's messages through turn `through`, as the start of a new
// conversation (a fork from an earlier response, or one not stored): an
// assistant's calls as its tool_calls, each tool result naming its call.
std::vector<messages::ChatMessageFields> chain_history(const wire::Session& chain, int32_t through, ChatFormat format);

// A stored response read back from its chain (GET /v1/responses/ID): the
// Response object, or nullopt when the chain has no such turn.
std::optional<std::string> stored_response(const wire::Session& chain, const ResponseId& id, ChatFormat format);

// A response being assembled from its chat turn's frames.
class ResponsesReply : public FrameReply {
 public:
  ResponsesReply(const ResponsesCall& call, std::string id, int64_t created, const Tokenizer* tokenizer = nullptr);
  Step take(const std::string& frame, std::string& sse) override;
  const ApiError& error() const override { return error_; }
  std::string whole() const override;
  std::string sse_end() const override { return {}; }  // the last event came with Done
  std::string sse_error() const override;

 private:
  nlohmann::ordered_json object(const char* status) const;  // the Response so far
  nlohmann::ordered_json finished_response() const;          // the Response once Done came
  void event(std::string& sse, const char* type, nlohmann::ordered_json body);
  void chunk(const nlohmann::ordered_json& c, std::string& sse);
  void close_items(std::string& sse);
  ResponsesCall call_;
  CompletionReply chat_;
  ApiError error_;  // the chat's, its fields named as the Responses body names them
  std::string id_;
  int64_t created_;
  mutable int64_t sequence_ = 0;
  // The stream's open items: the message (its text so far), the current call.
  nlohmann::ordered_json items_ = nlohmann::ordered_json::array();
  int32_t message_ = -1, open_call_ = -1;  // their indexes in items_, -1: none open
};

}  // namespace troupe::service
