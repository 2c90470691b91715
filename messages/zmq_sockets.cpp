#include "messages/zmq_sockets.h"

namespace troupe::messages {
namespace {

void common(zmq::socket_t& s, const SocketLimits& l) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(l.heartbeat_interval.count()));
  s.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(l.heartbeat_timeout.count()));
  s.set(zmq::sockopt::heartbeat_ttl, static_cast<int>(l.heartbeat_timeout.count()));
  s.set(zmq::sockopt::sndhwm, l.high_water_mark);
  s.set(zmq::sockopt::rcvhwm, l.high_water_mark);
}

}  // namespace

zmq::socket_t bind_router(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits) {
  zmq::socket_t s(ctx, zmq::socket_type::router);
  common(s, limits);
  s.set(zmq::sockopt::router_mandatory, 1);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits.max_message_bytes));
  s.bind(endpoint);
  return s;
}

zmq::socket_t connect_dealer(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  common(s, limits);
  s.connect(endpoint);
  return s;
}

}  // namespace troupe::messages
