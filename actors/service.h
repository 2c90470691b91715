#pragma once
// The service in one process: the model on its backend, the client socket,
// and the troupe of actors wired together (gateway → ingestion → scheduler
// ⇄ verifier, KV allocator, persistence, jobs). `troupe serve` runs one; the end-to-end tests start it as a
// separate process and talk to it as clients do.
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "service/service_options.h"

namespace troupe::actors {

using ServiceOptions = service::ServiceOptions;

// $XDG_DATA_HOME/troupe, else ~/.local/share/troupe.
std::filesystem::path default_data_dir();


class Service {
 public:
  explicit Service(ServiceOptions options);  // loads, binds and starts; throws on failure
  ~Service();                                // stops the socket, then the actors
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  std::string describe() const;
  // Graceful drain: admits nothing new (`shutting_down`, HTTP 503, /readyz
  // 503), lets running requests finish for up to `timeout`, ends the rest
  // with shutting_down, and waits until every finished session turn, its
  // spilled KV pages and every job result are in the store. Job items not
  // yet run stay stored and run after the next start. Returns the requests
  // it had to end.
  int32_t drain(std::chrono::milliseconds timeout);
  const std::string& events_endpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::actors
