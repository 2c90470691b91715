#include "actors/remote_verifier_actor.h"

#include <stdexcept>
#include <zmq.hpp>

#include "actors/local_messages.h"
#include "messages/zmq_sockets.h"

namespace troupe::actors {
namespace {

// One request-reply exchange over a DEALER; nullopt on timeout.
class WorkerLink {
 public:
  explicit WorkerLink(const std::string& endpoint) : ctx_(1), socket_(messages::connect_dealer(ctx_, endpoint)) {}
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

}  // namespace

struct RemoteVerifierState {
  std::string endpoint;
  std::chrono::milliseconds timeout{0};
  std::unique_ptr<WorkerLink> link;
};

caf::behavior remote_verifier_actor(caf::stateful_actor<std::shared_ptr<RemoteVerifierState>>* self,
                                    std::string endpoint, std::chrono::milliseconds timeout) {
  self->state = std::make_shared<RemoteVerifierState>();
  self->state->endpoint = std::move(endpoint);
  self->state->timeout = timeout;
  self->state->link = std::make_unique<WorkerLink>(self->state->endpoint);
  return {
      [self](step_atom, const std::string& plan) -> std::string {
        RemoteVerifierState& st = *self->state;
        auto reply = st.link->call(plan, st.timeout);
        if (reply && messages::check_step_result(*reply)) return *reply;
        // A lost or late reply would pair with the wrong step: start a new connection.
        st.link = std::make_unique<WorkerLink>(st.endpoint);
        return messages::step_result(0, {}, "worker " + st.endpoint + (reply ? " sent an unreadable result" : " did not answer in time"), 0);
      },
  };
}

messages::WorkerInfo query_worker(const std::string& endpoint, std::chrono::milliseconds timeout) {
  WorkerLink link(endpoint);
  const auto reply = link.call(messages::step_plan(0, {}, {}), timeout);
  const auto* r = reply ? messages::check_step_result(*reply) : nullptr;
  if (!r) throw std::runtime_error("no worker answered at " + endpoint);
  if (r->kv_pages() <= 0 || r->page_size() <= 0) throw std::runtime_error("the worker at " + endpoint + " reports no KV pages");
  return {r->kv_pages(), r->page_size(), r->n_vocab(), r->model() ? r->model()->str() : "", r->can_copy_pages(),
          r->can_transfer_pages()};
}

}  // namespace troupe::actors
