#pragma once
// The front end's join socket (`troupe serve --join-listen`): workers that
// announce themselves (`troupe worker --join`, messages/join.fbs) are handed
// to `admit`, which dials the worker back, checks it as it would check a
// `--worker` given at start, and adds it, or says why not. A ROUTER on its
// own thread: an admission dials and waits on a worker, which must not stall
// an actor. Under CURVE a ZapHandler admits only keys in --clients-dir.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "messages/curve_auth.h"

namespace troupe::gateways {

class JoinListener {
 public:
  // The answer to a worker at `endpoint`: "" accepted, else why not; no
  // value: no answer yet (the worker asks again).
  using Admit = std::function<std::optional<std::string>(const std::string& endpoint, uint64_t instance)>;
  // `clients` non-null: CURVE with `curve` as the server's pair.
  JoinListener(const std::string& endpoint, Admit admit, const messages::CurveKeys& curve = {},
               std::shared_ptr<const messages::ClientDirectory> clients = nullptr);
  ~JoinListener();
  JoinListener(const JoinListener&) = delete;
  JoinListener& operator=(const JoinListener&) = delete;

 private:
  void loop();
  Admit admit_;
  zmq::context_t ctx_;
  std::unique_ptr<messages::ZapHandler> zap_;  // before socket_: bound first, closed last
  zmq::socket_t socket_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace troupe::gateways
