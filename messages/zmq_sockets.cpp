#include "messages/zmq_sockets.h"

#include <stdexcept>

namespace troupe::messages {
namespace {

void common(zmq::socket_t& s, const SocketLimits& l) {
  s.set(zmq::sockopt::linger, 0);
  if (l.heartbeat_interval.count() > 0) {
    s.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(l.heartbeat_interval.count()));
    s.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(l.heartbeat_timeout.count()));
    s.set(zmq::sockopt::heartbeat_ttl, static_cast<int>(l.heartbeat_timeout.count()));
  }
  s.set(zmq::sockopt::sndhwm, l.high_water_mark);
  s.set(zmq::sockopt::rcvhwm, l.receive_high_water_mark < 0 ? l.high_water_mark : l.receive_high_water_mark);
}

// The ZAP domain every troupe server socket names: set, so ZAP is asked
// even by libzmq versions that skip it for an empty domain.
constexpr const char* kZapDomain = "troupe";

void curve_server(zmq::socket_t& s, const CurveKeys& k) {
  if (!k.enabled()) return;
  s.set(zmq::sockopt::curve_server, 1);
  s.set(zmq::sockopt::curve_secretkey, k.secret_key);
  s.set(zmq::sockopt::zap_domain, kZapDomain);
}

void curve_client(zmq::socket_t& s, const CurveKeys& k) {
  if (!k.enabled()) return;
  s.set(zmq::sockopt::curve_serverkey, k.server_key);
  s.set(zmq::sockopt::curve_publickey, k.public_key);
  s.set(zmq::sockopt::curve_secretkey, k.secret_key);
}

}  // namespace

SocketLimits client_socket_limits() {
  SocketLimits l;
  l.heartbeat_interval = std::chrono::milliseconds(0);
  l.receive_high_water_mark = 0;
  return l;
}

zmq::socket_t bind_router(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits,
                          const CurveKeys& curve) {
  zmq::socket_t s(ctx, zmq::socket_type::router);
  common(s, limits);
  curve_server(s, curve);
  s.set(zmq::sockopt::router_mandatory, 1);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits.max_message_bytes));
  s.bind(endpoint);
  return s;
}

std::string default_events_endpoint(const std::string& listen) {
  if (listen.rfind("ipc://", 0) == 0) return listen + ".events";
  const size_t colon = listen.rfind(':');
  if (listen.rfind("tcp://", 0) == 0 && colon != std::string::npos && colon > 5) {
    try {
      const int port = std::stoi(listen.substr(colon + 1));
      if (port > 0 && port < 65535) return listen.substr(0, colon + 1) + std::to_string(port + 1);
    } catch (const std::exception&) {
    }
  }
  throw std::invalid_argument("cannot derive an event endpoint from " + listen + "; give one with --events");
}

zmq::socket_t bind_publisher(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits,
                             const CurveKeys& curve) {
  zmq::socket_t s(ctx, curve.enabled() ? zmq::socket_type::xpub : zmq::socket_type::pub);
  common(s, limits);
  curve_server(s, curve);
  if (curve.enabled()) s.set(zmq::sockopt::xpub_manual, 1);
  s.bind(endpoint);
  return s;
}

zmq::socket_t connect_subscriber(zmq::context_t& ctx, const std::string& endpoint, const std::string& topic,
                                 const SocketLimits& limits, const CurveKeys& curve) {
  zmq::socket_t s(ctx, zmq::socket_type::sub);
  common(s, limits);
  curve_client(s, curve);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(64) << 20);
  s.set(zmq::sockopt::subscribe, topic);
  s.connect(endpoint);
  return s;
}

zmq::socket_t connect_dealer(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits,
                             const CurveKeys& curve) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  common(s, limits);
  curve_client(s, curve);
  s.connect(endpoint);
  return s;
}

}  // namespace troupe::messages
