#pragma once
// The gate every client buffer passes before any field is read: the
// FlatBuffers verifier with explicit limits (size, depth, tables), then
// semantic checks (ranges, lengths, known enum values). A failure names the
// field, so the client's Error says exactly what to fix.
#include <cstdint>
#include <string>
#include <string_view>

#include "messages/client_generated.h"

namespace troupe::messages {

struct ClientLimits {
  size_t max_message_bytes = 4 << 20;  // also the socket's ZMQ_MAXMSGSIZE
  uint32_t max_depth = 16;
  // Verification's work bound. A table takes at least 4 bytes, so a message
  // within max_message_bytes holds no more than this: a long chat is then
  // refused by its count of messages (too_long), not as unverifiable.
  uint32_t max_tables = (4 << 20) / 4;
  size_t max_prompt_bytes = 1 << 20;
  uint32_t max_chat_messages = 512;
  int32_t max_tokens = 32768;
  uint32_t max_stop_strings = 16;
  size_t max_stop_bytes = 256;
  size_t max_session_id_bytes = 128;  // session and job ids
  uint32_t max_job_items = 10000;
};

struct Rejection {
  wire::ErrorCode code = wire::ErrorCode::none;
  std::string message;
  uint64_t client_request_id = 0;  // when the buffer was readable enough to tell
  explicit operator bool() const { return code != wire::ErrorCode::none; }
};

// The Request in `bytes` if it passes; otherwise nullptr and `why` says why.
// The returned table points into `bytes`.
const wire::Request* check_request(std::string_view bytes, const ClientLimits& limits, Rejection& why);

// The Response in `bytes` if it verifies (clients use this on what servers send).
const wire::Response* check_response(std::string_view bytes, size_t max_bytes = 64 << 20);

const char* error_code_name(wire::ErrorCode code);

}  // namespace troupe::messages
