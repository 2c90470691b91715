#include "actors/remote_worker_actor.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <zmq.hpp>

#include "messages/zmq_sockets.h"

namespace troupe::actors {

// One request-reply exchange over a DEALER. A socket monitor watches the
// connection: when it drops while a reply is awaited (the worker died, or
// ZeroMQ's heartbeats found it silent), the call ends at once instead of
// waiting out the timeout, since that reply will never come.
class WorkerLink {
 public:
  enum class Outcome : uint8_t { reply, timeout, disconnected };
  explicit WorkerLink(const WorkerAddress& a) : ctx_(1), socket_(messages::connect_dealer(ctx_, a.endpoint, {}, a.curve)) {
    const std::string monitor = "inproc://troupe-worker-link";
    if (zmq_socket_monitor(socket_.handle(), monitor.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
      throw zmq::error_t();
    events_ = zmq::socket_t(ctx_, zmq::socket_type::pair);
    events_.set(zmq::sockopt::linger, 0);
    events_.connect(monitor);
  }
  ~WorkerLink() { zmq_socket_monitor(socket_.handle(), nullptr, 0); }
  Outcome call(const std::string& bytes, std::chrono::milliseconds timeout, std::string& reply) {
    disconnected_ = drain_events() || disconnected_;
    if (disconnected_) return Outcome::disconnected;  // since the last call: the worker may be another process now
    socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}, {events_.handle(), 0, ZMQ_POLLIN, 0}};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || zmq::poll(items, 2, left) == 0) return Outcome::timeout;
      if (items[0].revents & ZMQ_POLLIN) {
        zmq::message_t m;
        if (!socket_.recv(m, zmq::recv_flags::none)) return Outcome::timeout;
        reply = m.to_string();
        return Outcome::reply;
      }
      if (drain_events()) return Outcome::disconnected;
    }
  }

 private:
  // True when the monitor reported a disconnect (each event is two frames).
  bool drain_events() {
    bool dropped = false;
    zmq::message_t frame;
    while (events_.recv(frame, zmq::recv_flags::dontwait)) {
      if (frame.size() >= 2) {
        uint16_t event = 0;
        std::memcpy(&event, frame.data(), sizeof event);
        dropped = dropped || event == ZMQ_EVENT_DISCONNECTED;
      }
      while (frame.more() && events_.recv(frame, zmq::recv_flags::dontwait)) {
      }
    }
    return dropped;
  }

  zmq::context_t ctx_;
  zmq::socket_t socket_;
  zmq::socket_t events_;
  bool disconnected_ = false;
};

RemoteWorkerState::RemoteWorkerState() = default;
RemoteWorkerState::~RemoteWorkerState() = default;

namespace {

constexpr std::chrono::milliseconds kProbeTimeout{2000};

void connect(RemoteWorkerState& st, WorkerAddress address, std::chrono::milliseconds timeout) {
  st.address = std::move(address);
  st.timeout = timeout;
  st.link = std::make_unique<WorkerLink>(st.address);
}

// The worker's reply if `check` can read it; else why not (and a new
// connection: a lost or late reply would pair with the wrong plan).
template <typename Check>
std::optional<std::string> call(RemoteWorkerState& st, const std::string& plan, Check check, std::string& why,
                                std::chrono::milliseconds timeout) {
  std::string reply;
  const auto outcome = st.link->call(plan, timeout, reply);
  if (outcome == WorkerLink::Outcome::reply && check(reply)) return reply;
  st.link = std::make_unique<WorkerLink>(st.address);
  why = "worker " + st.address.endpoint +
        (outcome == WorkerLink::Outcome::reply     ? " sent an unreadable result"
         : outcome == WorkerLink::Outcome::timeout ? " did not answer in time"
                                                   : " went away (its connection dropped)");
  return std::nullopt;
}

}  // namespace

verifier_actor::behavior_type remote_verifier(verifier_actor::stateful_pointer<RemoteWorkerState> self, WorkerAddress address,
                                              std::chrono::milliseconds timeout) {
  connect(self->state, std::move(address), timeout);
  return {
      [self](step_atom, const StepPlanBytes& step) {
        const std::string& plan = step.bytes;
        // A heartbeat (an empty plan) is answered at once by a live worker:
        // it waits no longer than kProbeTimeout.
        const auto* p = messages::check_step_plan(plan);
        const bool probe = p && p->step() == 0 && (!p->slices() || p->slices()->size() == 0);
        const auto timeout = probe ? std::min(self->state.timeout, kProbeTimeout) : self->state.timeout;
        std::string why;
        auto reply =
            call(self->state, plan, [](const std::string& r) { return messages::check_step_result(r) != nullptr; }, why, timeout);
        return StepResultBytes{reply ? *reply : messages::worker_lost_result(why)};
      },
  };
}

draft_actor::behavior_type remote_drafter(draft_actor::stateful_pointer<RemoteWorkerState> self, WorkerAddress address,
                                          std::chrono::milliseconds timeout) {
  connect(self->state, std::move(address), timeout);
  return {
      [self](propose_atom, const DraftPlanBytes& plan) {
        std::string why;
        auto reply = call(self->state, plan.bytes, [](const std::string& r) { return messages::check_draft_result(r) != nullptr; }, why,
                          self->state.timeout);
        return DraftResultBytes{reply ? *reply : messages::draft_result(0, {}, why, 0, 0, {})};
      },
  };
}

messages::WorkerInfo query_worker(const WorkerAddress& address, std::chrono::milliseconds timeout, uint64_t front) {
  const std::string& endpoint = address.endpoint;
  WorkerLink link(address);
  std::string answer;
  const bool answered = link.call(messages::step_plan(0, {}, {}, {}, front), timeout, answer) == WorkerLink::Outcome::reply;
  const std::optional<std::string> reply = answered ? std::optional<std::string>(answer) : std::nullopt;
  if (!reply)
    throw std::runtime_error("no worker answered at " + endpoint +
                             (address.curve.enabled() ? " (with CURVE: is this server's key in its --clients-dir, and --worker-key its key?)" : ""));
  const auto* r = messages::check_step_result(*reply);
  if (!r && messages::check_draft_result(*reply))
    throw std::runtime_error("the worker at " + endpoint + " is a draft worker; give it as --draft-worker");
  if (!r) throw std::runtime_error("the worker at " + endpoint + " sent an unreadable answer");
  if (r->error()) throw WorkerRefused("the worker at " + endpoint + " refused this front end: " + r->error()->str());
  if (r->kv_pages() <= 0 || r->page_size() <= 0) throw std::runtime_error("the worker at " + endpoint + " reports no KV pages");
  return {r->kv_pages(), r->page_size(), r->n_vocab(), r->model() ? r->model()->str() : "", r->can_copy_pages(),
          r->can_transfer_pages(), r->kv_type(), r->can_shift_kv(), r->instance(), r->model_fingerprint(),
          r->draining(), r->process(), {}, r->kv_local_pages(), r->can_evict_kv()};
}

void release_worker(const WorkerAddress& address, std::chrono::milliseconds timeout, uint64_t front) {
  WorkerLink link(address);
  std::string answer;
  link.call(messages::release_plan(front), timeout, answer);
}

messages::DrafterInfo query_draft_worker(const WorkerAddress& address, std::chrono::milliseconds timeout) {
  const std::string& endpoint = address.endpoint;
  WorkerLink link(address);
  std::string answer;
  const bool answered = link.call(messages::draft_plan(0, {}, {}), timeout, answer) == WorkerLink::Outcome::reply;
  const std::optional<std::string> reply = answered ? std::optional<std::string>(answer) : std::nullopt;
  if (!reply) throw std::runtime_error("no draft worker answered at " + endpoint);
  const auto* r = messages::check_draft_result(*reply);
  if (!r)
    throw std::runtime_error("the worker at " + endpoint + " is not a draft worker" +
                             (messages::check_step_result(*reply) ? " but a verifier; give it as --worker" : ""));
  return {r->model() ? r->model()->str() : "", r->n_vocab(), r->vocabulary()};
}

}  // namespace troupe::actors
