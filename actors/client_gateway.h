#pragma once
// The service's one client socket: a ROUTER owned by its own thread, so
// socket I/O never runs on an actor's or the engine's thread. Incoming
// frames go to the ingestion actor as (request, peer, bytes); anything may
// send responses from any thread through send(), which hands them to the
// socket thread over an inproc pipe. A peer the ROUTER can no longer reach
// (heartbeat timeout, closed connection) is reported as (gone, peer).
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "actors/interfaces.h"
#include "messages/client_frames.h"
#include "messages/zmq_sockets.h"

namespace troupe::actors {

class ClientGateway {
 public:
  ClientGateway(const std::string& endpoint, const messages::SocketLimits& limits);
  ~ClientGateway();
  ClientGateway(const ClientGateway&) = delete;
  ClientGateway& operator=(const ClientGateway&) = delete;

  void start(ingestion_actor ingestion);  // begins reading; frames before this wait in the socket
  void stop();
  // Thread-safe: queues one response frame for `peer`.
  void send(const std::string& peer, const messages::Bytes& payload);

 private:
  void loop();

  zmq::context_t ctx_;
  zmq::socket_t router_;
  zmq::socket_t inbox_;   // PULL, on the socket thread
  zmq::socket_t outbox_;  // PUSH, shared by senders under mutex_
  std::mutex mutex_;
  std::string inbox_endpoint_;
  ingestion_actor ingestion_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace troupe::actors
