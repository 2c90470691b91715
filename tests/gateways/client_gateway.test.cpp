// The ZeroMQ client gateway on its own, with no actor behind it: a real
// ROUTER on a loopback port, real DEALER clients, and an intake that records
// what the gateway hands on.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <string>
#include <zmq.hpp>

#include "gateways/client_gateway.h"
#include "messages/client_frames.h"
#include "messages/client_validation.h"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

// What the gateway handed on, in order, waited for without sleeping.
class RecordingIntake final : public gateways::FrameIntake {
 public:
  void frame(gateways::ClientFrame f) override { push(std::move(f)); }
  void gone(const std::string& peer) override { push(gateways::ClientFrame{peer, "(gone)", {}, false}); }
  std::optional<gateways::ClientFrame> next_within(std::chrono::milliseconds wait) {
    std::unique_lock lock(mutex_);
    if (!arrived_.wait_for(lock, wait, [&] { return !seen_.empty(); })) return std::nullopt;
    gateways::ClientFrame f = std::move(seen_.front());
    seen_.pop_front();
    return f;
  }
  gateways::ClientFrame next() {
    std::optional<gateways::ClientFrame> f = next_within(10s);
    REQUIRE(f);
    return std::move(*f);
  }

 private:
  void push(gateways::ClientFrame f) {
    std::lock_guard lock(mutex_);
    seen_.push_back(std::move(f));
    arrived_.notify_one();
  }
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<gateways::ClientFrame> seen_;
};

struct Door {
  std::shared_ptr<RecordingIntake> intake = std::make_shared<RecordingIntake>();
  std::shared_ptr<service::IntakeBacklog> backlog;
  gateways::ClientGateway gateway;
  std::string endpoint;
  explicit Door(service::IntakeLimits limits = {})
      : backlog(std::make_shared<service::IntakeBacklog>(limits)),
        gateway("tcp://127.0.0.1:*", messages::SocketLimits{}) {
    endpoint = gateway.endpoint();
    gateway.start(intake, backlog, messages::ClientLimits{});
  }
};

struct Client {
  zmq::context_t ctx;
  zmq::socket_t socket{ctx, zmq::socket_type::dealer};
  explicit Client(const std::string& endpoint) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::rcvtimeo, 10000);
    socket.connect(endpoint);
  }
  void send(const messages::Bytes& bytes) { socket.send(zmq::buffer(bytes), zmq::send_flags::none); }
  const wire::Response* receive(std::string& keep) {
    zmq::message_t m;
    REQUIRE(socket.recv(m, zmq::recv_flags::none));
    keep = m.to_string();
    const wire::Response* r = messages::check_response(keep);
    REQUIRE(r != nullptr);
    return r;
  }
};

messages::Bytes prompt(uint64_t id) { return messages::generate_request(id, "hello", messages::SamplingFields{}); }

}  // namespace

TEST_CASE("the client gateway answers a Ping itself and hands prompts and control frames to its intake") {
  Door door;
  Client client(door.endpoint);
  client.send(messages::ping_request(1, 4242));
  std::string keep;
  const wire::Response* pong = client.receive(keep);
  REQUIRE(pong->body_type() == wire::ResponseBody::Pong);
  CHECK(pong->body_as_Pong()->nonce() == 4242);

  const messages::Bytes generate = prompt(2);
  client.send(generate);
  client.send(messages::stats_request(3));
  const gateways::ClientFrame p = door.intake->next();
  CHECK(p.bytes == generate);
  CHECK(p.counted);  // in the backlog until ingestion has read it
  CHECK(door.backlog->frames() == 1);
  CHECK(p.client == "host:127.0.0.1");  // without CURVE: the client's host
  const gateways::ClientFrame c = door.intake->next();
  CHECK_FALSE(c.counted);
  CHECK(c.peer == p.peer);  // one connection, one routing id
}

TEST_CASE("the client gateway refuses a prompt past its backlog at once, as overloaded, and nothing reaches the intake") {
  Door door(service::IntakeLimits{1, 64 << 20});
  Client client(door.endpoint);
  client.send(prompt(1));
  CHECK(door.intake->next().counted);
  client.send(prompt(2));  // the first is not released: the backlog is full
  std::string keep;
  const wire::Response* refused = client.receive(keep);
  REQUIRE(refused->body_type() == wire::ResponseBody::Error);
  CHECK(refused->client_request_id() == 2);
  CHECK(refused->body_as_Error()->code() == wire::ErrorCode::overloaded);
  door.backlog->release(prompt(1).size());
  client.send(prompt(3));
  CHECK(door.intake->next().bytes == prompt(3));
}

TEST_CASE("the client gateway sends from any thread to its peer, and reports a peer it can no longer reach as gone") {
  Door door;
  std::string peer;
  {
    Client client(door.endpoint);
    client.send(messages::stats_request(7));
    peer = door.intake->next().peer;
    std::thread([&] { door.gateway.send(peer, messages::pong_response(7, 1)); }).join();
    std::string keep;
    CHECK(client.receive(keep)->client_request_id() == 7);
  }  // the client closes its socket
  // The ROUTER learns of the disconnect asynchronously; sends to a peer it no
  // longer knows fail (ROUTER_MANDATORY) and report it.
  for (int i = 0; i < 200; ++i) {
    door.gateway.send(peer, messages::pong_response(8, 1));
    if (const std::optional<gateways::ClientFrame> f = door.intake->next_within(50ms)) {
      CHECK(f->peer == peer);
      CHECK(f->client == "(gone)");
      return;
    }
  }
  FAIL("the peer was never reported gone");
}
