#pragma once
// The service's one client socket: a ROUTER owned by its own thread, so
// socket I/O never runs on an actor's or the engine's thread. Incoming
// frames go to the service's intake (gateways/frame_intake.h); anything may
// send responses from any thread through send(), which hands them to the
// socket thread over an inproc pipe. A peer the ROUTER can no longer reach
// (heartbeat timeout, closed connection) is reported as (gone, peer).
// Under CURVE a ZapHandler admits only known client keys, and each frame
// goes on with the name its sender authenticated as.
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "gateways/frame_intake.h"
#include "messages/client_frames.h"
#include "messages/client_validation.h"
#include "messages/curve_auth.h"
#include "messages/zmq_sockets.h"
#include "service/intake.h"

namespace troupe::gateways {

class ClientGateway {
 public:
  // `clients` non-null: CURVE with `curve` as the server's pair.
  ClientGateway(const std::string& endpoint, const messages::SocketLimits& limits, const messages::CurveKeys& curve = {},
                std::shared_ptr<const messages::ClientDirectory> clients = nullptr);
  ~ClientGateway();
  ClientGateway(const ClientGateway&) = delete;
  ClientGateway& operator=(const ClientGateway&) = delete;

  // Begins reading; frames before this wait in the socket. Each frame is
  // classified first (service/intake.h): Pings and overload refusals are
  // answered here, on the socket thread.
  void start(std::shared_ptr<FrameIntake> intake, std::shared_ptr<service::IntakeBacklog> backlog,
             const messages::ClientLimits& limits);
  void stop();
  // Where it listens ("tcp://127.0.0.1:*" bound to a free port says which); before start().
  std::string endpoint() const;
  // Thread-safe: queues one response frame for `peer`.
  void send(const std::string& peer, const messages::Bytes& payload);

 private:
  void loop();
  void route(zmq::message_t& id, const zmq::message_t& body);
  // Under CURVE the client's name; without, its host or process (messages::anonymous_peer).
  std::string client_name(const zmq::message_t& body) const;
  bool deliver(const zmq::message_t& peer, const zmq::message_t& body);  // false: the peer is gone or not reading

  zmq::context_t ctx_;
  std::unique_ptr<messages::ZapHandler> zap_;  // before router_: bound first, closed last
  zmq::socket_t router_;
  zmq::socket_t inbox_;   // PULL, on the socket thread
  zmq::socket_t outbox_;  // PUSH, shared by senders under mutex_
  std::mutex mutex_;
  std::string inbox_endpoint_;
  std::shared_ptr<FrameIntake> intake_;
  std::shared_ptr<service::IntakeBacklog> backlog_;
  messages::ClientLimits limits_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace troupe::gateways
