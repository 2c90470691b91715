#pragma once
// `troupe worker --join FRONT`: the worker announces itself to a front end's
// join socket (`troupe serve --join-listen`, messages/join.fbs) and keeps
// announcing, so that a front end that restarts, or one that was not up yet,
// learns of it. The front end dials back the advertised endpoint and checks
// the worker as it checks one given at its start; a refusal is final (the
// worker prints it and exits: another model will not become this one).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "messages/zmq_sockets.h"

namespace troupe::worker {

struct JoinOptions {
  std::string front;      // the front end's join endpoint
  std::string advertise;  // where the front end reaches this worker's steps
  uint64_t instance = 0;  // this worker process's id (StepResult.process)
  messages::CurveKeys curve;  // toward the front end (a client of its join socket)
  std::chrono::milliseconds retry{2000}, every{5000};
};

class JoinAnnouncer {
 public:
  // `on_refused(reason)` runs once, on the announcer's thread.
  JoinAnnouncer(JoinOptions options, std::function<void(const std::string&)> on_refused);
  ~JoinAnnouncer();  // stops announcing
  JoinAnnouncer(const JoinAnnouncer&) = delete;
  JoinAnnouncer& operator=(const JoinAnnouncer&) = delete;
  void stop();  // a draining worker stops announcing itself
  bool joined() const { return joined_; }

 private:
  void run();
  JoinOptions options_;
  std::function<void(const std::string&)> on_refused_;
  std::atomic<bool> stop_{false}, joined_{false};
  std::thread thread_;
};

// The endpoint to advertise when none is given: --listen itself, unless it
// is a wildcard address that nobody can dial (then empty).
std::string advertised_endpoint(const std::string& listen);

}  // namespace troupe::worker
