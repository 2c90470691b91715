// Arbitrary bytes as what an HTTP client sends the OpenAI routes: a
// /v1/responses body, a multipart upload, a batch's JSONL input file, a
// /v1/batches body, a chat or a completions body (the first byte picks which).
//
// Properties: reading never throws; every request made is a whole Request
// buffer of the endpoint's body type (the request gate then judges it); a
// multipart field's bytes are bytes of the body; a batch holds as many
// requests as custom_ids, each unique.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "messages/verified_root.h"
#include "service/openai_batch.h"
#include "service/openai_responses.h"
#include "tests/fuzz/fuzz_support.h"

using namespace troupe;

namespace {

const std::vector<std::string> kModels{"m"};

void verified(const messages::Bytes& request, wire::RequestBody type, const char* what) {
  const auto* r = messages::verified_root<wire::Request>(request, nullptr);
  if (!r) fuzz::fail(what, "is not a readable Request");
  if (r->body_type() != type) fuzz::fail(what, "has another body type");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      auto r = service::parse_responses(body, kModels, 4096);
      if (auto* call = std::get_if<service::ResponsesCall>(&r)) verified(call->chat.request, wire::RequestBody::ChatTurn, "a Responses body's request");
      break;
    }
    case 1: {
      auto r = service::read_multipart("multipart/form-data; boundary=B", body);
      if (auto* fields = std::get_if<0>(&r))
        for (const auto& [name, field] : *fields)
          if (body.find(field.data) == std::string::npos) fuzz::fail("a field's bytes are not the body's", name);
      break;
    }
    case 2: {
      const bool chat = !(data[0] & 4);
      auto r = service::read_batch_lines(body, chat ? "/v1/chat/completions" : "/v1/completions", kModels, 4096, 64);
      if (auto* lines = std::get_if<service::BatchLines>(&r)) {
        if (lines->requests.size() != lines->custom_ids.size()) fuzz::fail("requests and custom_ids differ in number");
        if (std::set<std::string>(lines->custom_ids.begin(), lines->custom_ids.end()).size() != lines->custom_ids.size())
          fuzz::fail("a custom_id twice");
        for (const auto& q : lines->requests)
          verified(q, chat ? wire::RequestBody::ChatTurn : wire::RequestBody::Generate, "a batch line's request");
      }
      break;
    }
    case 4:
    case 5: {
      const bool chat = data[0] % 6 == 4;
      auto r = service::parse_completion(body, chat, "", kModels, 4096);
      if (auto* call = std::get_if<service::CompletionCall>(&r))
        verified(call->request, chat ? wire::RequestBody::ChatTurn : wire::RequestBody::Generate, "a chat or completions body's request");
      break;
    }
    default: {
      std::string input;
      auto r = service::batch_annotation(body, input);
      if (std::holds_alternative<std::string>(r) && input.empty()) fuzz::fail("a batch without its input file");
    }
  }
  return 0;
}
