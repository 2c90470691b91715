#include "gateways/client_gateway.h"

namespace troupe::gateways {
namespace {

// The socket reads frames up to 4x the protocol's limit, so one over it is
// read and answered too_long by the gate; only past that does ZeroMQ drop
// the connection unanswered (docs/PROTOCOL.md).
messages::SocketLimits readable_past_the_limit(messages::SocketLimits limits) {
  limits.max_message_bytes *= 4;
  return limits;
}

}  // namespace

ClientGateway::ClientGateway(const std::string& endpoint, const messages::SocketLimits& limits,
                             const messages::CurveKeys& curve, std::shared_ptr<const messages::ClientDirectory> clients)
    : ctx_(1),
      zap_(clients ? std::make_unique<messages::ZapHandler>(ctx_, std::move(clients)) : nullptr),
      router_(messages::bind_router(ctx_, endpoint, readable_past_the_limit(limits), zap_ ? curve : messages::CurveKeys{})),
      inbox_(ctx_, zmq::socket_type::pull),
      outbox_(ctx_, zmq::socket_type::push) {
  inbox_endpoint_ = "inproc://troupe-gateway-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  inbox_.set(zmq::sockopt::linger, 0);
  outbox_.set(zmq::sockopt::linger, 0);
  inbox_.set(zmq::sockopt::rcvhwm, 0);  // unbounded: responses are never dropped between threads
  outbox_.set(zmq::sockopt::sndhwm, 0);
  inbox_.bind(inbox_endpoint_);
  outbox_.connect(inbox_endpoint_);
}

ClientGateway::~ClientGateway() { stop(); }

std::string ClientGateway::endpoint() const { return router_.get(zmq::sockopt::last_endpoint); }

void ClientGateway::start(std::shared_ptr<FrameIntake> intake, std::shared_ptr<service::IntakeBacklog> backlog,
                          const messages::ClientLimits& limits) {
  intake_ = std::move(intake);
  backlog_ = std::move(backlog);
  limits_ = limits;
  thread_ = std::thread([this] { loop(); });
}

void ClientGateway::stop() {
  if (stopping_.exchange(true)) return;
  send("", "");  // wakes the socket thread
  if (thread_.joinable()) thread_.join();
  intake_.reset();  // the last hold on the ingestion actor: the actor system can stop
}

void ClientGateway::send(const std::string& peer, const messages::Bytes& payload) {
  std::lock_guard<std::mutex> lock(mutex_);
  outbox_.send(zmq::buffer(peer), zmq::send_flags::sndmore);
  outbox_.send(zmq::buffer(payload), zmq::send_flags::none);
}

void ClientGateway::loop() {
  zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0}, {inbox_.handle(), 0, ZMQ_POLLIN, 0}};
  while (!stopping_) {
    zmq::poll(items, 2, std::chrono::milliseconds(-1));
    if (items[0].revents & ZMQ_POLLIN) {
      zmq::message_t id, body;
      if (router_.recv(id, zmq::recv_flags::dontwait)) {
        // A client frame: [routing id][payload]; further parts are not ours to read.
        bool more = router_.get(zmq::sockopt::rcvmore);
        if (more && router_.recv(body, zmq::recv_flags::none)) {
          for (zmq::message_t extra; router_.get(zmq::sockopt::rcvmore);) (void)router_.recv(extra, zmq::recv_flags::none);
          route(id, body);
        }
      }
    }
    if (items[1].revents & ZMQ_POLLIN) {
      zmq::message_t peer, body;
      while (inbox_.recv(peer, zmq::recv_flags::dontwait)) {
        (void)inbox_.recv(body, zmq::recv_flags::none);
        if (peer.size() == 0) continue;  // the stop wake-up
        if (!deliver(peer, body)) intake_->gone(peer.to_string());
      }
    }
  }
}

void ClientGateway::route(zmq::message_t& id, const zmq::message_t& body) {
  const std::string bytes = body.to_string();
  service::IntakeDecision d = service::classify_frame(bytes, limits_, *backlog_);
  switch (d.lane) {
    case service::IntakeLane::answered:
      if (!deliver(id, zmq::message_t(d.reply.data(), d.reply.size())))
        intake_->gone(id.to_string());
      return;
    case service::IntakeLane::prompt:
      return intake_->frame(ClientFrame{id.to_string(), client_name(body), bytes, true});
    case service::IntakeLane::control:
      return intake_->frame(ClientFrame{id.to_string(), client_name(body), bytes, false});
  }
}

std::string ClientGateway::client_name(const zmq::message_t& body) const {
  return zap_ ? messages::peer_name(body) : messages::anonymous_peer(body);
}

// ROUTER_MANDATORY: EHOSTUNREACH (thrown) for a peer that is gone, EAGAIN (no
// send, with dontwait) when its queue is full; a client not reading is
// treated like a gone one: its requests end.
bool ClientGateway::deliver(const zmq::message_t& peer, const zmq::message_t& body) {
  try {
    zmq::message_t p(peer.data(), peer.size()), b(body.data(), body.size());
    return router_.send(p, zmq::send_flags::sndmore | zmq::send_flags::dontwait).has_value() &&
           router_.send(b, zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
    return false;
  }
}

}  // namespace troupe::gateways
