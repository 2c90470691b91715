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

// The job event socket: PUB, heartbeats, LINGER 0. A subscriber slower than
// the high-water mark loses events (PUB never blocks the server); the
// store has every result, so `troupe batch status|results` always knows.
zmq::socket_t bind_publisher(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits = {});
// Its subscriber, for every topic starting with `topic` ("" for all).
zmq::socket_t connect_subscriber(zmq::context_t& ctx, const std::string& endpoint, const std::string& topic,
                                 const SocketLimits& limits = {});

// The event endpoint that goes with a server's client endpoint:
// tcp://host:PORT → tcp://host:PORT+1; ipc://PATH → ipc://PATH.events.
// Throws std::invalid_argument for anything else.
std::string default_events_endpoint(const std::string& listen);

// Client side: heartbeats (the server hears of a dead client), LINGER 0.
zmq::socket_t connect_dealer(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits = {});

}  // namespace troupe::messages
