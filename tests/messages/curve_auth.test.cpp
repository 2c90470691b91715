// CurveZMQ keys, client directories and the ZAP handler, over a real
// ROUTER/DEALER pair on inproc... and tcp on the loopback (CURVE runs on both).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "messages/curve_auth.h"
#include "messages/zmq_sockets.h"

using namespace troupe::messages;

namespace {

std::filesystem::path scratch(const char* name) {
  auto p = std::filesystem::temp_directory_path() / ("troupe-curve-" + std::to_string(getpid()) + "-" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

}  // namespace

TEST_CASE("key files round-trip, refuse to be overwritten, and a mismatched pair is refused") {
  const auto dir = scratch("files");
  const KeyPair k = generate_key_pair();
  write_key_files(dir / "alice", k);
  CHECK(read_secret_file(dir / "alice.secret").secret_key == k.secret_key);
  CHECK(read_public_key(dir / "alice.key") == k.public_key);
  CHECK((std::filesystem::status(dir / "alice.secret").permissions() & std::filesystem::perms::others_read) ==
        std::filesystem::perms::none);
  CHECK_THROWS_WITH(write_key_files(dir / "alice", k), Catch::Contains("exists already"));
  const KeyPair other = generate_key_pair();
  write(dir / "mixed.secret", "public-key = " + other.public_key + "\nsecret-key = " + k.secret_key + "\n");
  CHECK_THROWS_WITH(read_secret_file(dir / "mixed.secret"), Catch::Contains("does not belong to its secret-key"));
  write(dir / "short.key", "public-key = abc\n");
  CHECK_THROWS_WITH(read_public_key(dir / "short.key"), Catch::Contains("not a 40-character Z85"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a clients directory reads each client's policy and refuses what it cannot mean") {
  const auto dir = scratch("clients");
  const KeyPair a = generate_key_pair(), b = generate_key_pair();
  write(dir / "alice.key", "# alice\npublic-key = " + a.public_key + "\nweight = 3\nmax-priority = chat\n");
  write(dir / "root.key", "public-key = " + b.public_key + "\nadmin = true\n");
  write(dir / "notes.txt", "not a key");
  ClientDirectory d = ClientDirectory::read(dir);
  REQUIRE(d.size() == 2);
  CHECK(d.by_key(a.public_key)->name == "alice");
  CHECK(d.by_name("alice")->weight == 3);
  CHECK(d.by_name("alice")->max_priority == troupe::wire::Priority::chat);
  CHECK(d.by_name("root")->admin);
  CHECK_FALSE(d.by_name("alice")->admin);
  for (const auto& [body, why] : std::vector<std::pair<std::string, std::string>>{
           {"weight = 0", "weight must be"}, {"max-priority = urgent", "max-priority must be"},
           {"admin = yes", "admin must be"}, {"colour = red", "unknown setting 'colour'"},
           {"secret-key = " + a.secret_key, "holds only a public key"}}) {
    const auto bad = scratch("bad");
    write(bad / "x.key", "public-key = " + a.public_key + "\n" + body + "\n");
    CHECK_THROWS_WITH(ClientDirectory::read(bad), Catch::Contains(why));
    std::filesystem::remove_all(bad);
  }
  write(dir / "alias.key", "public-key = " + a.public_key + "\n");
  CHECK_THROWS_WITH(ClientDirectory::read(dir), Catch::Contains("have the same public key"));
  const auto empty = scratch("empty");
  CHECK_THROWS_WITH(ClientDirectory::read(empty), Catch::Contains("holds no NAME.key"));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(empty);
}

TEST_CASE("an HTTP bearer token is kept as its SHA-256 and names its client, and nothing else does") {
  // The FIPS 180-2 test vector, so the hash is SHA-256 and not merely stable.
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string t1 = generate_http_token(), t2 = generate_http_token();
  CHECK(t1.size() == 64);
  CHECK(t1 != t2);
  const auto dir = scratch("tokens");
  const KeyPair a = generate_key_pair(), b = generate_key_pair();
  write_key_files(dir / "alice", a, t1);
  write_key_files(dir / "bob", b);  // no token: no HTTP access
  CHECK(read_secret_file(dir / "alice.secret").secret_key == a.secret_key);  // the token line is ignored there
  std::ifstream secret(dir / "alice.secret");
  CHECK(std::string(std::istreambuf_iterator<char>(secret), {}).find("http-token = " + t1) != std::string::npos);
  ClientDirectory d = ClientDirectory::read(dir);  // alice.secret and bob.secret are not client files
  REQUIRE(d.size() == 2);
  CHECK(d.by_name("alice")->http_token_sha256 == sha256_hex(t1));
  REQUIRE(d.by_http_token(t1) != nullptr);
  CHECK(d.by_http_token(t1)->name == "alice");
  CHECK(d.by_http_token(t2) == nullptr);
  CHECK(d.by_http_token("") == nullptr);
  CHECK(d.by_http_token(sha256_hex(t1)) == nullptr);  // the stored hash is not itself a token
  CHECK(d.by_name("bob")->http_token_sha256.empty());
  for (const auto& [body, why] : std::vector<std::pair<std::string, std::string>>{
           {"http-token-sha256 = abc", "64 lowercase hex digits"},
           {"http-token-sha256 = " + std::string(64, 'G'), "64 lowercase hex digits"},
           {"http-token = " + t1, "holds only a public key and a token's hash"}}) {
    const auto bad = scratch("bad-token");
    write(bad / "x.key", "public-key = " + a.public_key + "\n" + body + "\n");
    CHECK_THROWS_WITH(ClientDirectory::read(bad), Catch::Contains(why));
    std::filesystem::remove_all(bad);
  }
  const auto twice = scratch("token-twice");
  write(twice / "x.key", "public-key = " + a.public_key + "\nhttp-token-sha256 = " + sha256_hex(t1) + "\n");
  write(twice / "y.key", "public-key = " + b.public_key + "\nhttp-token-sha256 = " + sha256_hex(t1) + "\n");
  CHECK_THROWS_WITH(ClientDirectory::read(twice), Catch::Contains("same http-token-sha256"));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(twice);
}

TEST_CASE("the ZAP handler admits a listed key under its name and nothing else") {
  const KeyPair server = generate_key_pair(), alice = generate_key_pair(), mallory = generate_key_pair();
  auto clients = std::make_shared<ClientDirectory>();
  clients->add({"alice", alice.public_key, 1, troupe::wire::Priority::interactive, false, ""});
  zmq::context_t ctx(1);
  auto zap = std::make_unique<ZapHandler>(ctx, clients);
  const std::string ep = "tcp://127.0.0.1:" + std::to_string(30000 + getpid() % 20000);
  const CurveKeys server_keys{server.public_key, server.secret_key, {}};
  zmq::socket_t router = bind_router(ctx, ep, {}, server_keys);
  auto ask = [&](const KeyPair* who) {
    CurveKeys c;
    if (who) c = {who->public_key, who->secret_key, server.public_key};
    zmq::socket_t dealer = connect_dealer(ctx, ep, {}, c);
    dealer.send(zmq::str_buffer("hello"), zmq::send_flags::none);
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    std::string name = "(nothing)";
    if (zmq::poll(&item, 1, std::chrono::milliseconds(who == &alice ? 5000 : 500)) > 0) {
      zmq::message_t id, body;
      (void)router.recv(id);
      (void)router.recv(body);
      name = peer_name(body);
    }
    return name;
  };
  CHECK(ask(&alice) == "alice");
  CHECK(ask(&mallory) == "(nothing)");
  CHECK(ask(nullptr) == "(nothing)");
  CHECK(zap->refused() >= 1);
  router.close();
  zap.reset();
}

TEST_CASE("only loopback endpoints count as loopback") {
  for (const char* e : {"tcp://127.0.0.1:7700", "tcp://127.8.0.1:1", "tcp://localhost:7700", "tcp://[::1]:7700",
                        "ipc:///tmp/x.sock", "inproc://x"})
    CHECK(is_loopback_endpoint(e));
  for (const char* e : {"tcp://0.0.0.0:7700", "tcp://*:7700", "tcp://10.0.0.5:7700", "tcp://eth0:7700", "tcp://[::]:1"})
    CHECK_FALSE(is_loopback_endpoint(e));
}
