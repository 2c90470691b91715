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
  std::chrono::milliseconds heartbeat_interval{1000};  // 0: ZeroMQ's heartbeats off
  std::chrono::milliseconds heartbeat_timeout{5000};  // a silent peer is disconnected after this
  int high_water_mark = 100000;                        // messages queued per peer before sends fail
  int receive_high_water_mark = -1;                    // -1: high_water_mark; 0: no limit
};

// A client's socket: ZeroMQ's heartbeats off and its receive queue unbounded.
// With heartbeats on, a client that reads slower than the server streams
// fills its receive queue; libzmq then stops reading the connection, misses
// the server's heartbeats, drops the connection as dead, and on the next
// connection asserts (`_input_stopped`, libzmq 4.3.5) and aborts the
// client's process. Unbounded, the queue never stops the reading; a client
// tells a dead server by its answers' timeout and the protocol's Ping.
SocketLimits client_socket_limits();

// CurveZMQ on a socket (messages/curve_auth.h reads the keys and admits
// clients). A server side has its own pair; a client side its own pair and
// the server's public key. Empty: plain (loopback only, or --insecure).
struct CurveKeys {
  std::string public_key, secret_key;  // Z85
  std::string server_key;              // a client's: the server's public key
  bool enabled() const { return !secret_key.empty(); }
};

// Server side: ROUTER_MANDATORY (a send to a gone peer fails with
// EHOSTUNREACH instead of vanishing), heartbeats, LINGER 0, MAXMSGSIZE.
// With `curve`: a CURVE server whose peers a ZapHandler on `ctx` admits.
zmq::socket_t bind_router(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits = {},
                          const CurveKeys& curve = {});

// The job event socket: PUB, heartbeats, LINGER 0. A subscriber slower than
// the high-water mark loses events (PUB never blocks the server); the
// store has every result, so `troupe batch status|results` always knows.
// With `curve`, an XPUB in manual mode instead: subscriptions reach the
// server, which applies only those the subscriber may have (the job actor).
zmq::socket_t bind_publisher(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits = {},
                             const CurveKeys& curve = {});
// Its subscriber, for every topic starting with `topic` ("" for all).
zmq::socket_t connect_subscriber(zmq::context_t& ctx, const std::string& endpoint, const std::string& topic,
                                 const SocketLimits& limits = {}, const CurveKeys& curve = {});

// The event endpoint that goes with a server's client endpoint:
// tcp://host:PORT → tcp://host:PORT+1; ipc://PATH → ipc://PATH.events.
// Throws std::invalid_argument for anything else.
std::string default_events_endpoint(const std::string& listen);

// Client side (client_socket_limits for a client of `troupe serve`; the
// defaults, with heartbeats, for links between troupe's own processes), LINGER 0.
zmq::socket_t connect_dealer(zmq::context_t& ctx, const std::string& endpoint, const SocketLimits& limits = {},
                             const CurveKeys& curve = {});

}  // namespace troupe::messages
