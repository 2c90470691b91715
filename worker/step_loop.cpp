#include "worker/step_loop.h"

#include <cerrno>
#include <cstdio>
#include <zmq.hpp>

#include "messages/step_frames.h"
#include "worker/join_announcer.h"
#include "worker/step_runner.h"

namespace troupe::worker {

void StepLoop::run() {
  last_step_ = std::chrono::steady_clock::now();
  while (signals() < 2) {
    if (refused && *refused) return;
    const auto now = std::chrono::steady_clock::now();
    if (signals() == 1 && !draining_ && !start_drain(now)) return;
    if (draining_ && (now >= drain_until_ || now - last_step_ >= kDrainIdle)) return;
    zmq::message_t id, plan;
    if (!receive(id, plan)) continue;
    if (answer_plan(id, plan.to_string())) {
      std::fprintf(stderr, "troupe worker: every front end released this worker\n");
      return;
    }
  }
}

bool StepLoop::start_drain(std::chrono::steady_clock::time_point now) {
  if (!runner || drain_timeout.count() <= 0) return false;
  draining_ = true;
  runner->set_draining(true);
  if (announcers)
    for (auto& a : *announcers) a->stop();
  drain_until_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(drain_timeout);
  last_step_ = now;
  std::fprintf(stderr, "troupe worker: draining (up to %.0f s): the front end moves its requests away\n",
               drain_timeout.count());
  std::fflush(stderr);
  return true;
}

// A frame (routing id, plan) within 200 ms; false: none came (or a signal
// interrupted the wait).
bool StepLoop::receive(zmq::message_t& id, zmq::message_t& plan) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  try {
    if (zmq::poll(&item, 1, std::chrono::milliseconds(200)) == 0) return false;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    throw;
  }
  if (!socket.recv(id, zmq::recv_flags::dontwait) || !socket.get(zmq::sockopt::rcvmore)) return false;
  return socket.recv(plan, zmq::recv_flags::none).has_value();
}

bool StepLoop::answer_plan(zmq::message_t& id, const std::string& bytes) {
  const auto* p = runner ? messages::check_step_plan(bytes) : nullptr;
  // Heartbeats (empty plans) do not keep a draining worker: work does.
  if (!p || p->step() != 0 || (p->slices() && p->slices()->size() > 0)) last_step_ = std::chrono::steady_clock::now();
  const std::string result = answer(bytes);
  try {
    socket.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    socket.send(zmq::buffer(result), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // The front end went away mid-step; it will start over with a new connection.
  }
  return draining_ && p && p->release() && runner->fronts_held() == 0;
}

}  // namespace troupe::worker
