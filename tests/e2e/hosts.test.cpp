// Workers on other hosts, simulated by network namespaces that the test
// makes (each "host" its own network stack, joined to this one by a veth
// pair): the front end reaches its workers over real TCP between addresses,
// and a host can be cut off the network without its process knowing, which
// no kill on one machine can show. The tests need CAP_NET_ADMIN (root in a
// container that may make namespaces); without it they exit 77, which CTest
// reports as skipped.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;

namespace {

constexpr int kSkipped = 77;  // tests/CMakeLists.txt: SKIP_RETURN_CODE

bool sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

// One simulated host: a network namespace with address 10.N.H.2, reached
// from this namespace (10.N.H.1) over a veth pair.
struct Host {
  std::string ns, link, address;
  Host(int h) {
    const int n = 200 + getpid() % 50;
    const std::string tag = std::to_string(getpid() % 100000) + "h" + std::to_string(h);
    ns = "troupe-" + tag;
    link = "tv" + tag;  // at most 15 characters
    const std::string net = "10." + std::to_string(n) + "." + std::to_string(h) + ".";
    address = net + "2";
    const bool made = sh("ip netns add " + ns) && sh("ip link add " + link + " type veth peer name " + link + "p netns " + ns) &&
                      sh("ip addr add " + net + "1/24 dev " + link) && sh("ip link set " + link + " up") &&
                      sh("ip -n " + ns + " addr add " + address + "/24 dev " + link + "p") &&
                      sh("ip -n " + ns + " link set " + link + "p up") && sh("ip -n " + ns + " link set lo up");
    if (!made) {
      cleanup();
      std::printf("skipped: cannot make network namespaces here (needs iproute2 and CAP_NET_ADMIN)\n");
      std::exit(kSkipped);
    }
  }
  ~Host() { cleanup(); }
  void cleanup() {
    sh("ip link del " + link);
    sh("ip netns del " + ns);
  }
  // The host's cable: down, nothing passes either way, and neither side's processes are told.
  void cable(bool up) { sh("ip -n " + ns + " link set " + link + "p " + (up ? "up" : "down")); }
};

struct HostWorker {
  std::string endpoint;
  ChildProcess process;
  HostWorker(const Host& h, const std::string& tag)
      : endpoint("tcp://" + h.address + ":7701"),
        process({"/usr/sbin/ip", "netns", "exec", h.ns, troupe_binary(), "worker", "-m", model_path(), "--listen", endpoint,
                 "--insecure", "--threads", "1", "--kv-tokens", "8192"},
                Server::log(tag), "listening on") {}
};

std::string prompt_for(int i) { return "a stream across hosts " + std::to_string(i) + ": once upon a time"; }

}  // namespace

TEST_CASE("workers on two hosts: streams over TCP, and a host cut off the network loses nothing", "[service][scale][hosts]") {
  Host h1(1), h2(2);
  HostWorker a(h1, "host-a"), b(h2, "host-b");
  Server server("hosts", {"--worker", a.endpoint, "--worker", b.endpoint, "--worker-timeout", "20"});
  CHECK_THAT(server.process.output(), Catch::Contains("verifier in 2 workers: " + a.endpoint));
  Reference ref;
  // Long enough that the cut lands mid-stream even when drafts are accepted
  // (greedy requests speculate by default, several tokens a step).
  constexpr int kStreams = 8, kTokens = 256;
  std::vector<std::string> prompts;
  for (int i = 0; i < kStreams; ++i) prompts.push_back(prompt_for(i));
  std::atomic<int> deltas{0};
  std::vector<messages::StreamOutcome> got;
  std::thread clients([&] { got = concurrent_greedy(server.endpoint, prompts, kTokens, [&](std::string_view) { ++deltas; }); });
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (deltas < kStreams * 8 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  // Host 2 drops off the network: no FIN, no RST; its worker runs on, unaware.
  const auto cut = std::chrono::steady_clock::now();
  h2.cable(false);
  clients.join();
  const double stalled_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
  for (int i = 0; i < kStreams; ++i) {
    const auto& g = got[static_cast<size_t>(i)];
    INFO("stream " << i << ": " << g.message);
    REQUIRE(g.done);
    CHECK(g.tokens == ref.greedy(prompt_for(i), kTokens));
  }
  messages::ClientConnection c(server.endpoint);
  messages::Bytes keep;
  const auto* s = stats(c, keep);
  REQUIRE(s);
  REQUIRE(s->workers());
  REQUIRE(s->workers()->size() == 2);
  const auto* wb = s->workers()->Get(1);
  CHECK_FALSE(wb->up());
  CHECK(wb->lost() == 1);
  std::printf("hosts: host 2 cut off mid-stream; %llu requests moved; the streams finished %.1f s after the cut, every one "
              "exact\n",
              static_cast<unsigned long long>(wb->moved_out()), stalled_s);
  // The cable back: the same worker process answers the probe and is placed on again, empty.
  h2.cable(true);
  bool up = false;
  for (int i = 0; i < 300 && !up; ++i) {
    const auto* t = stats(c, keep);
    up = t && t->workers() && t->workers()->size() == 2 && t->workers()->Get(1)->up();
    if (!up) std::this_thread::sleep_for(100ms);
  }
  CHECK(up);
}
