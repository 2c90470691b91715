#pragma once
// ZeroMQ sockets configured for a server that must not lose or hang on
// anything: ZeroMQ's defaults drop messages silently (ROUTER at the
// high-water mark or to an unknown peer), never notice a dead peer
// (heartbeats off), block forever at close (infinite LINGER) and accept any
// message size. Every socket troupe opens goes through here.
#include <chrono>
#include <string>
#include <zmq.hpp>

namespace troupe::messages {

struct SocketLimits {
  size_t max_message_bytes = 4 << 20;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{5000};  // a silent peer is disconnected after this
  int high_water_mark = 100000;                        // messages queued per peer before sends fail
};

// Server side: ROUTER_MANDATORY (a send to a gone peer fails with
// EHOSTUNREACH instead of vanishing), heartbeats, LINGER 0, MAXMSGSIZE.
zmq::socket_t bind_router(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits = {});

// Client side: heartbeats (the server hears of a dead client), LINGER 0.
zmq::socket_t connect_dealer(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits = {});

}  // namespace troupe::messages
