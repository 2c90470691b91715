// The service end to end: a real `troupe serve` process, its socket, and
// clients talking to it as users do. Outputs are checked against the engine
// run alone in this process (what `troupe generate` does).
#include <catch2/catch.hpp>

#include <set>

#include <atomic>
#include <cstdlib>
#include <map>
#include <random>
#include <algorithm>
#include <thread>

#include "engine/backend.h"
#include "engine/generator.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"
#include "messages/client_connection.h"
#include "messages/client_validation.h"
#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

std::string prompt_for(int i) { return "Request number " + std::to_string(i) + " asks about the fox and the dog"; }

// n concurrent greedy streams, a connection each, checked against each prompt run alone.
void check_concurrent_streams(const std::string& endpoint, Reference& ref, int n, int tokens) {
  std::vector<messages::StreamOutcome> got(static_cast<size_t>(n));
  std::vector<std::thread> clients;
  for (int i = 0; i < n; ++i)
    clients.emplace_back([&, i] {
      messages::ClientConnection c(endpoint);
      const uint64_t id = c.next_id();
      got[i] = c.stream(messages::generate_request(id, prompt_for(i), greedy(tokens)), id, {}, 120s);
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < n; ++i) {
    INFO("stream " << i << ": " << got[i].message);
    REQUIRE(got[i].done);
    CHECK(got[i].tokens == ref.greedy(prompt_for(i), tokens));
    CHECK(got[i].usage.completion_tokens == static_cast<int32_t>(got[i].tokens.size()));
  }
}

}  // namespace

TEST_CASE("32 concurrent greedy streams are token-identical to each prompt run alone", "[service]") {
  Server server("streams");
  Reference ref;
  check_concurrent_streams(server.endpoint, ref, 32, 24);
}

TEST_CASE("100 streams with 10 cancelled mid-stream: the rest are exact and pages return", "[service]") {
  Server server("cancel");
  Reference ref;
  constexpr int kConnections = 10, kPerConnection = 10, kTokens = 16;
  std::atomic<int> cancelled{0};
  std::vector<std::string> failures;
  std::mutex m;
  std::vector<std::thread> clients;
  for (int c = 0; c < kConnections; ++c)
    clients.emplace_back([&, c] {
      messages::ClientConnection conn(server.endpoint);
      std::map<uint64_t, int> which;  // request id -> prompt index
      for (int k = 0; k < kPerConnection; ++k) {
        const uint64_t id = conn.next_id();
        which[id] = c * kPerConnection + k;
        conn.send(messages::generate_request(id, prompt_for(c * kPerConnection + k), greedy(kTokens)));
      }
      const uint64_t victim = 1;  // each connection cancels its first request after its first token
      bool cancel_sent = false;
      std::map<uint64_t, std::vector<int32_t>> tokens;
      std::map<uint64_t, wire::FinishReason> done;
      while (done.size() < which.size()) {
        auto f = conn.receive(60s);
        if (!f) break;
        const auto* r = messages::check_response(*f);
        const uint64_t id = r->client_request_id();
        if (const auto* t = r->body_as_Tokens()) {
          if (t->token_ids()) tokens[id].insert(tokens[id].end(), t->token_ids()->begin(), t->token_ids()->end());
          if (id == victim && !cancel_sent) {
            conn.send(messages::cancel_request(conn.next_id(), victim));
            cancel_sent = true;
          }
        } else if (const auto* d = r->body_as_Done()) {
          done[id] = d->finish_reason();
        }
      }
      std::lock_guard<std::mutex> lock(m);
      if (done.size() < which.size()) failures.push_back("connection " + std::to_string(c) + " timed out");
      for (auto& [id, reason] : done) {
        if (id == victim && reason == wire::FinishReason::cancelled) {
          ++cancelled;
          continue;
        }
        if (tokens[id] != ref.greedy(prompt_for(which[id]), kTokens))
          failures.push_back("request " + std::to_string(which[id]) + " differs");
      }
    });
  for (auto& t : clients) t.join();
  CHECK(failures.empty());
  for (const auto& f : failures) WARN(f);
  CHECK(cancelled >= 1);  // a victim may finish before its cancel lands; most do not
  messages::ClientConnection probe(server.endpoint);
  CHECK(pages_return(probe, 1s));
}

TEST_CASE("a client killed mid-stream has its requests ended and pages freed", "[service]") {
  Server server("killed");
  ChildProcess client({troupe_binary(), "complete", "--connect", server.endpoint, "-p", "a long answer please", "-n",
                       "30000", "-t", "0.8", "-q"},
                      Server::log("killed-client"));
  messages::ClientConnection probe(server.endpoint);
  messages::Bytes keep;
  bool streaming = false;
  for (int i = 0; i < 250 && !streaming; ++i) {
    const auto* s = stats(probe, keep);
    streaming = s && s->running() == 1 && s->tokens_generated() > 0;
    if (!streaming) std::this_thread::sleep_for(20ms);
  }
  REQUIRE(streaming);
  client.stop(SIGKILL);
  CHECK(pages_return(probe, 5s));
}

TEST_CASE("bad input gets its Error while a well-behaved client is served", "[service]") {
  Server server("bad", {"--max-waiting", "64", "--context", "256"});
  Reference ref;
  std::vector<int32_t> good_tokens;
  std::thread good([&] {
    messages::ClientConnection c(server.endpoint);
    const uint64_t id = c.next_id();
    good_tokens = c.stream(messages::generate_request(id, prompt_for(7), greedy(32)), id, {}, 120s).tokens;
  });
  messages::ClientConnection bad(server.endpoint);
  auto expect_error = [&](const messages::Bytes& frame, wire::ErrorCode code, const std::string& text) {
    bad.send(frame);
    auto f = bad.receive(10s);
    REQUIRE(f);
    const auto* r = messages::check_response(*f);
    REQUIRE(r->body_as_Error());
    CHECK(r->body_as_Error()->code() == code);
    CHECK_THAT(r->body_as_Error()->message()->str(), Catch::Contains(text));
  };
  std::mt19937 rng(1);
  std::string junk(300, '\0');
  for (auto& ch : junk) ch = static_cast<char>(rng());
  expect_error(junk, wire::ErrorCode::malformed, "not a valid Request");
  const auto whole = messages::generate_request(5, "hello", greedy(4));
  expect_error(whole.substr(0, whole.size() / 2), wire::ErrorCode::malformed, "not a valid Request");
  {
    flatbuffers::FlatBufferBuilder fbb;  // a body type this server does not know (a newer client's)
    const auto body = wire::CreateStats(fbb).Union();
    fbb.Finish(wire::CreateRequest(fbb, 6, static_cast<wire::RequestBody>(200), body));
    expect_error(std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize()),
                 wire::ErrorCode::invalid_field, "Request.body");
  }
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += "fox dog ";
  expect_error(messages::generate_request(8, long_prompt, greedy(4)), wire::ErrorCode::too_long, "the context holds 256");
  expect_error(messages::generate_request(9, "hi", greedy(0)), wire::ErrorCode::invalid_field, "max_tokens");
  expect_error(messages::cancel_request(10, 12345), wire::ErrorCode::unknown_request, "12345");
  {
    flatbuffers::FlatBufferBuilder fbb;  // a Ping with no Ping table behind it
    wire::RequestBuilder rb(fbb);
    rb.add_client_request_id(11);
    rb.add_body_type(wire::RequestBody::Ping);
    fbb.Finish(rb.Finish());
    expect_error(std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize()),
                 wire::ErrorCode::invalid_field, "without a body");
  }
  messages::SamplingFields harsh = greedy(4);
  harsh.repetition_penalty = 20;
  expect_error(messages::generate_request(12, "hi", harsh), wire::ErrorCode::invalid_field, "repeat_penalty");

  // A flood: every request is answered, Done, queue_full or overloaded, none lost.
  constexpr int kFlood = 10000;
  for (int i = 0; i < kFlood; ++i) bad.send(messages::generate_request(1000 + i, "x", greedy(1)));
  std::map<uint64_t, int> ended;  // id -> 1 done, 2 queue_full
  int queue_full = 0;
  while (static_cast<int>(ended.size()) < kFlood) {
    auto f = bad.receive(60s);
    if (!f) break;
    const auto* r = messages::check_response(*f);
    if (r->body_as_Done()) ended[r->client_request_id()] = 1;
    if (const auto* e = r->body_as_Error()) {
      CHECK((e->code() == wire::ErrorCode::queue_full || e->code() == wire::ErrorCode::overloaded));
      ended[r->client_request_id()] = 2;
      ++queue_full;
    }
  }
  CHECK(static_cast<int>(ended.size()) == kFlood);
  CHECK(queue_full > 0);
  good.join();
  CHECK(good_tokens == ref.greedy(prompt_for(7), 32));
  CHECK(pages_return(bad, 2s));
}

TEST_CASE("a second request sharing a long prefix reuses its cached pages and starts sooner", "[service]") {
  Server server("prefix");
  std::string shared;
  Reference ref;
  while (ref.tokenizer->encode(shared, false, false).size() < 1000) shared += "the quick brown fox jumps over the lazy dog ";
  messages::ClientConnection c(server.endpoint);
  const uint64_t a = c.next_id();
  const auto first = c.stream(messages::generate_request(a, shared + "first", greedy(4)), a, {}, 60s);
  const uint64_t b = c.next_id();
  const auto second = c.stream(messages::generate_request(b, shared + "second", greedy(4)), b, {}, 60s);
  INFO(first.message << " / " << second.message);
  REQUIRE(first.done);
  REQUIRE(second.done);
  CHECK(first.usage.cached_prompt_tokens == 0);
  CHECK(second.usage.cached_prompt_tokens >= 960);
  CHECK(second.usage.ttft_ms < first.usage.ttft_ms);
  std::printf("prefix cache: first TTFT %.1f ms, second %.1f ms with %d of %d prompt tokens cached\n",
              first.usage.ttft_ms, second.usage.ttft_ms, second.usage.cached_prompt_tokens, second.usage.prompt_tokens);
}

TEST_CASE("the split topology: the verifier in a worker process serves the same streams", "[service]") {
  const std::string worker_endpoint = ipc_endpoint("worker");
  ChildProcess worker({troupe_binary(), "worker", "-m", model_path(), "--listen", worker_endpoint, "--threads", "1",
                       "--kv-tokens", "16384"},
                      Server::log("worker"), "listening on");
  Server server("split", {"--worker", worker_endpoint});
  Reference ref;
  check_concurrent_streams(server.endpoint, ref, 16, 16);
  CHECK_THAT(server.process.output(), Catch::Contains("verifier in worker"));
}

TEST_CASE("n parallel samples share the prompt's pages and each is a correct continuation", "[service]") {
  Server server("samples");
  Reference ref;
  messages::ClientConnection c(server.endpoint);
  // Greedy: every sample is the prompt's greedy continuation (the forks'
  // copied pages hold the right K/V).
  uint64_t id = c.next_id();
  auto out = c.stream(messages::generate_request(id, prompt_for(3), greedy(12), wire::Priority::interactive, false, false,
                                                 false, 4),
                      id, {}, 60s, 4);
  REQUIRE(out.done);
  const auto want = ref.greedy(prompt_for(3), 12);
  for (int i = 0; i < 4; ++i) {
    INFO("sample " << i);
    CHECK(out.sample_tokens[i] == want);
  }
  // Sampled: distinct seeds per sample, so the samples differ; the same
  // request again gives the same samples.
  messages::SamplingFields hot = greedy(16);
  hot.temperature = 50.0f;  // the synthetic model is sharply peaked: flatten it
  hot.top_k = 0;
  hot.top_p = 1.0f;
  hot.min_p = 0.0f;
  hot.seed = 11;
  id = c.next_id();
  const auto a = c.stream(messages::generate_request(id, prompt_for(4), hot, wire::Priority::interactive, false, false,
                                                     true, 3),
                          id, {}, 60s, 3);
  id = c.next_id();
  const auto b = c.stream(messages::generate_request(id, prompt_for(4), hot, wire::Priority::interactive, false, false,
                                                     true, 3),
                          id, {}, 60s, 3);
  REQUIRE(a.done);
  REQUIRE(b.done);
  CHECK(a.sample_tokens == b.sample_tokens);
  CHECK(a.sample_tokens[0] != a.sample_tokens[1]);
  CHECK(a.sample_tokens[1] != a.sample_tokens[2]);
  CHECK(pages_return(c, 1s));
}

TEST_CASE("a flood of 1 MB prompts from one client: another's Pings stay fast and every prompt is answered", "[service]") {
  Server server("flood", {"--context", "256", "--intake-frames", "32"});
  messages::ClientConnection flood(server.endpoint);
  constexpr int kFlood = 200;
  const std::string huge(1000000, 'x');
  std::thread sender([&] {
    for (int i = 0; i < kFlood; ++i) flood.send(messages::generate_request(1 + i, huge, greedy(4)));
  });
  messages::ClientConnection polite(server.endpoint);
  std::vector<double> rtt_ms;
  for (int i = 0; i < 50; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(polite.ping(10s));
    rtt_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(20ms);
  }
  sender.join();
  std::map<uint64_t, wire::ErrorCode> ended;
  while (static_cast<int>(ended.size()) < kFlood) {
    auto f = flood.receive(120s);
    if (!f) break;
    const auto* r = messages::check_response(*f);
    if (const auto* e = r->body_as_Error()) ended[r->client_request_id()] = e->code();
  }
  CHECK(static_cast<int>(ended.size()) == kFlood);  // each one answered: too long for the context, or overloaded
  const auto overloaded = std::count_if(ended.begin(), ended.end(), [](const auto& e) { return e.second == wire::ErrorCode::overloaded; });
  const auto too_long = std::count_if(ended.begin(), ended.end(), [](const auto& e) { return e.second == wire::ErrorCode::too_long; });
  CHECK(overloaded + too_long == kFlood);
  CHECK(overloaded > 0);
  std::sort(rtt_ms.begin(), rtt_ms.end());
  INFO("Ping p50 " << rtt_ms[25] << " ms, max " << rtt_ms.back() << " ms; " << overloaded << " overloaded");
  CHECK(rtt_ms[48] < 100.0);  // p99 of 50
  CHECK(pages_return(polite, 2s));
}

TEST_CASE("a client that reads slower than the stream gets all 2,000 tokens and keeps its connection", "[service]") {
  // Left unread for 8 s (past ZeroMQ's 5 s heartbeat timeout), then read
  // with pauses: with ZeroMQ heartbeats on the client, libzmq dropped the
  // stalled connection and aborted the client's process.
  Server server("slow-reader");
  messages::ClientConnection c(server.endpoint);
  const uint64_t id = c.next_id();
  c.send(messages::generate_request(id, prompt_for(3), greedy(2000), wire::Priority::interactive, false, false, true));
  std::this_thread::sleep_for(8s);
  int frames = 0;
  const messages::StreamOutcome got = c.stream({}, id, [&](std::string_view) {
    if (++frames % 500 == 0) std::this_thread::sleep_for(1s);
  }, 120s);
  CHECK(got.done);
  CHECK(got.tokens.size() == 2000);
  CHECK(c.ping(5s));
}

TEST_CASE("a frame over the 4 MiB limit is answered too_long, and the connection goes on", "[service]") {
  Server server("oversized");
  messages::ClientConnection c(server.endpoint);
  c.send(messages::generate_request(9, std::string(5 << 20, 'x'), greedy(4)));
  const auto f = c.receive(10s);
  REQUIRE(f);
  const auto* r = messages::check_response(*f);
  REQUIRE(r->body_as_Error());
  CHECK(r->body_as_Error()->code() == wire::ErrorCode::too_long);
  CHECK_THAT(r->body_as_Error()->message()->str(), Catch::Contains("exceeds the limit of 4194304"));
  CHECK(c.ping(5s));
}

TEST_CASE("without authentication one host is one tenant: four connections share one queue share", "[service]") {
  // Over TCP a client's identity is its host: a process that floods through
  // four connections holds half the queue (--client-queue-share 0.5), not
  // all of it, and another host's request still gets a place.
  const int port = 20000 + static_cast<int>(getpid() % 20000);
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  const std::string data = Server::data_dir(ipc_endpoint("hosts-tenant"));
  ChildProcess server({troupe_binary(), "serve", "-m", model_path(), "--listen", endpoint, "--threads", "1", "--data-dir",
                       data, "--kv-tokens", "16384", "--max-running", "2", "--max-waiting", "16"},
                      Server::log("hosts-tenant"), "listening on");
  std::vector<std::unique_ptr<messages::ClientConnection>> flood;
  for (int c = 0; c < 4; ++c) flood.push_back(std::make_unique<messages::ClientConnection>(endpoint));
  for (auto& c : flood) REQUIRE(c->ping(5s));
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 20; ++k)
      // 1,000 tokens, past any end of text: the running two hold their slots meanwhile.
      flood[static_cast<size_t>(c)]->send(messages::generate_request(static_cast<uint64_t>(k + 1), prompt_for(k), greedy(1000),
                                                                     wire::Priority::interactive, false, false, true));
  // Every flood request answered at admission: queued (Accepted) or refused (queue_full).
  int accepted = 0, refused = 0;
  for (auto& c : flood) {
    std::set<uint64_t> answered;
    while (answered.size() < 20) {
      const auto f = c->receive(30s);
      REQUIRE(f);
      const auto* r = messages::check_response(*f);
      const bool first = r->body_as_Accepted() || r->body_as_Error();  // Tokens and Done come after an Accepted
      if (!first || !answered.insert(r->client_request_id()).second) continue;
      if (r->body_as_Accepted()) ++accepted;
      else if (r->body_as_Error()->code() == wire::ErrorCode::queue_full) ++refused;
    }
  }
  INFO(accepted << " flood requests queued or running, " << refused << " refused queue_full");
  CHECK(accepted <= 2 + 8);  // the running slots and half the 16 places
  CHECK(refused >= 70);
  messages::ClientConnection polite("tcp://127.0.0.2:0;127.0.0.1:" + std::to_string(port));
  const uint64_t id = polite.next_id();
  const auto got = polite.stream(messages::generate_request(id, "polite", greedy(4)), id, {}, 120s);
  CHECK(got.done);
  CHECK(got.error == wire::ErrorCode::none);
}

TEST_CASE("ping and stats answer at once", "[service]") {
  Server server("ping");
  messages::ClientConnection c(server.endpoint);
  c.send(messages::ping_request(1, 42));
  auto f = c.receive(5s);
  REQUIRE(f);
  const auto* r = messages::check_response(*f);
  REQUIRE(r->body_as_Pong());
  CHECK(r->body_as_Pong()->nonce() == 42);
  messages::Bytes keep;
  const auto* s = stats(c, keep);
  REQUIRE(s);
  CHECK(s->pages_total() == 1024);
  CHECK(s->pages_free() == 1024);
}

TEST_CASE("the real default model: 32 concurrent greedy streams equal each prompt alone", "[.real]") {
  const char* path = std::getenv("TROUPE_REAL_MODEL");
  REQUIRE(path != nullptr);
  const std::string endpoint = ipc_endpoint("real");
  ChildProcess server({troupe_binary(), "serve", "-m", path, "--listen", endpoint, "--threads", "2", "--kv-tokens", "8192",
                       "--data-dir", Server::data_dir(endpoint)},
                      Server::log("real"), "listening on", 120s);
  BackendOptions o;
  o.kv_pages = 64;
  o.threads = 2;
  auto backend = open_backend(path, o);
  Tokenizer tok(load_vocabulary(backend->file()));
  constexpr int kStreams = 32, kTokens = 16;
  std::vector<messages::StreamOutcome> got(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i)
    clients.emplace_back([&, i] {
      messages::ClientConnection c(endpoint);
      const uint64_t id = c.next_id();
      got[i] = c.stream(messages::generate_request(id, "def task_" + std::to_string(i) + "(items):", greedy(kTokens)), id,
                        {}, 300s);
    });
  for (auto& t : clients) t.join();
  server.stop(SIGTERM);
  for (int i = 0; i < kStreams; ++i) {
    GenerateOptions g;
    g.max_tokens = kTokens;
    g.sampling.temperature = 0;
    const auto ids = tok.encode("def task_" + std::to_string(i) + "(items):", tok.add_bos_by_default(), false);
    INFO("stream " << i << ": " << got[i].message);
    REQUIRE(got[i].done);
    CHECK(got[i].tokens == generate(*backend, tok, ids, g, {}).tokens);
  }
}

TEST_CASE("under KV pressure preempted sequences swap out and back in, and every stream stays exact", "[service]") {
  // 40 pages for 16 streams that each grow to ~6 pages: preemption is certain.
  Server server("swap", {"--kv-tokens", "640", "--token-budget", "64"});
  Reference ref;
  constexpr int kStreams = 16, kTokens = 80;
  std::vector<messages::StreamOutcome> got(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i)
    clients.emplace_back([&, i] {
      messages::ClientConnection c(server.endpoint);
      const uint64_t id = c.next_id();
      got[i] = c.stream(messages::generate_request(id, prompt_for(i), greedy(kTokens)), id, {}, 120s);
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < kStreams; ++i) {
    INFO("stream " << i << ": " << got[i].message);
    REQUIRE(got[i].done);
    CHECK(got[i].tokens == ref.greedy(prompt_for(i), kTokens));
  }
  messages::ClientConnection c(server.endpoint);
  messages::Bytes keep;
  const auto* s = stats(c, keep);
  REQUIRE(s);
  INFO("swapped out " << s->pages_swapped_out() << ", in " << s->pages_swapped_in());
  CHECK(s->pages_swapped_out() > 0);
  CHECK(s->pages_swapped_in() > 0);
}

TEST_CASE("speculative decoding in the service: 16 streams with ngram, suffix and auto drafts are token-identical, alone and batched",
          "[service]") {
  Server server("spec", {"--speculation", "auto"});
  Reference ref;
  // Repetitive prompts: their continuations copy them, so drafts are proposed and accepted.
  auto prompt = [](int i) {
    std::string p;
    for (int r = 0; r < 3; ++r) p += "the fox " + std::to_string(i % 4) + " and the dog ";
    return p;
  };
  // suffix: later streams also draft from what earlier ones wrote (the server's tree).
  for (const auto mode : {wire::Speculation::ngram, wire::Speculation::suffix, wire::Speculation::auto_}) {
    for (const int streams : {1, 16}) {
      INFO("mode " << static_cast<int>(mode) << ", " << streams << " streams");
      std::vector<messages::StreamOutcome> got(static_cast<size_t>(streams));
      std::vector<std::thread> clients;
      for (int i = 0; i < streams; ++i)
        clients.emplace_back([&, i] {
          messages::ClientConnection c(server.endpoint);
          const uint64_t id = c.next_id();
          got[static_cast<size_t>(i)] = c.stream(messages::generate_request(id, prompt(i), greedy(40), wire::Priority::interactive,
                                                                            false, false, false, 1, mode, 6),
                                                 id, {}, 120s);
        });
      for (auto& t : clients) t.join();
      int drafted = 0, accepted = 0;
      for (int i = 0; i < streams; ++i) {
        INFO("stream " << i << ": " << got[static_cast<size_t>(i)].message);
        REQUIRE(got[static_cast<size_t>(i)].done);
        CHECK(got[static_cast<size_t>(i)].tokens == ref.greedy(prompt(i), 40));
        drafted += got[static_cast<size_t>(i)].usage.spec_drafted;
        accepted += got[static_cast<size_t>(i)].usage.spec_accepted;
      }
      INFO("drafted " << drafted << ", accepted " << accepted);
      CHECK(drafted > 0);
      CHECK(accepted > 0);
    }
  }
  messages::ClientConnection c(server.endpoint);
  CHECK(pages_return(c, 2s));  // rolled-back windows leave no page behind
}

// The real model pair: TROUPE_REAL_MODEL is the target, TROUPE_REAL_DRAFT
// (optional) its draft model; TROUPE_SPEC_PROMPTS prompts (20, half code
// that invites copying, half stories that do not) of TROUPE_SPEC_TOKENS
// greedy tokens (128), alone and TROUPE_SPEC_CONCURRENCY (16) at once, with
// each source (ngram, suffix; draft when there is a draft model) and auto, must
// equal the server's output with speculation off.
TEST_CASE("the real models: greedy output with each speculation source and auto equals output without, alone and batched",
          "[.realspec]") {
  const char* path = std::getenv("TROUPE_REAL_MODEL");
  REQUIRE(path != nullptr);
  const char* draft = std::getenv("TROUPE_REAL_DRAFT");
  auto env_int = [](const char* name, int fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : fallback;
  };
  const int n_prompts = env_int("TROUPE_SPEC_PROMPTS", 20), tokens = env_int("TROUPE_SPEC_TOKENS", 128),
            batched = env_int("TROUPE_SPEC_CONCURRENCY", 16);
  const std::string endpoint = ipc_endpoint("realspec");
  std::vector<std::string> args{troupe_binary(), "serve", "-m", path, "--listen", endpoint, "--threads", "2", "--kv-tokens",
                                "16384", "--data-dir", Server::data_dir(endpoint)};
  if (draft) args.insert(args.end(), {"--draft-model", draft});
  ChildProcess server(args, Server::log("realspec"), "listening on", 120s);
  std::vector<std::string> prompts;
  for (int i = 0; i < n_prompts; ++i)
    prompts.push_back(i % 2 == 0 ? "def f" + std::to_string(i) + "(xs):\n    total = 0\n    for x in xs:\n        total += x * " +
                                       std::to_string(i) + "\n    return total\n\n# The same function, renamed g" +
                                       std::to_string(i) + ":\ndef g" + std::to_string(i) + "(xs):\n"
                                 : "Story " + std::to_string(i) + ": Once upon a time");
  // The reference: the server with speculation off, one request at a time.
  auto run = [&](wire::Speculation mode, int concurrency) {
    std::vector<messages::StreamOutcome> got(prompts.size());
    for (size_t first = 0; first < prompts.size(); first += static_cast<size_t>(concurrency)) {
      std::vector<std::thread> clients;
      for (size_t i = first; i < std::min(prompts.size(), first + static_cast<size_t>(concurrency)); ++i)
        clients.emplace_back([&, i] {
          messages::ClientConnection c(endpoint);
          const uint64_t id = c.next_id();
          got[i] = c.stream(messages::generate_request(id, prompts[i], greedy(tokens), wire::Priority::interactive, false,
                                                       false, false, 1, mode, 8),
                            id, {}, 900s);
        });
      for (auto& t : clients) t.join();
    }
    return got;
  };
  const auto want = run(wire::Speculation::off, 1);
  std::vector<wire::Speculation> modes{wire::Speculation::ngram, wire::Speculation::suffix, wire::Speculation::auto_};
  if (draft) modes.insert(modes.begin() + 1, wire::Speculation::draft);
  for (const auto mode : modes) {
    for (const int concurrency : {1, batched}) {
      const auto got = run(mode, concurrency);
      int drafted = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        INFO("mode " << static_cast<int>(mode) << ", " << concurrency << " at once, prompt " << i << ": " << got[i].message);
        REQUIRE(got[i].done);
        REQUIRE(want[i].done);
        CHECK(got[i].tokens == want[i].tokens);
        drafted += got[i].usage.spec_drafted;
      }
      if (mode != wire::Speculation::auto_) CHECK(drafted > 0);  // a fixed source always drafts; auto may judge it does not pay
    }
  }
}
