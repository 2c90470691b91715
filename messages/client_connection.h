#pragma once
// The C++ client: one DEALER connection to `troupe serve`, request ids, and
// streaming a request's responses to callbacks until its Done or Error.
// Used by `troupe complete|chat|stats` and the end-to-end tests.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "messages/client_frames.h"
#include "messages/zmq_sockets.h"

namespace troupe::messages {

struct StreamOutcome {
  bool done = false;  // a Done arrived (else an Error, or the timeout)
  DoneFields usage;
  wire::ErrorCode error = wire::ErrorCode::none;
  std::string message;           // the Error's message, or "timed out"
  std::string text;              // every Tokens delta, concatenated
  std::vector<int32_t> tokens;   // every token id (of sample 0)
  std::vector<float> logprobs;   // when asked for: one per token id (of sample 0)
  std::vector<int32_t> top_ids;  // top_logprobs N: N per token id, most likely first
  std::vector<float> top_logprobs;
  int32_t prompt_tokens = 0;     // from Accepted
  std::vector<std::vector<int32_t>> sample_tokens;  // per sample, for requests with n > 1
  std::vector<DoneFields> sample_done;               // per sample
};

class ClientConnection {
 public:
  // `curve`: the client's pair and the server's public key, for a server under CURVE.
  explicit ClientConnection(const std::string& endpoint, const SocketLimits& limits = client_socket_limits(),
                            const CurveKeys& curve = {});
  ClientConnection(ClientConnection&&) = default;

  // A Ping answered by its Pong within `timeout`. ZeroMQ connects lazily and
  // queues what is sent, so this is how a client tells a dead endpoint from
  // a slow answer (other responses that arrive meanwhile are dropped).
  bool ping(std::chrono::milliseconds timeout);

  uint64_t next_id() { return ++last_id_; }
  void send(const Bytes& request);
  // The next response frame, verified; nullopt on timeout. Malformed frames throw.
  std::optional<Bytes> receive(std::chrono::milliseconds timeout);

  // Sends `request` (whose id is `id`) and collects its stream. on_text sees
  // each text delta as it arrives. Responses for other ids are dropped.
  // A request with n samples ends after n Done; on_text sees sample 0. An
  // empty `request`: the stream of request `id`, sent before.
  StreamOutcome stream(const Bytes& request, uint64_t id, const std::function<void(std::string_view)>& on_text = {},
                       std::chrono::milliseconds timeout = std::chrono::minutes(5), int32_t samples = 1);

 private:
  zmq::context_t ctx_;
  zmq::socket_t socket_;
  uint64_t last_id_ = 0;
};

}  // namespace troupe::messages
