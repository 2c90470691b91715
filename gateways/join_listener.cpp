#include "gateways/join_listener.h"

#include "messages/join_frames.h"
#include "messages/zmq_sockets.h"

namespace troupe::gateways {

JoinListener::JoinListener(const std::string& endpoint, Admit admit, const messages::CurveKeys& curve,
                           std::shared_ptr<const messages::ClientDirectory> clients)
    : admit_(std::move(admit)), ctx_(1) {
  if (clients) zap_ = std::make_unique<messages::ZapHandler>(ctx_, std::move(clients));
  messages::SocketLimits limits;
  limits.max_message_bytes = 64 << 10;  // an announcement is an endpoint and an id
  socket_ = messages::bind_router(ctx_, endpoint, limits, clients ? curve : messages::CurveKeys{});
  thread_ = std::thread([this] { loop(); });
}

JoinListener::~JoinListener() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void JoinListener::loop() {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  while (!stopping_) {
    try {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return;
    }
    zmq::message_t id, body;
    if (!socket_.recv(id, zmq::recv_flags::dontwait) || !id.more()) continue;
    if (!socket_.recv(body, zmq::recv_flags::dontwait)) continue;
    while (body.more()) {  // a well-formed announcement is one frame
      if (!socket_.recv(body, zmq::recv_flags::dontwait)) break;
    }
    const std::string bytes = body.to_string();  // the request points into it
    const auto* request = messages::check_join_request(bytes);
    std::optional<std::string> answer =
        request ? admit_(request->endpoint()->str(), request->instance())
                : std::optional<std::string>("not a join request (messages/join.fbs); is this a `troupe worker --join`?");
    if (!answer) continue;
    const std::string reply = messages::join_reply(answer->empty(), *answer);
    try {
      socket_.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      socket_.send(zmq::buffer(reply), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // The worker went away; it announces itself again.
    }
  }
}

}  // namespace troupe::gateways
