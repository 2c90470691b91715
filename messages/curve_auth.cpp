#include "messages/curve_auth.h"

#include <sodium.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace troupe::messages {
namespace {

using Fields = std::map<std::string, std::string>;

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

Fields read_fields(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw AuthError("cannot read the key file " + path.string());
  Fields f;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;  // whole-line comments only: Z85 keys may hold '#'

    const size_t eq = line.find('=');
    if (eq == std::string::npos)
      throw AuthError(path.string() + ":" + std::to_string(n) + ": expected `name = value`, got '" + line + "'");
    f[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return f;
}

bool z85_key(const std::string& k) {
  if (k.size() != 40) return false;
  std::array<uint8_t, 32> bin{};
  return zmq_z85_decode(bin.data(), k.c_str()) != nullptr;
}

std::string key_field(const Fields& f, const char* name, const std::filesystem::path& path) {
  auto it = f.find(name);
  if (it == f.end()) throw AuthError(path.string() + ": no " + name + " line");
  if (!z85_key(it->second)) throw AuthError(path.string() + ": " + name + " is not a 40-character Z85 CurveZMQ key");
  return it->second;
}

void write_file(const std::filesystem::path& path, const std::string& text, mode_t mode) {
  if (std::filesystem::exists(path)) throw AuthError(path.string() + " exists already; not overwriting a key");
  std::FILE* f = std::fopen(path.c_str(), "wx");
  if (!f) throw AuthError("cannot write " + path.string());
  ::chmod(path.c_str(), mode);  // before the secret is in it
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) throw AuthError("cannot write " + path.string());
}

wire::Priority priority_named(const std::string& v, const std::filesystem::path& path) {
  if (v == "interactive") return wire::Priority::interactive;
  if (v == "chat") return wire::Priority::chat;
  if (v == "batch") return wire::Priority::batch;
  throw AuthError(path.string() + ": max-priority must be interactive, chat or batch, not '" + v + "'");
}

std::string hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) out[2 * i] = kDigits[p[i] >> 4], out[2 * i + 1] = kDigits[p[i] & 15];
  return out;
}

bool sha256_field(const std::string& v) {
  return v.size() == 64 && std::all_of(v.begin(), v.end(), [](char c) { return std::isdigit(c) || (c >= 'a' && c <= 'f'); });
}

std::string frame(zmq::socket_t& s) {
  zmq::message_t m;
  if (!s.recv(m, zmq::recv_flags::none)) return {};
  return m.to_string();
}

}  // namespace

KeyPair generate_key_pair() {
  if (!zmq_has("curve")) throw AuthError("this libzmq has no CURVE support");
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) throw AuthError(std::string("cannot make a key pair: ") + zmq_strerror(zmq_errno()));
  return {pub, sec};
}

std::string generate_http_token() {
  if (sodium_init() < 0) throw AuthError("libsodium cannot start: no random bytes for a token");
  unsigned char bytes[32];
  randombytes_buf(bytes, sizeof bytes);
  return hex(bytes, sizeof bytes);
}

std::string sha256_hex(const std::string& bytes) {
  static const bool started = sodium_init() >= 0;  // picks the implementation; idempotent
  (void)started;
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return hex(digest, sizeof digest);
}

void write_key_files(const std::filesystem::path& base, const KeyPair& pair, const std::string& http_token) {
  const std::filesystem::path pub = base.string() + ".key", sec = base.string() + ".secret";
  if (std::filesystem::exists(pub)) throw AuthError(pub.string() + " exists already; not overwriting a key");
  const std::string name = base.filename().string();
  std::string secret = "# troupe CurveZMQ key pair '" + name + "': keep it secret\npublic-key = " + pair.public_key +
                       "\nsecret-key = " + pair.secret_key + "\n";
  std::string shared = "# troupe CurveZMQ public key '" + name + "'\npublic-key = " + pair.public_key + "\n";
  if (!http_token.empty()) {
    secret += "# the bearer token of HTTP requests (Authorization: Bearer ...)\nhttp-token = " + http_token + "\n";
    shared += "http-token-sha256 = " + sha256_hex(http_token) + "\n";
  }
  write_file(sec, secret, 0600);
  write_file(pub, shared, 0644);
}

KeyPair read_secret_file(const std::filesystem::path& path) {
  const Fields f = read_fields(path);
  KeyPair k{key_field(f, "public-key", path), key_field(f, "secret-key", path)};
  char derived[41];
  if (zmq_curve_public(derived, k.secret_key.c_str()) != 0 || k.public_key != derived)
    throw AuthError(path.string() + ": its public-key does not belong to its secret-key");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 0077))
    std::fprintf(stderr, "troupe: warning: %s is readable by others (chmod 600 it)\n", path.c_str());
  return k;
}

std::string read_public_key(const std::filesystem::path& path) { return key_field(read_fields(path), "public-key", path); }

ClientDirectory ClientDirectory::read(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw AuthError("--clients-dir " + dir.string() + " is not a directory");
  ClientDirectory d;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".key") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    const Fields f = read_fields(path);
    ClientPolicy c;
    c.name = path.stem().string();
    c.public_key = key_field(f, "public-key", path);
    for (const auto& [k, v] : f) {
      if (k == "public-key") continue;
      if (k == "weight") {
        try {
          const long w = std::stol(v);
          if (w < 1 || w > 1000) throw std::out_of_range("weight");
          c.weight = static_cast<uint32_t>(w);
        } catch (const std::exception&) {
          throw AuthError(path.string() + ": weight must be a whole number from 1 to 1000, not '" + v + "'");
        }
      } else if (k == "max-priority") {
        c.max_priority = priority_named(v, path);
      } else if (k == "admin") {
        if (v != "true" && v != "false") throw AuthError(path.string() + ": admin must be true or false");
        c.admin = v == "true";
      } else if (k == "http-token-sha256") {
        if (!sha256_field(v))
          throw AuthError(path.string() + ": http-token-sha256 must be 64 lowercase hex digits (a SHA-256)");
        c.http_token_sha256 = v;
      } else if (k == "secret-key" || k == "http-token") {
        throw AuthError(path.string() + ": a client file holds only a public key and a token's hash; this one has a " + k);
      } else {
        throw AuthError(path.string() + ": unknown setting '" + k + "' (public-key, weight, max-priority, admin, http-token-sha256)");
      }
    }
    d.add(std::move(c));
  }
  if (d.size() == 0) throw AuthError("--clients-dir " + dir.string() + " holds no NAME.key file: no client could connect");
  return d;
}

void ClientDirectory::add(ClientPolicy c) {
  if (by_name_.count(c.name)) throw AuthError("client '" + c.name + "' is given twice");
  if (auto it = name_of_key_.find(c.public_key); it != name_of_key_.end())
    throw AuthError("clients '" + it->second + "' and '" + c.name + "' have the same public key");
  if (!c.http_token_sha256.empty()) {
    if (auto it = name_of_token_hash_.find(c.http_token_sha256); it != name_of_token_hash_.end())
      throw AuthError("clients '" + it->second + "' and '" + c.name + "' have the same http-token-sha256");
    name_of_token_hash_[c.http_token_sha256] = c.name;
  }
  name_of_key_[c.public_key] = c.name;
  by_name_.emplace(c.name, std::move(c));
}

const ClientPolicy* ClientDirectory::by_name(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

const ClientPolicy* ClientDirectory::by_key(const std::string& key) const {
  auto it = name_of_key_.find(key);
  return it == name_of_key_.end() ? nullptr : by_name(it->second);
}

// Looked up by the token's hash: a timing difference tells an attacker about
// hashes of their guesses, never about the token.
const ClientPolicy* ClientDirectory::by_http_token(const std::string& token) const {
  if (token.empty() || name_of_token_hash_.empty()) return nullptr;
  auto it = name_of_token_hash_.find(sha256_hex(token));
  return it == name_of_token_hash_.end() ? nullptr : by_name(it->second);
}

ZapHandler::ZapHandler(zmq::context_t& ctx, std::shared_ptr<const ClientDirectory> clients)
    : socket_(ctx, zmq::socket_type::rep), clients_(std::move(clients)) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");  // libzmq's fixed ZAP endpoint
  thread_ = std::thread([this] { loop(); });
}

ZapHandler::~ZapHandler() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

// ZAP 1.0 (RFC 27): version, request id, domain, address, routing id,
// mechanism, credentials; the answer: version, request id, status code,
// status text, user id, metadata.
void ZapHandler::loop() {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  while (!stopping_) {
    if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
    std::vector<std::string> parts;
    do parts.push_back(frame(socket_));
    while (socket_.get(zmq::sockopt::rcvmore));
    std::string status = "400", text = "unknown client key", user;
    if (parts.size() < 6 || parts[0] != "1.0") {
      text = "malformed ZAP request";
    } else if (parts[5] != "CURVE" || parts.size() < 7 || parts[6].size() != 32) {
      text = "CURVE required";
    } else {
      char z85[41];
      zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(parts[6].data()), 32);
      if (const ClientPolicy* c = clients_->by_key(z85)) status = "200", text = "OK", user = c->name;
    }
    if (status != "200") ++refused_;
    const std::string reply[] = {"1.0", parts.size() > 1 ? parts[1] : "", status, text, user, ""};
    for (size_t i = 0; i < 6; ++i)
      socket_.send(zmq::buffer(reply[i]), i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

std::string peer_name(const zmq::message_t& frame) {
  // zmq_msg_gets only reads the message, but takes it non-const.
  const char* v = zmq_msg_gets(const_cast<zmq_msg_t*>(frame.handle()), "User-Id");
  return v ? std::string(v) : std::string();
}

std::string anonymous_peer(const zmq::message_t& frame) {
  zmq_msg_t* m = const_cast<zmq_msg_t*>(frame.handle());
  const int fd = zmq_msg_get(m, ZMQ_SRCFD);
  if (fd < 0) return {};
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return {};
  if (addr.ss_family == AF_UNIX) {
    ucred cred{};
    socklen_t n = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &n) == 0) return "pid:" + std::to_string(cred.pid);
    return {};
  }
  // ZeroMQ's own rendering of the address (IPv4 or IPv6, no port).
  const char* v = zmq_msg_gets(m, "Peer-Address");
  return v ? std::string("host:") + v : std::string();
}

CurveKeys server_curve(const std::filesystem::path& secret_file) {
  const KeyPair k = read_secret_file(secret_file);
  return {k.public_key, k.secret_key, {}};
}

CurveKeys client_curve(const std::filesystem::path& secret_file, const std::filesystem::path& server_key_file) {
  const KeyPair k = read_secret_file(secret_file);
  return {k.public_key, k.secret_key, read_public_key(server_key_file)};
}

bool is_loopback_endpoint(const std::string& e) {
  if (e.rfind("ipc://", 0) == 0 || e.rfind("inproc://", 0) == 0) return true;
  if (e.rfind("tcp://", 0) != 0) return false;
  std::string host = e.substr(6, e.rfind(':') == std::string::npos ? std::string::npos : e.rfind(':') - 6);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace troupe::messages
