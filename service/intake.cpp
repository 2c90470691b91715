#include "service/intake.h"

namespace troupe::service {

bool IntakeBacklog::try_take(size_t bytes) {
  const auto n = static_cast<int64_t>(bytes);
  if (frames_.fetch_add(1, std::memory_order_relaxed) >= limits_.max_frames ||
      bytes_.fetch_add(n, std::memory_order_relaxed) + n > limits_.max_bytes) {
    release(bytes);
    return false;
  }
  return true;
}

void IntakeBacklog::release(size_t bytes) {
  frames_.fetch_sub(1, std::memory_order_relaxed);
  bytes_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

IntakeDecision classify_frame(std::string_view bytes, const messages::ClientLimits& limits, IntakeBacklog& backlog) {
  messages::Rejection why;
  const wire::Request* req = messages::check_request(bytes, limits, why);
  if (!req) return {};  // ingestion answers with the gate's reason
  const uint64_t id = req->client_request_id();
  switch (req->body_type()) {
    case wire::RequestBody::Ping: return {IntakeLane::answered, messages::pong_response(id, req->body_as_Ping()->nonce())};
    case wire::RequestBody::Generate:
    case wire::RequestBody::ChatTurn:
    case wire::RequestBody::SubmitJob:
      if (backlog.try_take(bytes.size())) return {IntakeLane::prompt, {}};
      return {IntakeLane::answered,
              messages::error_response(id, wire::ErrorCode::overloaded,
                                       "the server is reading " + std::to_string(backlog.frames()) + " prompts (" +
                                           std::to_string(backlog.bytes() >> 20) + " MiB) already; retry shortly")};
    default: return {};
  }
}

}  // namespace troupe::service
