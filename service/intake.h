#pragma once
// The socket thread's decisions about each client frame, before any actor
// sees it (actors/client_gateway): a Ping is answered on the spot; a prompt
// (Generate, ChatTurn, SubmitJob) waits for ingestion's tokenizer only while
// the backlog of prompts not yet read is under its bound, and is otherwise
// answered `overloaded` at once; everything else (Cancel, Stats, session and
// job queries, and frames that fail the gate, which ingestion rejects with
// their reason) goes ahead of queued prompts.
//
// So a flood from one client costs memory up to the bound and no latency to
// another client's control messages.
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "messages/client_frames.h"
#include "messages/client_validation.h"

namespace troupe::service {

struct IntakeLimits {
  int64_t max_frames = 256;        // prompts read from the socket, not yet through ingestion
  int64_t max_bytes = 64ll << 20;  // their bytes
};

// Shared by the socket thread (take) and ingestion (release): lock-free.
class IntakeBacklog {
 public:
  explicit IntakeBacklog(IntakeLimits limits = {}) : limits_(limits) {}
  bool try_take(size_t bytes);  // false, and nothing taken, when over either bound
  void release(size_t bytes);
  int64_t frames() const { return frames_.load(std::memory_order_relaxed); }
  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  const IntakeLimits& limits() const { return limits_; }

 private:
  IntakeLimits limits_;
  std::atomic<int64_t> frames_{0}, bytes_{0};
};

enum class IntakeLane : uint8_t {
  answered,  // `reply` is the answer (Pong, or Error overloaded); nothing else happens
  prompt,    // to ingestion, counted in the backlog (release when read)
  control,   // to ingestion ahead of prompts, not counted
};

struct IntakeDecision {
  IntakeLane lane = IntakeLane::control;
  messages::Bytes reply;
};

IntakeDecision classify_frame(std::string_view bytes, const messages::ClientLimits& limits, IntakeBacklog& backlog);

}  // namespace troupe::service
