// Speculative decoding with a draft model, end to end: `troupe serve` with
// the draft model in process and with it in a `troupe worker --role draft`
// process. Greedy output must equal the model's own, alone and batched; a
// sampled stream must complete; a request for a draft model the server
// lacks gets an Error; a draft worker that dies costs drafts, not requests;
// a draft worker answers bad plans with the reason and goes on.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "messages/client_connection.h"
#include "messages/client_validation.h"
#include "messages/draft_frames.h"
#include "messages/step_frames.h"
#include "messages/zmq_sockets.h"
#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;

namespace {

std::string draft_prompt(int i) {
  return "Request " + std::to_string(i % 5) + " is about the fox and the dog, the fox and the " + std::to_string(i);
}

// `streams` concurrent greedy requests with `mode`; checks each against the
// model alone and returns the drafted and accepted totals.
std::pair<int, int> check_streams(const std::string& endpoint, Reference& ref, wire::Speculation mode, int streams,
                                  int tokens) {
  std::vector<messages::StreamOutcome> got(static_cast<size_t>(streams));
  std::vector<std::thread> clients;
  for (int i = 0; i < streams; ++i)
    clients.emplace_back([&, i] {
      messages::ClientConnection c(endpoint);
      const uint64_t id = c.next_id();
      got[static_cast<size_t>(i)] = c.stream(messages::generate_request(id, draft_prompt(i), greedy(tokens),
                                                                        wire::Priority::interactive, false, false, false, 1,
                                                                        mode, 4),
                                             id, {}, 120s);
    });
  for (auto& t : clients) t.join();
  int drafted = 0, accepted = 0;
  for (int i = 0; i < streams; ++i) {
    const auto& g = got[static_cast<size_t>(i)];
    INFO("stream " << i << ": " << g.message);
    REQUIRE(g.done);
    CHECK(g.tokens == ref.greedy(draft_prompt(i), tokens));
    drafted += g.usage.spec_drafted;
    accepted += g.usage.spec_accepted;
  }
  return {drafted, accepted};
}

void check_draft_serving(const std::string& endpoint) {
  Reference ref;
  for (const auto mode : {wire::Speculation::draft, wire::Speculation::auto_})
    for (const int streams : {1, 16}) {
      INFO("mode " << static_cast<int>(mode) << ", " << streams << " streams");
      const auto [drafted, accepted] = check_streams(endpoint, ref, mode, streams, 32);
      INFO("drafted " << drafted << ", accepted " << accepted);
      if (mode == wire::Speculation::draft) {  // auto may judge that drafting does not pay here
        CHECK(drafted > 0);
        CHECK(accepted > drafted / 4);  // an 8-bit copy of the model drafts well
      }
    }
  // A sampled request drafts with its q and completes.
  messages::ClientConnection c(endpoint);
  messages::SamplingFields s;
  s.temperature = 0.8f;
  s.max_tokens = 32;
  s.seed = 11;
  const uint64_t id = c.next_id();
  const auto out = c.stream(messages::generate_request(id, draft_prompt(3), s, wire::Priority::interactive, false, false,
                                                       false, 1, wire::Speculation::draft, 4),
                            id, {}, 60s);
  INFO(out.message);
  REQUIRE(out.done);
  CHECK(out.usage.completion_tokens == static_cast<int32_t>(out.tokens.size()));
  CHECK(out.usage.spec_drafted > 0);
  CHECK(out.usage.spec_source == "draft");
  CHECK(pages_return(c, 2s));
}

}  // namespace

TEST_CASE("a draft model in the server process: greedy streams are token-identical, alone and 16 at once", "[service]") {
  Server server("draft", {"--draft-model", draft_model_path()});
  CHECK_THAT(server.process.output(), Catch::Contains("draft model"));
  check_draft_serving(server.endpoint);

  // A request may name the draft model it expects: by its file name or its
  // own name it is served; by another, it gets an Error naming the right one.
  messages::ClientConnection c(server.endpoint);
  const std::string stem = std::filesystem::path(draft_model_path()).stem().string();
  for (const std::string& name : {stem, std::string("troupe synthetic qwen2"), std::string("qwen2.5-coder-7b")}) {
    INFO(name);
    const uint64_t id = c.next_id();
    const auto out = c.stream(messages::generate_request(id, "hello", greedy(4), wire::Priority::interactive, false, false,
                                                         false, 1, wire::Speculation::draft, 4, name),
                              id, {}, 10s);
    if (name == "qwen2.5-coder-7b") {
      CHECK(out.error == wire::ErrorCode::invalid_field);
      CHECK_THAT(out.message, Catch::Contains("drafts with " + stem));
    } else {
      CHECK(out.done);
    }
  }
}

TEST_CASE("a lenient acceptance ratio keeps more of a poor drafter's tokens, 1 stays exactly greedy, and bad ratios are refused",
          "[service]") {
  // A drafter of another shape and weights (the same vocabulary): it often disagrees.
  const auto other = std::filesystem::temp_directory_path() / ("troupe-service-other-" + std::to_string(getpid()) + ".gguf");
  SyntheticModelSpec spec;
  spec.seed = 24;
  spec.tied_output = false;  // its own output matrix: its argmax is not the target's
  write_synthetic_model(spec, other.string());
  Server server("lenient", {"--draft-model", other.string()});
  Reference ref;
  auto run = [&](float ratio) {
    int drafted = 0, accepted = 0;
    for (int i = 0; i < 4; ++i) {
      messages::ClientConnection c(server.endpoint);
      auto s = greedy(24);
      s.accept_ratio = ratio;
      const uint64_t id = c.next_id();
      const auto out = c.stream(messages::generate_request(id, draft_prompt(i), s, wire::Priority::interactive, false, false,
                                                           false, 1, wire::Speculation::draft, 4),
                                id, {}, 60s);
      INFO("ratio " << ratio << ", prompt " << i << ": " << out.message);
      REQUIRE(out.done);
      if (ratio == 1.0f) CHECK(out.tokens == ref.greedy(draft_prompt(i), 24));  // exact despite the drafter
      drafted += out.usage.spec_drafted;
      accepted += out.usage.spec_accepted;
    }
    return std::make_pair(drafted, accepted);
  };
  // Random weights put the logits far apart (no draft within e^-14 of the top
  // one here): only a tiny ratio lets the drafter's tokens through.
  const auto [d1, a1] = run(1.0f);
  const auto [dl, al] = run(1e-30f);
  INFO("exact: " << a1 << " of " << d1 << " drafts kept; ratio 1e-30: " << al << " of " << dl);
  REQUIRE(d1 > 0);
  REQUIRE(dl > 0);
  CHECK(a1 < d1);  // the drafter is poor: exact verification rejects some
  CHECK(static_cast<double>(al) / dl > static_cast<double>(a1) / d1);
  // Out of (0, 1], or below 1 with sampling: an Error naming the field.
  messages::ClientConnection c(server.endpoint);
  auto bad = greedy(4);
  for (const auto& [ratio, temperature] : {std::pair{0.0f, 0.0f}, std::pair{1.5f, 0.0f}, std::pair{0.5f, 0.8f}}) {
    bad.accept_ratio = ratio;
    bad.temperature = temperature;
    const uint64_t id = c.next_id();
    const auto out = c.stream(messages::generate_request(id, "hello", bad), id, {}, 10s);
    CHECK(out.error == wire::ErrorCode::invalid_field);
    CHECK_THAT(out.message, Catch::Contains("sampling.accept_ratio"));
  }
  std::filesystem::remove(other);
}

TEST_CASE("a draft model in its own worker process: the same streams, and a dead worker costs drafts, not requests",
          "[service]") {
  const std::string worker_endpoint = ipc_endpoint("draftworker");
  auto worker = std::make_unique<ChildProcess>(
      std::vector<std::string>{troupe_binary(), "worker", "--role", "draft", "-m", draft_model_path(), "--listen",
                               worker_endpoint, "--threads", "1", "--kv-tokens", "16384"},
      Server::log("draftworker"), "listening on");
  Server server("draftsplit", {"--draft-worker", worker_endpoint, "--draft-timeout", "2"});
  CHECK_THAT(server.process.output(), Catch::Contains("in worker " + worker_endpoint));
  check_draft_serving(server.endpoint);

  // The worker dies: drafting pauses, every stream still completes exactly.
  worker.reset();
  Reference ref;
  const auto [drafted, accepted] = check_streams(server.endpoint, ref, wire::Speculation::draft, 4, 24);
  (void)accepted;
  CHECK(drafted == 0);
  CHECK_THAT(server.process.output(), Catch::Contains("draft model:"));
}

TEST_CASE("a request for a draft model the server does not have gets an Error naming the field", "[service]") {
  Server server("nodraft");
  messages::ClientConnection c(server.endpoint);
  const uint64_t id = c.next_id();
  const auto out = c.stream(messages::generate_request(id, "hello", greedy(4), wire::Priority::interactive, false, false,
                                                       false, 1, wire::Speculation::draft, 4),
                            id, {}, 10s);
  CHECK_FALSE(out.done);
  CHECK(out.error == wire::ErrorCode::invalid_field);
  CHECK_THAT(out.message, Catch::Contains("no draft model"));
  // auto without a draft model drafts with n-grams only, and is served.
  const uint64_t id2 = c.next_id();
  const auto ok = c.stream(messages::generate_request(id2, "hello", greedy(4), wire::Priority::interactive, false, false,
                                                      false, 1, wire::Speculation::auto_, 4),
                           id2, {}, 10s);
  CHECK(ok.done);
}

TEST_CASE("serve refuses a draft worker that is a verifier, and a verifier worker that is a draft worker", "[service]") {
  const std::string verifier_endpoint = ipc_endpoint("notdraft");
  ChildProcess verifier({troupe_binary(), "worker", "-m", model_path(), "--listen", verifier_endpoint, "--threads", "1",
                         "--kv-tokens", "4096"},
                        Server::log("notdraft"), "listening on");
  CHECK_THROWS_WITH(Server("wrongdraft", {"--draft-worker", verifier_endpoint}), Catch::Contains("is not a draft worker"));
  const std::string draft_endpoint = ipc_endpoint("notverifier");
  ChildProcess drafter({troupe_binary(), "worker", "--role", "draft", "-m", draft_model_path(), "--listen", draft_endpoint,
                        "--threads", "1", "--kv-tokens", "4096"},
                       Server::log("notverifier"), "listening on");
  CHECK_THROWS_WITH(Server("wrongverifier", {"--worker", draft_endpoint}), Catch::Contains("is a draft worker"));
  // A draft model with other tokens cannot draft for this one.
  SyntheticModelSpec other = service_model_spec();
  other.n_vocab = 1000;
  const std::string other_path = Server::log("othervocab") + ".gguf";
  write_synthetic_model(other, other_path);
  CHECK_THROWS_WITH(Server("othervocab", {"--draft-model", other_path}), Catch::Contains("cannot draft for this model"));
}

TEST_CASE("a draft worker answers a malformed plan with an error, an unknown sequence with resync, and goes on",
          "[service]") {
  const std::string endpoint = ipc_endpoint("draftplans");
  ChildProcess worker({troupe_binary(), "worker", "--role", "draft", "-m", draft_model_path(), "--listen", endpoint,
                       "--threads", "1", "--kv-tokens", "4096"},
                      Server::log("draftplans"), "listening on");
  zmq::context_t ctx(1);
  zmq::socket_t dealer = messages::connect_dealer(ctx, endpoint);
  auto call = [&](const std::string& bytes) {
    dealer.send(zmq::buffer(bytes), zmq::send_flags::none);
    zmq::message_t reply;
    REQUIRE(dealer.recv(reply, zmq::recv_flags::none));
    return reply.to_string();
  };
  // Garbage, and a step plan sent to the wrong worker: errors, not crashes.
  for (const std::string& bad : {std::string("\x01garbage"), std::string(messages::step_plan(3, {}, {}))}) {
    const std::string r = call(bad);
    const auto* res = messages::check_draft_result(r);
    REQUIRE(res);
    REQUIRE(res->error());
    CHECK_THAT(res->error()->str(), Catch::Contains("malformed draft plan"));
  }
  // A sequence continuing a history the worker never saw: resync, no drafts.
  const std::vector<int32_t> tokens{1, 2, 3};
  const messages::DraftSequenceSpec unknown{7, 40, tokens, 3, nullptr};
  std::string r = call(messages::draft_plan(1, std::span(&unknown, 1), {}));
  const auto* res = messages::check_draft_result(r);
  REQUIRE(res);
  CHECK_FALSE(res->error());
  REQUIRE(res->proposals()->size() == 1);
  CHECK(res->proposals()->Get(0)->resync());
  // A bad k fails that plan with the reason.
  messages::SamplingFields greedy_sampling;
  greedy_sampling.temperature = 0;
  const messages::DraftSequenceSpec too_many{8, 0, tokens, 9, &greedy_sampling};
  r = call(messages::draft_plan(2, std::span(&too_many, 1), {}));
  res = messages::check_draft_result(r);
  REQUIRE(res);
  REQUIRE(res->error());
  CHECK_THAT(res->error()->str(), Catch::Contains("asks for 9 tokens"));
  // And the worker still drafts: the whole history, then only what it gained.
  const messages::DraftSequenceSpec fresh{9, 0, tokens, 3, &greedy_sampling};
  r = call(messages::draft_plan(3, std::span(&fresh, 1), {}));
  res = messages::check_draft_result(r);
  REQUIRE(res);
  CHECK_FALSE(res->error());
  REQUIRE(res->proposals()->Get(0)->tokens());
  CHECK(res->proposals()->Get(0)->tokens()->size() == 3);
  CHECK(res->round_ms() > 0);
  const std::vector<int32_t> more{res->proposals()->Get(0)->tokens()->Get(0), 5};
  const messages::DraftSequenceSpec next{9, 3, more, 2, nullptr};
  const uint64_t forget[] = {8};
  r = call(messages::draft_plan(4, std::span(&next, 1), forget));
  res = messages::check_draft_result(r);
  REQUIRE(res);
  CHECK_FALSE(res->error());
  CHECK(res->proposals()->Get(0)->tokens()->size() == 2);
  CHECK_FALSE(res->proposals()->Get(0)->resync());
}
