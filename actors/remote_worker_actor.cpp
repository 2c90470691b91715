#include "actors/remote_worker_actor.h"

#include <optional>
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

struct RemoteWorkerState {
  std::string endpoint;
  std::chrono::milliseconds timeout{0};
  std::unique_ptr<WorkerLink> link;

  // The worker's reply if it is readable by `check`; else why not (and a
  // new connection: a lost or late reply would pair with the wrong plan).
  template <typename Check>
  std::optional<std::string> call(const std::string& plan, Check check, std::string& why) {
    auto reply = link->call(plan, timeout);
    if (reply && check(*reply)) return reply;
    link = std::make_unique<WorkerLink>(endpoint);
    why = "worker " + endpoint + (reply ? " sent an unreadable result" : " did not answer in time");
    return std::nullopt;
  }
};

caf::behavior remote_worker_actor(caf::stateful_actor<std::shared_ptr<RemoteWorkerState>>* self, std::string endpoint,
                                  std::chrono::milliseconds timeout) {
  self->state = std::make_shared<RemoteWorkerState>();
  self->state->endpoint = std::move(endpoint);
  self->state->timeout = timeout;
  self->state->link = std::make_unique<WorkerLink>(self->state->endpoint);
  return {
      [self](step_atom, const std::string& plan) -> std::string {
        std::string why;
        auto reply = self->state->call(plan, [](const std::string& r) { return messages::check_step_result(r) != nullptr; }, why);
        return reply ? *reply : messages::step_result(0, {}, why, 0);
      },
      [self](propose_atom, const std::string& plan) -> std::string {
        std::string why;
        auto reply =
            self->state->call(plan, [](const std::string& r) { return messages::check_draft_result(r) != nullptr; }, why);
        return reply ? *reply : messages::draft_result(0, {}, why, 0, 0, {});
      },
  };
}

messages::WorkerInfo query_worker(const std::string& endpoint, std::chrono::milliseconds timeout) {
  WorkerLink link(endpoint);
  const auto reply = link.call(messages::step_plan(0, {}, {}), timeout);
  if (!reply) throw std::runtime_error("no worker answered at " + endpoint);
  const auto* r = messages::check_step_result(*reply);
  if (!r && messages::check_draft_result(*reply))
    throw std::runtime_error("the worker at " + endpoint + " is a draft worker; give it as --draft-worker");
  if (!r) throw std::runtime_error("the worker at " + endpoint + " sent an unreadable answer");
  if (r->kv_pages() <= 0 || r->page_size() <= 0) throw std::runtime_error("the worker at " + endpoint + " reports no KV pages");
  return {r->kv_pages(), r->page_size(), r->n_vocab(), r->model() ? r->model()->str() : "", r->can_copy_pages(),
          r->can_transfer_pages()};
}

messages::DrafterInfo query_draft_worker(const std::string& endpoint, std::chrono::milliseconds timeout) {
  WorkerLink link(endpoint);
  const auto reply = link.call(messages::draft_plan(0, {}, {}), timeout);
  if (!reply) throw std::runtime_error("no draft worker answered at " + endpoint);
  const auto* r = messages::check_draft_result(*reply);
  if (!r)
    throw std::runtime_error("the worker at " + endpoint + " is not a draft worker" +
                             (messages::check_step_result(*reply) ? " but a verifier; give it as --worker" : ""));
  return {r->model() ? r->model()->str() : "", r->n_vocab(), r->vocabulary()};
}

}  // namespace troupe::actors
