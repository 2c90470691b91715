#pragma once
// Where a gateway hands what its clients send: the frames themselves, and
// word that a client's connection is gone (its requests end, its pages go
// back). The gateways know no actors; the service's wiring implements this
// with the ingestion actor (actors/ingestion_actor.h: frame_intake), a test with a queue.
#include <string>

#include "messages/client_frames.h"

namespace troupe::gateways {

// A client's frame on its way from a gateway (ZeroMQ or HTTP) to ingestion.
struct ClientFrame {
  std::string peer;       // the gateway's id for the client's connection
  std::string client;     // the client's CURVE name, or ""
  messages::Bytes bytes;  // a client Request
  bool counted = false;   // a prompt counted in the intake backlog (service/intake.h); control frames are not
};

class FrameIntake {
 public:
  virtual ~FrameIntake() = default;
  // Thread-safe. A control frame (not counted) goes ahead of the prompts
  // waiting, so a cancel or a stats query never queues behind a flood.
  virtual void frame(ClientFrame frame) = 0;
  virtual void gone(const std::string& peer) = 0;
};

}  // namespace troupe::gateways
