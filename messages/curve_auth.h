#pragma once
// CurveZMQ for every troupe socket: key pairs and their files, the clients
// a server admits, and the ZAP handler that admits them.
//
// A key file is text, one `name = value` per line, `#` starting a comment line:
//
//   NAME.key     public-key = <40 Z85 characters>            (shareable)
//   NAME.secret  public-key = ..., secret-key = ...          (mode 0600)
//
// A server's --clients-dir holds one NAME.key per client it admits; NAME is
// who that client is (its sessions and jobs are NAME's). A client file may
// add its policy: `weight = 3` (its fair share), `max-priority = chat` (the
// most urgent priority its requests may claim; more urgent ones are
// lowered to it), `admin = true` (sees and manages everyone's sessions and
// jobs), `http-token-sha256 = HEX` (the SHA-256 of the bearer token with
// which the client's HTTP requests act as NAME; `troupe keygen
// --http-token` writes the token into NAME.secret and its hash here).
//
// The ZAP handler fails closed: a CURVE peer whose key is in no client file
// is refused during the handshake, before any frame of it is read, and so
// is any peer trying another mechanism.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "messages/client_generated.h"
#include "messages/zmq_sockets.h"

namespace troupe::messages {

// A key file that cannot be read or is malformed; what() is one line
// naming the file.
class AuthError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct KeyPair {
  std::string public_key, secret_key;  // Z85, 40 characters each
};

// A fresh pair from libzmq (throws AuthError if it was built without CURVE).
KeyPair generate_key_pair();
// Writes base.key and base.secret (0600); refuses to overwrite either. With
// an HTTP token, base.secret holds it (`http-token`) and base.key its hash.
void write_key_files(const std::filesystem::path& base, const KeyPair& pair, const std::string& http_token = "");
// A .secret file's pair (the public key is checked against the secret).
KeyPair read_secret_file(const std::filesystem::path& path);
// A .key or .secret file's public key.
std::string read_public_key(const std::filesystem::path& path);

struct ClientPolicy {
  std::string name;
  std::string public_key;
  uint32_t weight = 1;
  wire::Priority max_priority = wire::Priority::interactive;
  bool admin = false;
  std::string http_token_sha256;  // 64 lowercase hex digits; empty: no HTTP access
};

// An HTTP bearer token: 32 random bytes as 64 hex digits, and its SHA-256
// (hex), which is what a server keeps.
std::string generate_http_token();
std::string sha256_hex(const std::string& bytes);

// The clients a server admits, by name and by public key.
class ClientDirectory {
 public:
  ClientDirectory() = default;
  // Every NAME.key in `dir`; throws AuthError for a bad file, a key given
  // twice, or a directory without any.
  static ClientDirectory read(const std::filesystem::path& dir);
  void add(ClientPolicy client);  // throws AuthError for a name or key given twice

  const ClientPolicy* by_name(const std::string& name) const;
  const ClientPolicy* by_key(const std::string& z85_public_key) const;
  // The client whose http-token-sha256 is the token's hash; null if none.
  const ClientPolicy* by_http_token(const std::string& token) const;
  size_t size() const { return by_name_.size(); }

 private:
  std::map<std::string, ClientPolicy> by_name_;
  std::map<std::string, std::string> name_of_key_;
  std::map<std::string, std::string> name_of_token_hash_;
};

// Answers ZAP requests for sockets of `ctx`: bound before any CURVE server
// socket of that context, alive until after the last is closed.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& ctx, std::shared_ptr<const ClientDirectory> clients);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;
  uint64_t refused() const { return refused_; }

 private:
  void loop();
  zmq::socket_t socket_;
  std::shared_ptr<const ClientDirectory> clients_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

// The name ZAP gave the peer that sent `frame` ("" when it came unauthenticated).
std::string peer_name(const zmq::message_t& frame);
// Who sent `frame` on a server without authentication, for fair shares and
// queue places (docs/PROTOCOL.md, "Identity"): over TCP its host
// ("host:ADDRESS"), over IPC its process ("pid:N"); "" when neither can be
// told. Read as the frame arrives (it asks the connection's descriptor).
std::string anonymous_peer(const zmq::message_t& frame);

// Curve settings from key files: a server's (its .secret), a client's (its
// .secret and the server's .key).
CurveKeys server_curve(const std::filesystem::path& secret_file);
CurveKeys client_curve(const std::filesystem::path& secret_file, const std::filesystem::path& server_key_file);

// A loopback endpoint (tcp on 127.0.0.0/8, ::1 or localhost; ipc; inproc):
// the only kind served without authentication unless the operator insists.
bool is_loopback_endpoint(const std::string& endpoint);

}  // namespace troupe::messages
