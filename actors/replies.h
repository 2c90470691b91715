#pragma once
// Where a response frame goes: to a client's connection, through the
// gateway's socket thread, or, for the server's own requests (internal
// peers: batch job items), to the job actor. Thread-safe; every actor that
// answers clients holds one.
#include <memory>
#include <string>

#include "actors/interfaces.h"
#include "messages/client_frames.h"

namespace troupe::gateways {
class ClientGateway;
class HttpGateway;
}  // namespace troupe::gateways

namespace troupe::actors {

class Replies {
 public:
  explicit Replies(std::shared_ptr<gateways::ClientGateway> gateway) : gateway_(std::move(gateway)) {}
  // Once, before any request arrives (the job actor is spawned after the
  // actors that answer it).
  void set_jobs(job_actor jobs) { jobs_ = std::move(jobs); }
  void set_http(std::shared_ptr<gateways::HttpGateway> http) { http_ = std::move(http); }
  void send(const std::string& peer, uint64_t client_id, const messages::Bytes& bytes) const;

 private:
  std::shared_ptr<gateways::ClientGateway> gateway_;
  job_actor jobs_;
  std::shared_ptr<gateways::HttpGateway> http_;
};

}  // namespace troupe::actors
