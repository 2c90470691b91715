#include "actors/remote_worker_actor.h"

#include <optional>
#include <stdexcept>
#include <zmq.hpp>

#include "messages/zmq_sockets.h"

namespace troupe::actors {

// One request-reply exchange over a DEALER; nullopt on timeout.
class WorkerLink {
 public:
  explicit WorkerLink(const WorkerAddress& a) : ctx_(1), socket_(messages::connect_dealer(ctx_, a.endpoint, {}, a.curve)) {}
  std::optional<std::string> call(const std::string& bytes, std::chrono::milliseconds timeout) {
    socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
    zmq::message_t reply;
    if (!socket_.recv(reply, zmq::recv_flags::none)) return std::nullopt;
    return reply.to_string();
  }

 private:
  zmq::context_t ctx_;
  zmq::socket_t socket_;
};

RemoteWorkerState::RemoteWorkerState() = default;
RemoteWorkerState::~RemoteWorkerState() = default;

namespace {

void connect(RemoteWorkerState& st, WorkerAddress address, std::chrono::milliseconds timeout) {
  st.address = std::move(address);
  st.timeout = timeout;
  st.link = std::make_unique<WorkerLink>(st.address);
}

// The worker's reply if `check` can read it; else why not (and a new
// connection: a lost or late reply would pair with the wrong plan).
template <typename Check>
std::optional<std::string> call(RemoteWorkerState& st, const std::string& plan, Check check, std::string& why) {
  auto reply = st.link->call(plan, st.timeout);
  if (reply && check(*reply)) return reply;
  st.link = std::make_unique<WorkerLink>(st.address);
  why = "worker " + st.address.endpoint + (reply ? " sent an unreadable result" : " did not answer in time");
  return std::nullopt;
}

}  // namespace

verifier_actor::behavior_type remote_verifier(verifier_actor::stateful_pointer<RemoteWorkerState> self, WorkerAddress address,
                                              std::chrono::milliseconds timeout) {
  connect(self->state, std::move(address), timeout);
  return {
      [self](step_atom, const std::string& plan) {
        std::string why;
        auto reply = call(self->state, plan, [](const std::string& r) { return messages::check_step_result(r) != nullptr; }, why);
        return reply ? *reply : messages::step_result(0, {}, why, 0);
      },
  };
}

draft_actor::behavior_type remote_drafter(draft_actor::stateful_pointer<RemoteWorkerState> self, WorkerAddress address,
                                          std::chrono::milliseconds timeout) {
  connect(self->state, std::move(address), timeout);
  return {
      [self](propose_atom, const std::string& plan) {
        std::string why;
        auto reply = call(self->state, plan, [](const std::string& r) { return messages::check_draft_result(r) != nullptr; }, why);
        return reply ? *reply : messages::draft_result(0, {}, why, 0, 0, {});
      },
  };
}

messages::WorkerInfo query_worker(const WorkerAddress& address, std::chrono::milliseconds timeout) {
  const std::string& endpoint = address.endpoint;
  WorkerLink link(address);
  const auto reply = link.call(messages::step_plan(0, {}, {}), timeout);
  if (!reply)
    throw std::runtime_error("no worker answered at " + endpoint +
                             (address.curve.enabled() ? " (with CURVE: is this server's key in its --clients-dir, and --worker-key its key?)" : ""));
  const auto* r = messages::check_step_result(*reply);
  if (!r && messages::check_draft_result(*reply))
    throw std::runtime_error("the worker at " + endpoint + " is a draft worker; give it as --draft-worker");
  if (!r) throw std::runtime_error("the worker at " + endpoint + " sent an unreadable answer");
  if (r->kv_pages() <= 0 || r->page_size() <= 0) throw std::runtime_error("the worker at " + endpoint + " reports no KV pages");
  return {r->kv_pages(), r->page_size(), r->n_vocab(), r->model() ? r->model()->str() : "", r->can_copy_pages(),
          r->can_transfer_pages(), r->kv_type(), r->can_shift_kv()};
}

messages::DrafterInfo query_draft_worker(const WorkerAddress& address, std::chrono::milliseconds timeout) {
  const std::string& endpoint = address.endpoint;
  WorkerLink link(address);
  const auto reply = link.call(messages::draft_plan(0, {}, {}), timeout);
  if (!reply) throw std::runtime_error("no draft worker answered at " + endpoint);
  const auto* r = messages::check_draft_result(*reply);
  if (!r)
    throw std::runtime_error("the worker at " + endpoint + " is not a draft worker" +
                             (messages::check_step_result(*reply) ? " but a verifier; give it as --worker" : ""));
  return {r->model() ? r->model()->str() : "", r->n_vocab(), r->vocabulary()};
}

}  // namespace troupe::actors
