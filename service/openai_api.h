#pragma once
// OpenAI's HTTP API in troupe's terms, with no socket in sight: a
// /v1/chat/completions or /v1/completions body becomes the client Request a
// ZeroMQ client would send, and the Response frames that stream back become
// OpenAI's JSON (whole, or SSE chunks). docs/HTTP.md lists the fields and
// where troupe differs from OpenAI.
#include <cstdint>
#include <optional>
#include <variant>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "messages/client_frames.h"
#include "service/openai_tools.h"

namespace troupe {
class Tokenizer;
}

namespace troupe::service {

// An HTTP error as OpenAI writes it: {"error":{"message","type","param","code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the offending field, or empty
  std::string code;   // troupe's ErrorCode name, or a short tag
  std::string json() const;
};

// A 400 naming the request's field at fault (invalid_field).
inline ApiError bad_field(const std::string& param, const std::string& message) {
  return ApiError{400, message, param, "invalid_field"};
}

struct CompletionCall {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t n = 1;
  bool tools = false;         // a chat with tools: answers may call them (service/openai_tools.h)
  bool logprobs = false;
  int32_t top_logprobs = 0;
  std::string model;          // echoed back
  messages::ChatTurnFields turn;  // chat: the turn `request` holds
  messages::Bytes request;    // the client Request (id 1)
};

// `session_header`: the X-Troupe-Session header (the body's `session` wins).
// `models`: names the server answers to (the first is echoed when none is asked).
std::variant<CompletionCall, ApiError> parse_completion(const std::string& body, bool chat,
                                                        const std::string& session_header,
                                                        const std::vector<std::string>& models, int32_t max_tokens);

// A client's JSON object's string field, or `fallback` when it is absent or
// not a string (nlohmann's value() throws on another type: a 500 for a 400).
std::string string_field(const nlohmann::ordered_json& object, const char* key, const std::string& fallback = {});

// A FinishReason as OpenAI names it (length, stop, tool_calls; troupe's grammar_blocked).
const char* finish_name(wire::FinishReason r);

// troupe's ErrorCode as an HTTP error (status per docs/HTTP.md).
ApiError api_error(wire::ErrorCode code, const std::string& message);

// An HTTP answer assembled from a request's Response frames: whole, or as
// server-sent events while they arrive.
class FrameReply {
 public:
  virtual ~FrameReply() = default;
  enum class Step { more, done, failed };
  // One Response frame; SSE events for it (streaming) are appended to `sse`.
  virtual Step take(const std::string& frame, std::string& sse) = 0;
  virtual const ApiError& error() const = 0;
  virtual std::string whole() const = 0;    // the non-streaming response body
  virtual std::string sse_end() const = 0;  // what a stream ends with once done
  // A stream that failed midway ends with this event.
  virtual std::string sse_error() const { return "data: " + error().json() + "\n\n"; }
};

// A chat completion or completion being assembled from its Response frames.
class CompletionReply : public FrameReply {
 public:
  // `tokenizer`: names the tokens of logprobs (null: their ids as text).
  CompletionReply(const CompletionCall& call, std::string id, int64_t created, const Tokenizer* tokenizer = nullptr);
  ~CompletionReply() override;  // where ordered_json is whole (the header has its declaration only)
  Step take(const std::string& frame, std::string& sse) override;
  const ApiError& error() const override { return error_; }
  std::string whole() const override;
  std::string sse_end() const override;  // usage chunk (if asked) and [DONE]

 private:
  std::string chunk(int32_t index, const std::string& delta_json, const char* finish,
                    const nlohmann::ordered_json* logprobs = nullptr) const;
  nlohmann::ordered_json entry(int32_t token, float logprob, const int32_t* top_ids, const float* top_lps, int32_t top) const;
  nlohmann::ordered_json choice_logprobs(const std::vector<nlohmann::ordered_json>& entries, size_t offset) const;
  void start(int32_t index, std::string& sse);
  Step take_tokens(const wire::Tokens& tokens, std::string& sse);
  Step take_done(const wire::Done& done, std::string& sse);
  std::vector<nlohmann::ordered_json> frame_logprobs(const wire::Tokens& tokens) const;
  nlohmann::ordered_json message(size_t index) const;
  CompletionCall call_;
  std::string id_;
  int64_t created_;
  std::vector<std::string> text_;
  std::vector<std::string> finish_;
  std::vector<bool> started_;
  std::vector<OpenAiToolStream> tool_streams_;                // per sample, when call_.tools
  std::vector<std::vector<messages::ToolCallFields>> calls_;  // per sample, from its Done
  const Tokenizer* tokenizer_;
  std::vector<std::vector<nlohmann::ordered_json>> logprobs_;  // per sample: one entry per token
  int32_t done_ = 0, prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  ApiError error_;
};

}  // namespace troupe::service
