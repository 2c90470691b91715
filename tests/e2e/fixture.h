#pragma once
// What the end-to-end tests share: a synthetic model, a `troupe serve`
// child process on its own endpoint and store, and the engine run alone as
// the reference.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/generator.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"
#include "messages/client_connection.h"
#include "messages/client_frames.h"
#include "messages/client_validation.h"
#include "tests/e2e/server_process.h"

namespace troupe::test {

using namespace std::chrono_literals;

inline SyntheticModelSpec service_model_spec() {
  SyntheticModelSpec spec;
  spec.n_embd = 128;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 256;
  spec.seed = 3;
  return spec;
}

inline std::string model_path() {
  static const std::string path = [] {
    const auto p = std::filesystem::temp_directory_path() / ("troupe-service-test-" + std::to_string(getpid()) + ".gguf");
    write_synthetic_model(service_model_spec(), p.string());
    return p.string();
  }();
  return path;
}

// A draft model for model_path(): the same weights in 8 bits (the same
// tokens; its drafts are close to the model's, not equal).
inline std::string draft_model_path() {
  static const std::string path = [] {
    const auto p = std::filesystem::temp_directory_path() / ("troupe-service-draft-" + std::to_string(getpid()) + ".gguf");
    SyntheticModelSpec spec = service_model_spec();
    spec.weight_type = TensorType::Q8_0;
    write_synthetic_model(spec, p.string());
    return p.string();
  }();
  return path;
}

struct Server {
  std::string endpoint;
  ChildProcess process;
  // A new endpoint (and store) for `tag`; or, given `at`, that endpoint and
  // its store again (a restart).
  Server(const std::string& tag, std::vector<std::string> extra = {}, const std::string& at = "")
      : endpoint(at.empty() ? ipc_endpoint(tag) : at), process(args(endpoint, extra), log(tag), "listening on") {}
  static std::vector<std::string> args(const std::string& ep, const std::vector<std::string>& extra) {
    std::vector<std::string> a{troupe_binary(), "serve", "-m", model_path(), "--listen", ep, "--threads", "1",
                               "--data-dir", data_dir(ep)};
    if (std::find(extra.begin(), extra.end(), "--kv-tokens") == extra.end()) a.insert(a.end(), {"--kv-tokens", "16384"});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  static std::string data_dir(const std::string& endpoint) { return endpoint_data_dir(endpoint); }
  static std::string log(const std::string& tag) {
    return (std::filesystem::temp_directory_path() / ("troupe-serve-" + tag + "-" + std::to_string(getpid()) + ".log")).string();
  }
};

// The engine alone: greedy tokens for a prompt, as `troupe generate` gives them.
struct Reference {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Tokenizer> tokenizer;
  explicit Reference(AttentionPrecision precision = AttentionPrecision::fp32) {
    BackendOptions o;
    o.kv_pages = 512;
    o.attention_precision = precision;
    backend = open_backend(model_path(), o);
    tokenizer = std::make_unique<Tokenizer>(load_vocabulary(backend->file()));
  }
  std::vector<int32_t> greedy(const std::string& prompt, int max_tokens) {
    GenerateOptions g;
    g.max_tokens = max_tokens;
    g.sampling.temperature = 0;
    const auto ids = tokenizer->encode(prompt, tokenizer->add_bos_by_default(), false);
    return generate(*backend, *tokenizer, ids, g, {}).tokens;
  }
};

inline const wire::StatsReply* stats(messages::ClientConnection& c, messages::Bytes& keep) {
  const uint64_t id = c.next_id();
  c.send(messages::stats_request(id));
  while (auto f = c.receive(5s)) {
    keep = *f;
    const auto* r = messages::check_response(keep);
    if (r->client_request_id() == id && r->body_as_StatsReply()) return r->body_as_StatsReply();
  }
  return nullptr;
}

// Polls the server's stats until `ok` holds (or the time is up).
template <typename Ok>
bool stats_until(messages::ClientConnection& c, std::chrono::milliseconds within, Ok ok) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  messages::Bytes keep;
  do {
    if (const auto* s = stats(c, keep); s && ok(s)) return true;
    std::this_thread::sleep_for(20ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

// Polls until no request runs and no page is held by a sequence.
inline bool pages_return(messages::ClientConnection& c, std::chrono::milliseconds within) {
  return stats_until(c, within, [](const wire::StatsReply* s) {
    return s->running() == 0 && s->waiting() == 0 && s->pages_used() == 0;
  });
}

// Polls until the store has confirmed at least `pages` spilled KV pages: a
// turn's pages spill on the step after it ends, then are written.
inline bool pages_spilled(const std::string& endpoint, uint64_t pages, std::chrono::milliseconds within = 10s) {
  messages::ClientConnection c(endpoint);
  return stats_until(c, within, [&](const wire::StatsReply* s) { return s->pages_spilled() >= pages; });
}

inline messages::SamplingFields greedy(int max_tokens) {
  messages::SamplingFields s;
  s.temperature = 0;
  s.max_tokens = max_tokens;
  return s;
}

// Greedy streams, one client connection each, all at once; `on_text` sees every delta.
inline std::vector<messages::StreamOutcome> concurrent_greedy(const std::string& endpoint,
                                                              const std::vector<std::string>& prompts, int tokens,
                                                              const std::function<void(std::string_view)>& on_text = {}) {
  std::vector<messages::StreamOutcome> got(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back([&, i] {
      messages::ClientConnection c(endpoint);
      const uint64_t id = c.next_id();
      got[i] = c.stream(messages::generate_request(id, prompts[i], greedy(tokens)), id, on_text, std::chrono::minutes(3));
    });
  for (auto& t : clients) t.join();
  return got;
}


// One session turn on a fresh connection (so nothing queued for a dead
// server is delivered to the next one).
inline messages::StreamOutcome turn(const std::string& endpoint, const std::string& session, const std::string& user, int tokens,
                             std::chrono::milliseconds timeout = 60s) {
  messages::ClientConnection c(endpoint);
  const uint64_t id = c.next_id();
  const std::vector<std::pair<std::string, std::string>> msgs{{"user", user}};
  return c.stream(messages::chat_request(id, session, msgs, greedy(tokens)), id, {}, timeout);
}

// A conversation's greedy answer with logprobs, as one request without a
// session (on a server that stores no KV, a full prefill); `session` given,
// the messages are that session's next turn instead.
inline messages::StreamOutcome chat_logprobs(const std::string& endpoint, const std::string& session,
                                      const std::vector<std::pair<std::string, std::string>>& msgs, int tokens) {
  messages::ClientConnection c(endpoint);
  const uint64_t id = c.next_id();
  return c.stream(messages::chat_request(id, session, msgs, greedy(tokens), wire::Priority::chat, true), id, {}, 60s);
}

}  // namespace troupe::test
