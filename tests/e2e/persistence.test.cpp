// Sessions and jobs end to end: real `troupe serve` processes on a real
// store, killed with SIGKILL and restarted on the same data directory.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "messages/client_connection.h"
#include "messages/client_validation.h"
#include "messages/job_frames.h"
#include "messages/session_frames.h"
#include "persistence/store.h"
#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

using Turn = std::pair<std::string, std::string>;  // (user message, assistant answer)

// The reply to one query; empty when none came in time.
messages::Bytes ask(const std::string& endpoint, const std::function<messages::Bytes(uint64_t)>& make,
                    std::chrono::milliseconds timeout = 10s) {
  messages::ClientConnection c(endpoint);
  const uint64_t id = c.next_id();
  c.send(make(id));
  while (auto f = c.receive(timeout)) {
    const auto* r = messages::check_response(*f);
    if (r && r->client_request_id() == id) return *f;
  }
  return {};
}

std::vector<Turn> stored_turns(const std::string& endpoint, const std::string& session) {
  const auto bytes = ask(endpoint, [&](uint64_t id) { return messages::show_session_request(id, session); });
  REQUIRE(!bytes.empty());
  const auto* s = messages::check_response(bytes)->body_as_Session();
  if (!s) return {};
  std::vector<Turn> out;
  const auto* m = s->messages();
  for (uint32_t i = 0; m && i + 1 < m->size(); i += 2) out.emplace_back(m->Get(i)->content()->str(), m->Get(i + 1)->content()->str());
  return out;
}

wire::ErrorCode error_of(const messages::Bytes& bytes) {
  const auto* r = messages::check_response(bytes);
  return r && r->body_as_Error() ? r->body_as_Error()->code() : wire::ErrorCode::none;
}

messages::JobSummaryFields job_status(const std::string& endpoint, const std::string& job) {
  const auto bytes = ask(endpoint, [&](uint64_t id) { return messages::job_status_request(id, job); });
  const auto* r = bytes.empty() ? nullptr : messages::check_response(bytes);
  return r && r->body_as_JobReply() ? messages::read_job_summary(r->body_as_JobReply()->job()) : messages::JobSummaryFields{};
}

std::string item_text(int i) { return "Paper " + std::to_string(i) + " says the fox is quick and the dog is lazy"; }

std::string submit(const std::string& endpoint, int items, int tokens) {
  std::vector<std::string> texts;
  for (int i = 0; i < items; ++i) texts.push_back(item_text(i));
  const auto bytes = ask(endpoint, [&](uint64_t id) { return messages::submit_job_request(id, texts, "Summarize: {item}", greedy(tokens)); });
  REQUIRE(!bytes.empty());
  const auto* r = messages::check_response(bytes);
  REQUIRE(r->body_as_JobAccepted());
  return r->body_as_JobAccepted()->job()->job_id()->str();
}

// Every item's answer must be what a one-off chat turn with its prompt gives.
void check_job_results(const std::string& endpoint, const std::string& job, int items, int tokens) {
  const auto bytes = ask(endpoint, [&](uint64_t id) { return messages::job_results_request(id, job); });
  const auto* reply = messages::check_response(bytes)->body_as_JobReply();
  REQUIRE(reply);
  REQUIRE(reply->results());
  std::set<int> seen;
  for (const auto* r : *reply->results()) {
    INFO("item " << r->index());
    CHECK(seen.insert(r->index()).second);
    CHECK(r->error()->str().empty());
    const auto alone = turn(endpoint, "", std::string("Summarize: ").append(item_text(r->index())), tokens);
    REQUIRE(alone.done);
    CHECK(r->text()->str() == alone.text);
  }
  CHECK(static_cast<int>(seen.size()) == items);
}

}  // namespace

TEST_CASE("a session's turns survive kill -9 and the next turn continues the stored conversation", "[service][persistence]") {
  std::string endpoint;
  std::vector<Turn> acked;
  {
    Server server("session");
    endpoint = server.endpoint;
    for (const char* user : {"Hello, who are you?", "Tell me about the fox."}) {
      const auto out = turn(endpoint, "s1", user, 12);
      REQUIRE(out.done);
      acked.emplace_back(user, out.text);
    }
    server.process.stop(SIGKILL);
  }
  Server again("session", {}, endpoint);
  CHECK(stored_turns(endpoint, "s1") == acked);
  // The resumed turn equals a one-off conversation carrying the whole history.
  const auto resumed = turn(endpoint, "s1", "And the dog?", 12);
  REQUIRE(resumed.done);
  messages::ClientConnection c(endpoint);
  std::vector<std::pair<std::string, std::string>> all;
  for (const auto& [u, a] : acked) all.insert(all.end(), {{"user", u}, {"assistant", a}});
  all.emplace_back("user", "And the dog?");
  const uint64_t id = c.next_id();
  const auto alone = c.stream(messages::chat_request(id, "", all, greedy(12)), id, {}, 60s);
  REQUIRE(alone.done);
  CHECK(resumed.tokens == alone.tokens);
  CHECK(resumed.usage.prompt_tokens == alone.usage.prompt_tokens);
  CHECK(stored_turns(endpoint, "s1").size() == 3);
}

TEST_CASE("a damaged session record is reported when the server starts, not first when the session is used",
          "[service][persistence]") {
  std::string endpoint;
  {
    Server server("damaged-session");
    endpoint = server.endpoint;
    for (const char* user : {"one", "two"}) REQUIRE(turn(endpoint, "hurt", user, 4).done);
    REQUIRE(turn(endpoint, "whole", "one", 4).done);
    server.process.stop(SIGKILL);
  }
  {
    // The store loses the session's second turn record (as a damaged block would).
    persistence::Store store(Server::data_dir(endpoint));
    persistence::Batch b;
    b.erase(persistence::Family::sessions, std::string(1, 't').append("hurt").append(1, '\0').append(persistence::be32(1)));
    store.write(b);
  }
  Server again("damaged-session", {}, endpoint);
  std::ifstream in(Server::log("damaged-session"));
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(log, Catch::Contains("session 'hurt' is damaged and cannot be continued") &&
                      Catch::Contains("run `troupe store check`"));
  CHECK_THAT(log, !Catch::Contains("session 'whole'"));
  CHECK(turn(endpoint, "whole", "two", 4).done);
}

TEST_CASE("a session runs one turn at a time, and unknown and deleted sessions answer clear errors", "[service][persistence]") {
  Server server("busy");
  messages::ClientConnection c(server.endpoint);
  const std::vector<std::pair<std::string, std::string>> msg{{"user", "count to a hundred"}};
  messages::SamplingFields long_answer = greedy(200);
  const uint64_t first = c.next_id();
  c.send(messages::chat_request(first, "b", msg, long_answer));
  const uint64_t second = c.next_id();
  c.send(messages::chat_request(second, "b", msg, greedy(4)));
  bool busy = false, done = false;
  while (!(busy && done)) {
    auto f = c.receive(30s);
    REQUIRE(f);
    const auto* r = messages::check_response(*f);
    if (r->client_request_id() == second && r->body_as_Error()) {
      CHECK(r->body_as_Error()->code() == wire::ErrorCode::session_busy);
      busy = true;
    }
    if (r->client_request_id() == first && r->body_as_Done()) done = true;
  }
  CHECK(error_of(ask(server.endpoint, [](uint64_t id) { return messages::show_session_request(id, "nope"); })) ==
        wire::ErrorCode::unknown_session);
  const auto del = ask(server.endpoint, [](uint64_t id) { return messages::delete_session_request(id, "b"); });
  CHECK(messages::check_response(del)->body_as_Ack());
  CHECK(error_of(ask(server.endpoint, [](uint64_t id) { return messages::show_session_request(id, "b"); })) ==
        wire::ErrorCode::unknown_session);
  CHECK(error_of(ask(server.endpoint, [](uint64_t id) { return messages::delete_session_request(id, "b"); })) ==
        wire::ErrorCode::unknown_session);
  CHECK(error_of(ask(server.endpoint, [](uint64_t id) { return messages::job_status_request(id, "job-none"); })) ==
        wire::ErrorCode::unknown_job);
}

TEST_CASE("a batch job publishes its progress and its results equal each item run alone", "[service][persistence]") {
  Server server("job");
  zmq::context_t ctx;
  zmq::socket_t sub = messages::connect_subscriber(ctx, server.endpoint + ".events", "");
  std::this_thread::sleep_for(200ms);  // let the subscription reach the server
  const std::string job = submit(server.endpoint, 6, 8);
  int items = 0;
  bool finished = false;
  while (!finished) {
    std::vector<zmq::message_t> frames;
    sub.set(zmq::sockopt::rcvtimeo, 30000);
    zmq::message_t topic, body;
    REQUIRE(sub.recv(topic));
    REQUIRE(sub.recv(body));
    CHECK(topic.to_string() == job);
    const auto* e = messages::check_job_event(body.to_string_view());
    REQUIRE(e);
    if (e->kind() == wire::JobEventKind::item_finished) ++items;
    finished = e->kind() == wire::JobEventKind::job_finished;
  }
  CHECK(items == 6);
  check_job_results(server.endpoint, job, 6, 8);
  const auto s = job_status(server.endpoint, job);
  CHECK(s.state == wire::JobState::finished);
  CHECK(s.finished_items == 6);
}

namespace {

// kill -9 at `kills` random points while a client runs `turns` chat turns
// over `sessions` sessions and a job of `items` items runs. After every
// restart the server serves; at the end every acknowledged turn is stored
// byte for byte, in order, and every item finished exactly once.
void crash_run(uint32_t seed, int kills, int turns, int sessions, int items) {
  std::mt19937 rng(seed);
  const std::string tag = std::string("crash").append(std::to_string(seed));
  auto server = std::make_unique<Server>(tag);
  const std::string endpoint = server->endpoint;
  const std::string job = submit(endpoint, items, 6);
  std::mutex mu;
  std::map<std::string, std::vector<Turn>> acked;  // per session, in order
  std::atomic<int> done_turns{0}, attempts{0};
  std::atomic<bool> stop{false};
  std::thread client([&] {
    for (int t = 0; t < turns && !stop; ++t) {
      const std::string session = std::string("c").append(std::to_string(t % sessions));
      for (int attempt = 0; !stop; ++attempt) {
        ++attempts;
        // Unique per attempt: an attempt stored but never acknowledged is told apart.
        const std::string user = std::string("turn ").append(std::to_string(t)).append(" attempt ").append(std::to_string(attempt));
        const auto out = turn(endpoint, session, user, 4, 1500ms);
        if (out.done) {
          std::lock_guard<std::mutex> lock(mu);
          acked[session].emplace_back(user, out.text);
          ++done_turns;
          break;
        }
        std::this_thread::sleep_for(20ms);
      }
    }
  });
  int32_t finished_before = 0;
  for (int k = 0; k < kills; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 400)(rng)));
    server->process.stop(SIGKILL);
    server.reset();
    server = std::make_unique<Server>(tag, std::vector<std::string>{}, endpoint);
    const auto s = job_status(endpoint, job);
    INFO("after kill " << k);
    CHECK(s.job_id == job);                      // the job is there
    CHECK(s.finished_items >= finished_before);  // and no finished item is lost
    finished_before = s.finished_items;
  }
  client.join();
  REQUIRE(done_turns == turns);
  for (const auto& [session, mine] : acked) {
    INFO("session " << session);
    const auto stored = stored_turns(endpoint, session);
    // Acknowledged turns in order; between them only attempts that were
    // stored but not acknowledged (each at most once).
    size_t next = 0;
    std::set<std::string> users;
    for (const auto& t : stored) {
      CHECK(users.insert(t.first).second);
      if (next < mine.size() && t == mine[next]) ++next;
    }
    CHECK(next == mine.size());
  }
  for (int i = 0; i < 600 && job_status(endpoint, job).state == wire::JobState::running; ++i) std::this_thread::sleep_for(100ms);
  CHECK(job_status(endpoint, job).finished_items == items);
  check_job_results(endpoint, job, items, 6);
  INFO("attempts " << attempts.load());
}

}  // namespace

TEST_CASE("crash: kill -9 at 20 random points during 200 turns over 10 sessions and a 30-item job", "[service][persistence]") {
  crash_run(1, 20, 200, 10, 30);
}

TEST_CASE("crash, more seeds (slow suite)", "[.slow]") {
  for (uint32_t seed : {2u, 3u, 4u, 5u}) crash_run(seed, 20, 200, 10, 30);
}

TEST_CASE("a full disk: turns are refused as storage_failed, nothing acknowledged is lost, the server serves on",
          "[service][persistence]") {
  const std::string endpoint = ipc_endpoint("full");
  const std::string data = Server::data_dir(endpoint);
  std::map<std::string, Turn> acked;  // one turn per session: no session outgrows the context
  {
    // RLIMIT_FSIZE stands in for a full disk: a write making a file (the
    // WAL) longer than 2 MiB fails with EFBIG. (At 4 MiB the WAL was flushed
    // before it reached the limit and only a compaction's output failed,
    // hundreds of turns in: past the timeout under ASan on a slow CPU.)
    auto args = Server::args(endpoint, {});
    std::string cmd = "ulimit -f 2048; trap '' XFSZ; exec";
    for (const auto& a : args) cmd.append(" '").append(a).append("'");  // append: GCC 12 warns falsely on "'" + a
    ChildProcess server({"/bin/bash", "-c", cmd}, Server::log("full"), "listening on");
    int refused = 0;
    for (int t = 0; t < 2000 && refused < 3; ++t) {
      const std::string session = std::string("s").append(std::to_string(t));
      const std::string user = std::string("turn ").append(std::to_string(t)).append(" ").append(800, 'x');
      const auto out = turn(endpoint, session, user, 4);
      if (out.done) {
        acked[session] = {user, out.text};
        continue;
      }
      INFO(out.message);
      CHECK(out.error == wire::ErrorCode::storage_failed);
      CHECK_THAT(out.message, Catch::Contains("not saved"));
      CHECK(stored_turns(endpoint, session).empty());
      ++refused;
    }
    REQUIRE(refused == 3);
    REQUIRE(acked.size() > 5);
    // Requests that need no store are served as before, and stored sessions read.
    messages::ClientConnection c(endpoint);
    const uint64_t id = c.next_id();
    CHECK(c.stream(messages::generate_request(id, "still serving?", greedy(4)), id, {}, 30s).done);
    CHECK(stored_turns(endpoint, "s0") == std::vector<Turn>{acked["s0"]});
    server.stop(SIGKILL);
  }
  Server again("full", {}, endpoint);
  for (const auto& [session, t] : acked) {
    INFO(session);
    CHECK(stored_turns(endpoint, session) == std::vector<Turn>{t});
  }
  CHECK(turn(endpoint, "s0", "after the disk has room again", 4).done);
}

TEST_CASE("a session stored under another model file resumes from its messages, never its old tokens",
          "[service][persistence]") {
  const auto other = std::filesystem::temp_directory_path() / ("troupe-service-other-" + std::to_string(getpid()) + ".gguf");
  SyntheticModelSpec spec;
  spec.n_embd = 128;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 256;
  spec.seed = 4;  // same shapes and vocabulary, other weights
  write_synthetic_model(spec, other.string());
  std::string endpoint;
  Turn first;
  {
    Server server("model");
    endpoint = server.endpoint;
    const auto out = turn(endpoint, "m", "Hello there", 8);
    REQUIRE(out.done);
    first = {"Hello there", out.text};
  }
  auto args = Server::args(endpoint, {});
  args[3] = other.string();  // serve -m OTHER
  ChildProcess again(args, Server::log("model"), "listening on");
  CHECK(stored_turns(endpoint, "m") == std::vector<Turn>{first});
  const auto resumed = turn(endpoint, "m", "Go on", 8);
  REQUIRE(resumed.done);
  messages::ClientConnection c(endpoint);
  const std::vector<std::pair<std::string, std::string>> all{{"user", first.first}, {"assistant", first.second}, {"user", "Go on"}};
  const uint64_t id = c.next_id();
  const auto alone = c.stream(messages::chat_request(id, "", all, greedy(8)), id, {}, 60s);
  REQUIRE(alone.done);
  CHECK(resumed.tokens == alone.tokens);
  CHECK(resumed.usage.cached_prompt_tokens == 0);  // the old model's pages are never found, let alone used
  std::filesystem::remove(other);
}

TEST_CASE("restore equals recompute: after kill -9, a session's next turn from spilled pages matches a fresh prefill",
          "[service][persistence]") {
  // A long first turn: many full pages to spill.
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "the quick brown fox " + std::to_string(i) + " jumps; ";
  std::string endpoint;
  Turn first;
  {
    Server server("restore");
    endpoint = server.endpoint;
    const auto out = turn(endpoint, "r", long_text, 8);
    REQUIRE(out.done);
    first = {long_text, out.text};
    REQUIRE(pages_spilled(endpoint, 1));  // the spill rides on the step after the turn
    server.process.stop(SIGKILL);
  }
  Server again("restore", {}, endpoint);
  const auto resumed = chat_logprobs(endpoint, "r", {{"user", "Now shorter, please."}}, 12);
  REQUIRE(resumed.done);
  INFO("restored " << resumed.usage.cached_prompt_tokens << " of " << resumed.usage.prompt_tokens << " prompt tokens");
  CHECK(resumed.usage.cached_prompt_tokens >= resumed.usage.prompt_tokens / 2);  // from the store, not recomputed

  // The same conversation on a server that stores no KV: a full prefill.
  Server fresh("recompute", {"--no-kv-spill"});
  const std::vector<std::pair<std::string, std::string>> all{{"user", first.first}, {"assistant", first.second},
                                                             {"user", "Now shorter, please."}};
  const auto recomputed = chat_logprobs(fresh.endpoint, "", all, 12);
  REQUIRE(recomputed.done);
  CHECK(recomputed.usage.cached_prompt_tokens == 0);
  CHECK(resumed.tokens == recomputed.tokens);
  REQUIRE(resumed.logprobs.size() == recomputed.logprobs.size());
  for (size_t i = 0; i < resumed.logprobs.size(); ++i) {
    INFO("token " << i);
    CHECK(std::fabs(resumed.logprobs[i] - recomputed.logprobs[i]) <= 0.05f);  // docs/TESTING.md: INT8 spill
  }
}

TEST_CASE("a quantized KV cache's pages are cached, spilled and restored as they are: the same bits as a fresh prefill",
          "[service][persistence]") {
  const std::string type = GENERATE(std::string("q8_0"), std::string("k8v4"));
  INFO("--kv-type " << type);
  std::string long_text;
  for (int i = 0; i < 30; ++i) long_text += "a slow red train " + std::to_string(i) + " leaves; ";
  std::string endpoint;
  std::vector<std::pair<std::string, std::string>> all;
  {
    Server server("rawkv-" + type, {"--kv-type", type});
    endpoint = server.endpoint;
    const auto one = turn(endpoint, "q", long_text, 8);
    REQUIRE(one.done);
    const auto two = turn(endpoint, "q", "And then?", 8);
    REQUIRE(two.done);
    CHECK(two.usage.cached_prompt_tokens >= two.usage.prompt_tokens / 2);  // the prefix cache, in the type's pages
    all = {{"user", long_text}, {"assistant", one.text}, {"user", "And then?"}, {"assistant", two.text}};
    REQUIRE(pages_spilled(endpoint, 1));  // the spill rides on the step after the turn
    server.process.stop(SIGKILL);
  }
  Server again("rawkv-" + type, {"--kv-type", type}, endpoint);
  const std::vector<std::pair<std::string, std::string>> next{{"user", "Shorter."}};
  const auto resumed = chat_logprobs(endpoint, "q", next, 12);
  REQUIRE(resumed.done);
  INFO("restored " << resumed.usage.cached_prompt_tokens << " of " << resumed.usage.prompt_tokens << " prompt tokens");
  CHECK(resumed.usage.cached_prompt_tokens >= resumed.usage.prompt_tokens / 2);  // restored, not recomputed
  Server fresh("rawkv-fresh-" + type, {"--kv-type", type, "--no-kv-spill"});
  all.push_back(next.front());
  const auto recomputed = chat_logprobs(fresh.endpoint, "", all, 12);
  REQUIRE(recomputed.done);
  CHECK(recomputed.usage.cached_prompt_tokens == 0);
  CHECK(resumed.tokens == recomputed.tokens);
  CHECK(resumed.logprobs == recomputed.logprobs);  // pages stored as the cache holds them: lossless
}

TEST_CASE("split topology: a session's pages spill from and restore into the worker process", "[service][persistence]") {
  const std::string worker_endpoint = ipc_endpoint("kvworker");
  ChildProcess worker({troupe_binary(), "worker", "-m", model_path(), "--listen", worker_endpoint, "--threads", "1",
                       "--kv-tokens", "16384"},
                      Server::log("kvworker"), "listening on");
  std::string long_text;
  for (int i = 0; i < 30; ++i) long_text += "a lazy dog " + std::to_string(i) + " sleeps; ";
  std::string endpoint;
  {
    Server front("kvfront", {"--worker", worker_endpoint});
    endpoint = front.endpoint;
    REQUIRE(turn(endpoint, "w", long_text, 6).done);
    REQUIRE(pages_spilled(endpoint, 1));
    front.process.stop(SIGKILL);  // the front dies; the worker (and its memory) stays
  }
  // A restarted front allocates pages afresh: the worker's old contents are
  // not trusted, the pages come back from the store.
  Server again("kvfront", {"--worker", worker_endpoint}, endpoint);
  const auto out = turn(endpoint, "w", "and then?", 6);
  REQUIRE(out.done);
  CHECK(out.usage.cached_prompt_tokens >= out.usage.prompt_tokens / 2);
  messages::ClientConnection c(endpoint);
  messages::Bytes keep;
  const uint64_t id = c.next_id();
  c.send(messages::stats_request(id));
  auto f = c.receive(10s);
  REQUIRE(f);
  const auto* s = messages::check_response(*f)->body_as_StatsReply();
  REQUIRE(s);
  CHECK(s->pages_restored() > 0);
}

TEST_CASE("a session's hand-off: its next turn on another front end takes it over, history and pages, and it comes back",
          "[service][persistence]") {
  const std::string a_ep = ipc_endpoint("handoff-a"), b_ep = ipc_endpoint("handoff-b");
  Server a("handoff-a", {"--peer", b_ep}, a_ep);
  Server b("handoff-b", {"--peer", a_ep}, b_ep);
  Server single("handoff-ref");  // the same conversation on one front end: the reference
  const std::vector<std::string> users{"hello there, tell me about foxes", "and about dogs?", "which is faster?",
                                       "thanks"};
  std::vector<messages::StreamOutcome> ref;
  for (const auto& u : users) ref.push_back(turn(single.endpoint, "h", u, 8));
  for (const auto& r : ref) REQUIRE(r.done);

  REQUIRE(turn(a.endpoint, "h", users[0], 8).done);
  REQUIRE(turn(a.endpoint, "h", users[1], 8).done);
  // The client comes back through front end B: B's store has no session 'h', A hands it over.
  const auto third = turn(b.endpoint, "h", users[2], 8);
  INFO(third.message);
  REQUIRE(third.done);
  CHECK(third.tokens == ref[2].tokens);                         // the whole history was there
  CHECK(third.usage.prompt_tokens == ref[2].usage.prompt_tokens);
  CHECK(third.usage.cached_prompt_tokens >= 16);                // and its KV pages came with it
  CHECK_THAT(b.process.output(), Catch::Contains("session 'h' taken over from another front end"));
  CHECK_THAT(a.process.output(), Catch::Contains("session 'h' handed to the front end at " + b_ep));
  CHECK(error_of(ask(a.endpoint, [](uint64_t id) { return messages::show_session_request(id, "h"); })) ==
        wire::ErrorCode::unknown_session);
  CHECK(stored_turns(b.endpoint, "h").size() == 3);
  // And back to A: the fourth turn there takes it from B.
  const auto fourth = turn(a.endpoint, "h", users[3], 8);
  INFO(fourth.message);
  REQUIRE(fourth.done);
  CHECK(fourth.tokens == ref[3].tokens);
  CHECK(stored_turns(a.endpoint, "h").size() == 4);
  CHECK(error_of(ask(b.endpoint, [](uint64_t id) { return messages::show_session_request(id, "h"); })) ==
        wire::ErrorCode::unknown_session);
  // A session neither holds starts new where it is asked; a turn running on
  // one front end makes the other refuse the session (busy), not fork it.
  CHECK(turn(b.endpoint, "fresh", "hi", 4).done);
  messages::ClientConnection long_turn(a.endpoint);
  const uint64_t id = long_turn.next_id();
  const std::vector<std::pair<std::string, std::string>> msgs{{"user", "count slowly to a thousand"}};
  std::atomic<bool> started{false};
  messages::StreamOutcome long_out;
  std::thread running([&] {
    long_out = long_turn.stream(messages::chat_request(id, "h", msgs, greedy(400)), id,
                                [&](std::string_view) { started = true; }, 120s);
  });
  while (!started) std::this_thread::sleep_for(10ms);
  const auto refused = turn(b.endpoint, "h", "me too", 4);
  running.join();
  REQUIRE(long_out.done);
  CHECK(long_out.usage.completion_tokens >= 100);  // still running when B asked
  CHECK(refused.error == wire::ErrorCode::session_busy);
  CHECK_THAT(refused.message, Catch::Contains("at the front end " + a_ep));
  CHECK(stored_turns(a.endpoint, "h").size() == 5);
}

TEST_CASE("a peer front end that does not answer: a new session starts here, and the next does not wait for it again",
          "[service][persistence]") {
  Server a("handoff-deadpeer", {"--peer", ipc_endpoint("handoff-nobody")});
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(turn(a.endpoint, "first", "hello", 4).done);  // waits for the peer's ping (1 s) once
  const auto t1 = std::chrono::steady_clock::now();
  REQUIRE(turn(a.endpoint, "second", "hello", 4).done);
  const auto t2 = std::chrono::steady_clock::now();
  CHECK(t1 - t0 >= 900ms);
  CHECK(t2 - t1 < t1 - t0);
  CHECK_THAT(a.process.output(), Catch::Contains("did not answer whether it holds session 'first'"));
  CHECK_THAT(a.process.output(), Catch::Contains("is not asked whether it holds session 'second'"));
  CHECK(stored_turns(a.endpoint, "first").size() == 1);
}
