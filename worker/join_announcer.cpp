#include "worker/join_announcer.h"

#include <cstdio>
#include <zmq.hpp>

#include "messages/join_frames.h"

namespace troupe::worker {

JoinAnnouncer::JoinAnnouncer(JoinOptions options, std::function<void(const std::string&)> on_refused)
    : options_(std::move(options)), on_refused_(std::move(on_refused)), thread_([this] { run(); }) {}

JoinAnnouncer::~JoinAnnouncer() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void JoinAnnouncer::stop() { stop_ = true; }

// Waits `d` unless stopped first.
static bool pause(const std::atomic<bool>& stop, std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (!stop && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return !stop;
}

void JoinAnnouncer::run() {
  zmq::context_t ctx(1);
  const std::string request = messages::join_request(options_.advertise, options_.instance);
  bool told_waiting = false;
  while (!stop_) {
    // A fresh socket per attempt: an announcement that was never answered
    // must not be delivered late, after a newer one.
    zmq::socket_t socket = messages::connect_dealer(ctx, options_.front, {}, options_.curve);
    socket.send(zmq::buffer(request), zmq::send_flags::dontwait);
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + options_.retry;
    bool answered = false;
    while (!stop_ && !answered && std::chrono::steady_clock::now() < deadline) {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      zmq::message_t m;
      if (!socket.recv(m, zmq::recv_flags::dontwait)) continue;
      const std::string bytes = m.to_string();  // the reply points into it
      const auto* reply = messages::check_join_reply(bytes);
      if (!reply) continue;
      answered = true;
      if (!reply->accepted()) {
        on_refused_(reply->reason() ? reply->reason()->str() : "refused");
        return;
      }
      if (!joined_.exchange(true)) {
        std::fprintf(stderr, "troupe worker: joined the front end at %s as %s\n", options_.front.c_str(),
                     options_.advertise.c_str());
        std::fflush(stderr);
      }
    }
    if (!answered) {
      joined_ = false;
      if (!told_waiting) {
        std::fprintf(stderr, "troupe worker: no front end answers at %s yet; announcing every %lld ms\n",
                     options_.front.c_str(), static_cast<long long>(options_.retry.count()));
        std::fflush(stderr);
        told_waiting = true;
      }
    }
    if (!pause(stop_, answered ? options_.every : std::chrono::milliseconds(0))) break;
  }
}

std::string advertised_endpoint(const std::string& listen) {
  for (const char* wildcard : {"tcp://*:", "tcp://0.0.0.0:", "tcp://[::]:"})
    if (listen.rfind(wildcard, 0) == 0) return "";
  return listen;
}

}  // namespace troupe::worker
