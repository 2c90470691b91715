// Cascade routing end to end: `troupe serve --tiers SMALL,LARGE` on two
// synthetic models with one vocabulary. The small one is unsure of every
// token (its logits are scaled down), so `escalate` hands each request to
// the large one after its first window. Checked against the engine alone:
// the tokens before the switch are the small model's, those after are the
// large model's greedy continuation of exactly that prefix; `verify` with
// accept_ratio 1 is the large model's greedy output. On the real pair
// ([.realcascade], label oracle) verify at 1 equals the large model too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/gguf_file.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/regex_to_gbnf.h"
#include "engine/grammar/token_trie.h"
#include "messages/client_connection.h"
#include "messages/job_frames.h"
#include "messages/session_frames.h"
#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;

namespace {

// The small tier: the service model's vocabulary, other weights, flat logits.
std::string unsure_model_path() {
  static const std::string path = [] {
    const auto p = std::filesystem::temp_directory_path() / ("troupe-cascade-small-" + std::to_string(getpid()) + ".gguf");
    SyntheticModelSpec spec = service_model_spec();
    spec.seed = 24;
    spec.output_scale = 0.05f;
    write_synthetic_model(spec, p.string());
    return p.string();
  }();
  return path;
}

std::string stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

messages::SamplingFields routed(const std::string& tier, int tokens, float threshold = 0) {
  messages::SamplingFields s = greedy(tokens);
  s.tier = tier;
  s.escalate_threshold = threshold;
  return s;
}

messages::StreamOutcome ask(const std::string& endpoint, const std::string& prompt, const messages::SamplingFields& s,
                            wire::Speculation speculation = wire::Speculation::server_default) {
  messages::ClientConnection c(endpoint);
  const uint64_t id = c.next_id();
  return c.stream(messages::generate_request(id, prompt, s, wire::Priority::interactive, false, false, false, 1, speculation),
                  id, {}, 120s);
}

// The engine alone on a model: greedy continuation of token ids, under
// `regex` when one is given (its matcher starts at the first new token).
std::vector<int32_t> greedy_ids(const std::string& model, std::vector<int32_t> ids, int tokens, const std::string& regex = "") {
  BackendOptions o;
  o.kv_pages = 512;
  auto backend = open_backend(model, o);
  Tokenizer tok(load_vocabulary(backend->file()));
  GenerateOptions g;
  g.max_tokens = tokens;
  g.sampling.temperature = 0;
  if (!regex.empty())
    g.grammar = std::make_shared<grammar::GrammarIndex>(grammar::compile_gbnf(grammar::regex_to_gbnf(regex)),
                                                         grammar::token_trie_of(tok));
  return generate(*backend, tok, ids, g, {}).tokens;
}

// A job of three items ("one", "two", "three") submitted: its id.
std::string submitted_job(messages::ClientConnection& c, const std::string& item_template, const messages::SamplingFields& s) {
  const uint64_t jid = c.next_id();
  const std::vector<std::string> items{"one", "two", "three"};
  c.send(messages::submit_job_request(jid, items, item_template, s));
  std::string job;
  while (auto f = c.receive(10s)) {
    const auto* r = messages::check_response(*f);
    if (r && r->client_request_id() == jid && r->body_as_JobAccepted()) {
      job = r->body_as_JobAccepted()->job()->job_id()->str();
      break;
    }
  }
  REQUIRE(!job.empty());
  return job;
}

// The job's results once it finished, by index (none if it did not within 30 s).
std::vector<messages::JobItemFields> finished_results(messages::ClientConnection& c, const std::string& job) {
  for (int i = 0; i < 600; ++i) {
    const uint64_t q = c.next_id();
    c.send(messages::job_results_request(q, job));
    while (auto f = c.receive(5s)) {
      const auto* r = messages::check_response(*f);
      if (!r || r->client_request_id() != q) continue;
      const auto* reply = r->body_as_JobReply();
      if (!reply || reply->job()->state() != wire::JobState::finished || !reply->results()) break;
      std::vector<messages::JobItemFields> out;
      for (const auto* item : *reply->results()) out.push_back(messages::read_job_item(item));
      std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
      return out;
    }
    std::this_thread::sleep_for(50ms);
  }
  return {};
}

std::vector<std::pair<std::string, int32_t>> segments(std::initializer_list<std::pair<std::string, int32_t>> s) { return s; }

}  // namespace

TEST_CASE("escalate: one stream, the small model's tokens up to the switch, then the large model's continuation of that "
          "prefix",
          "[service]") {
  const std::string small = unsure_model_path();
  Server server("cascade", {"--tiers", small + "," + model_path(), "--escalate-hold", "0", "--escalate-window", "8"});
  CHECK_THAT(server.process.output(), Catch::Contains("tiers " + stem(small) + " < " + stem(model_path())));
  const std::string prompt = "The fox and the dog, the fox and the";
  const auto out = ask(server.endpoint, prompt, routed("escalate", 24, 0.99f));
  INFO(out.message);
  REQUIRE(out.done);
  CHECK(out.usage.completion_tokens == 24);
  REQUIRE(out.tokens.size() == 24);
  // The small model is never 99 % sure: its first window of 8 trips the watch,
  // and the 8th token, the one that did, is the large model's to write.
  CHECK(out.usage.tiers == segments({{stem(small), 7}, {stem(model_path()), 17}}));
  Tokenizer tok(load_vocabulary(GgufFile::open(model_path())));
  std::vector<int32_t> ids = tok.encode(prompt, tok.add_bos_by_default(), false);
  CHECK(out.usage.prompt_tokens == static_cast<int32_t>(ids.size()));
  const std::vector<int32_t> first(out.tokens.begin(), out.tokens.begin() + 7), rest(out.tokens.begin() + 7, out.tokens.end());
  CHECK(first == greedy_ids(small, ids, 7));
  ids.insert(ids.end(), first.begin(), first.end());
  CHECK(rest == greedy_ids(model_path(), ids, 17));

  // The tiers alone: small writes what the small model writes, large what the large one does.
  const auto by_small = ask(server.endpoint, prompt, routed("small", 7));
  REQUIRE(by_small.done);
  CHECK(by_small.tokens == first);
  CHECK(by_small.usage.tiers == segments({{stem(small), 7}}));
  const auto by_large = ask(server.endpoint, prompt, routed(stem(model_path()), 12));
  REQUIRE(by_large.done);
  Reference ref;
  CHECK(by_large.tokens == ref.greedy(prompt, 12));

  // A lenient threshold never escalates this short answer... at 0.001 the mean never falls below it.
  const auto stays = ask(server.endpoint, prompt, routed("escalate", 12, 0.001f));
  REQUIRE(stays.done);
  CHECK(stays.usage.tiers == segments({{stem(small), 12}}));

  // Stats, per tier.
  messages::ClientConnection c(server.endpoint);
  messages::Bytes keep;
  const auto* st = stats(c, keep);
  REQUIRE(st);
  REQUIRE(st->tiers());
  REQUIRE(st->tiers()->size() == 2);
  const auto* t0 = st->tiers()->Get(0);
  const auto* t1 = st->tiers()->Get(1);
  CHECK(t0->name()->str() == stem(small));
  CHECK(t0->requests() == 3);
  CHECK(t0->escalations() == 1);
  CHECK(t1->escalated_in() == 1);
  CHECK(t1->requests() == 1);
  CHECK(t0->tokens() == 7 + 7 + 12);
  CHECK(t1->tokens() == 17 + 12);
  CHECK(t1->forward_tokens() > t1->tokens());  // its prompts too
  CHECK(pages_return(c, 5s));
}

// The grammar's state moves with the request: the large tier replays the
// small tier's tokens into its matcher and goes on under the same grammar.
// `[a-m ]*` is a star over one class, so its state after any prefix the small
// tier wrote allows what a fresh matcher does: the reference is the large
// model's constrained continuation of that prefix.
TEST_CASE("escalate under a constraint: both tiers follow it, and the large one continues the small one's prefix",
          "[service]") {
  const std::string small = unsure_model_path();
  Server server("cascadegrammar", {"--tiers", small + "," + model_path(), "--escalate-hold", "0", "--escalate-window", "8"});
  const std::string prompt = "The fox and the dog, the fox and the";
  const std::string regex = "[a-m ]*";
  messages::SamplingFields s = routed("escalate", 24, 0.99f);
  s.constraint.kind = static_cast<uint8_t>(wire::ConstraintKind::regex);
  s.constraint.text = regex;
  const auto out = ask(server.endpoint, prompt, s);
  INFO(out.message);
  REQUIRE(out.done);
  CHECK(out.text.find_first_not_of("abcdefghijklm ") == std::string::npos);
  Tokenizer tok(load_vocabulary(GgufFile::open(model_path())));
  std::vector<int32_t> ids = tok.encode(prompt, tok.add_bos_by_default(), false);
  const std::vector<int32_t> first = greedy_ids(small, ids, 7, regex);
  REQUIRE(first.size() == 7);
  CHECK(out.usage.tiers == segments({{stem(small), 7}, {stem(model_path()), static_cast<int32_t>(out.tokens.size()) - 7}}));
  REQUIRE(out.tokens.size() > 7);
  CHECK(std::vector<int32_t>(out.tokens.begin(), out.tokens.begin() + 7) == first);
  ids.insert(ids.end(), first.begin(), first.end());
  CHECK(std::vector<int32_t>(out.tokens.begin() + 7, out.tokens.end()) == greedy_ids(model_path(), ids, 17, regex));
  // Unconstrained, the same request writes letters past m: the grammar did the work.
  const auto free_out = ask(server.endpoint, prompt, routed("escalate", 24, 0.99f));
  REQUIRE(free_out.done);
  CHECK(free_out.text.find_first_not_of("abcdefghijklm ") != std::string::npos);
}

TEST_CASE("escalate, the hold rule (the default): an unsure answer is the large model's from its first token, a sure one "
          "the small model's",
          "[service]") {
  const std::string small = unsure_model_path();
  // Either signal of the held tokens (their geometric mean, or its tail): the same outcomes here.
  const std::string signal = GENERATE(std::string("geomean"), std::string("tail"));
  INFO("--escalate-signal " << signal);
  Server server("cascadehold" + signal, {"--tiers", small + "," + model_path(), "--escalate-hold", "8",
                                          "--escalate-signal", signal});
  const std::string prompt = "The fox and the dog, the fox and the";
  Reference ref;
  // Never 99 % sure: the first 8 tokens are held, judged, and never sent.
  const auto out = ask(server.endpoint, prompt, routed("escalate", 24, 0.99f));
  INFO(out.message);
  REQUIRE(out.done);
  CHECK(out.usage.tiers == segments({{stem(small), 0}, {stem(model_path()), 24}}));
  CHECK(out.tokens == ref.greedy(prompt, 24));
  // An answer shorter than the hold is judged when it ends.
  const auto brief = ask(server.endpoint, prompt, routed("escalate", 5, 0.99f));
  REQUIRE(brief.done);
  CHECK(brief.usage.tiers == segments({{stem(small), 0}, {stem(model_path()), 5}}));
  CHECK(brief.tokens == ref.greedy(prompt, 5));
  // Lenient: the held tokens go out, then the rest, all the small model's.
  const auto stays = ask(server.endpoint, prompt, routed("escalate", 24, 0.001f));
  REQUIRE(stays.done);
  CHECK(stays.usage.tiers == segments({{stem(small), 24}}));
  Tokenizer tok(load_vocabulary(GgufFile::open(model_path())));
  CHECK(stays.tokens == greedy_ids(small, tok.encode(prompt, tok.add_bos_by_default(), false), 24));
}

TEST_CASE("verify at accept_ratio 1 is the large model's greedy output, which the small model drafts", "[service]") {
  const std::string small = unsure_model_path();
  Server server("cascadeverify", {"--tiers", small + "," + model_path(), "--tier", "large"});
  CHECK_THAT(server.process.output(), Catch::Contains("draft model"));
  Reference ref;
  int drafted = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string prompt = "Request " + std::to_string(i) + " is about the fox and the dog";
    const auto out = ask(server.endpoint, prompt, routed("verify", 24));
    INFO(out.message);
    REQUIRE(out.done);
    CHECK(out.tokens == ref.greedy(prompt, 24));
    CHECK(out.usage.tiers == segments({{stem(model_path()), 24}}));
    drafted += out.usage.spec_drafted;
    // The server's default here is large (and, greedy, speculation auto): the same tokens.
    const auto plain = ask(server.endpoint, prompt, greedy(24));
    REQUIRE(plain.done);
    CHECK(plain.tokens == out.tokens);
    CHECK(plain.usage.tiers == segments({{stem(model_path()), 24}}));
    // Not speculating, it is the large model alone: the same tokens, nothing drafted.
    const auto alone = ask(server.endpoint, prompt, greedy(24), wire::Speculation::off);
    REQUIRE(alone.done);
    CHECK(alone.tokens == out.tokens);
    CHECK(alone.usage.spec_drafted == 0);
  }
  CHECK(drafted > 0);
}

TEST_CASE("a session escalates for good after N escalated turns, and remembers its tier, and a job's items take its tier",
          "[service]") {
  const std::string small = unsure_model_path();
  Server server("cascadesession", {"--tiers", small + "," + model_path(), "--escalate-threshold", "0.99",
                                   "--escalate-hold", "0", "--escalate-window", "4", "--escalate-for-good", "1"});
  auto turn = [&](const std::string& user) {
    messages::ClientConnection c(server.endpoint);
    const uint64_t id = c.next_id();
    const std::vector<std::pair<std::string, std::string>> msgs{{"user", user}};
    return c.stream(messages::chat_request(id, "tiered", msgs, greedy(12)), id, {}, 60s);
  };
  const auto first = turn("hello there");
  REQUIRE(first.done);
  CHECK(first.usage.tiers == segments({{stem(small), 3}, {stem(model_path()), 9}}));
  const auto second = turn("and again");
  REQUIRE(second.done);
  CHECK(second.usage.tiers == segments({{stem(model_path()), 12}}));  // on the last tier from its first token
  messages::ClientConnection c(server.endpoint);
  const uint64_t id = c.next_id();
  c.send(messages::show_session_request(id, "tiered"));
  bool shown = false;
  while (auto f = c.receive(10s)) {
    const auto* r = messages::check_response(*f);
    if (!r || r->client_request_id() != id) continue;
    const auto* s = r->body_as_Session();
    REQUIRE(s);
    CHECK(s->summary()->escalations() == 1);
    CHECK(s->summary()->model()->str() == stem(model_path()));
    shown = true;
    break;
  }
  CHECK(shown);

  // A batch job at `small`: its items run on the small tier, none escalates.
  messages::Bytes keep;
  const uint64_t before = stats(c, keep)->tiers()->Get(0)->requests();
  const std::string job = submitted_job(c, "Say: {item}", routed("small", 6));
  bool finished = false;
  for (int i = 0; i < 200 && !finished; ++i) {
    const uint64_t q = c.next_id();
    c.send(messages::job_status_request(q, job));
    while (auto f = c.receive(5s)) {
      const auto* r = messages::check_response(*f);
      if (!r || r->client_request_id() != q) continue;
      finished = r->body_as_JobReply() && r->body_as_JobReply()->job()->state() == wire::JobState::finished;
      break;
    }
    if (!finished) std::this_thread::sleep_for(50ms);
  }
  REQUIRE(finished);
  const auto* after = stats(c, keep);
  CHECK(after->tiers()->Get(0)->requests() == before + 3);
  CHECK(after->tiers()->Get(0)->escalations() == 1);  // the session's first turn only
}

TEST_CASE("a smaller tier in its own worker process escalates the same way as in process", "[service]") {
  const std::string small = unsure_model_path();
  const std::string worker_endpoint = ipc_endpoint("tierworker");
  ChildProcess worker({troupe_binary(), "worker", "-m", small, "--listen", worker_endpoint, "--threads", "1",
                       "--kv-tokens", "8192"},
                      Server::log("tierworker"), "listening on");
  // The default rule (hold): the unsure small model's held answer is never sent.
  Server split("cascadesplit", {"--tiers", small + "," + model_path(), "--tier-workers", worker_endpoint});
  Server local("cascadelocal", {"--tiers", small + "," + model_path()});
  const std::string prompt = "The fox and the dog, the fox and the";
  const auto a = ask(split.endpoint, prompt, routed("escalate", 24, 0.99f));
  const auto b = ask(local.endpoint, prompt, routed("escalate", 24, 0.99f));
  INFO(a.message << " / " << b.message);
  REQUIRE(a.done);
  REQUIRE(b.done);
  CHECK(a.tokens == b.tokens);
  CHECK(a.usage.tiers == b.usage.tiers);
  CHECK(a.usage.tiers == segments({{stem(small), 0}, {stem(model_path()), 24}}));
  CHECK_THROWS_WITH(Server("cascadetoomany", {"--tiers", small + "," + model_path(), "--tier-workers",
                                              worker_endpoint + "," + worker_endpoint}),
                    Catch::Contains("--tier-workers names 2 workers for 1 smaller tiers"));
}

TEST_CASE("session summaries are written by the --summary-model tier, the turns by the server's route", "[service]") {
  const std::string small = unsure_model_path();
  Server server("cascadesummary", {"--tiers", small + "," + model_path(), "--tier", "large", "--context", "512",
                                   "--summary-model", stem(small)});
  messages::ClientConnection c(server.endpoint);
  messages::Bytes keep;
  for (int t = 0; t < 24; ++t) {
    messages::ChatTurnFields turn;
    turn.session_id = "summarized";
    turn.messages = {{"user", "turn " + std::to_string(t) + ": tell me more about the fox and the dog"}};
    turn.sampling = greedy(12);
    turn.policy = wire::ContextPolicy::summarize;
    const uint64_t id = c.next_id();
    const auto out = c.stream(messages::chat_request(id, turn), id, {}, 60s);
    INFO(out.message);
    REQUIRE(out.done);
    CHECK(out.usage.tiers == segments({{stem(model_path()), 12}}));
  }
  // The window moved, so a summary was asked for: the small tier answers it, nothing else.
  uint64_t small_requests = 0;
  for (int i = 0; i < 300 && small_requests == 0; ++i) {
    small_requests = stats(c, keep)->tiers()->Get(0)->requests();
    std::this_thread::sleep_for(100ms);
  }
  CHECK(small_requests >= 1);
  CHECK_THROWS_WITH(Server("cascadesummarybad", {"--tiers", small + "," + model_path(), "--summary-model", "medium"}),
                    Catch::Contains("--summary-model medium is not among this server's models"));
  CHECK_THROWS_WITH(Server("summarybadone", {"--summary-model", "medium"}),
                    Catch::Contains("--summary-model medium is not among this server's models"));
}

TEST_CASE("cascade bad input gets one line: unknown tiers, tiers without a server's tiers, policies that cannot run, "
          "tiers with other tokenizers",
          "[service]") {
  const std::string small = unsure_model_path();
  {
    Server server("cascadebad", {"--tiers", small + "," + model_path()});
    auto expect = [&](const messages::SamplingFields& s, const std::string& says) {
      const auto out = ask(server.endpoint, "hello", s);
      INFO(out.message);
      CHECK_FALSE(out.done);
      CHECK(out.error == wire::ErrorCode::invalid_field);
      CHECK_THAT(out.message, Catch::Contains(says));
    };
    expect(routed("medium", 4), "no tier 'medium'");
    auto sampled = routed("verify", 4);
    sampled.temperature = 0.8f;
    expect(sampled, "temperature 0");
    expect(routed("escalate", 4, 1.5f), "sampling.escalate_threshold");
    auto lenient = routed("verify", 4);
    lenient.accept_ratio = 0;
    expect(lenient, "sampling.accept_ratio");
    // The server goes on serving.
    CHECK(ask(server.endpoint, "hello", routed("large", 4)).done);
  }
  {
    Server plain("cascadeplain");
    const auto out = ask(plain.endpoint, "hello", routed("small", 4));
    CHECK(out.error == wire::ErrorCode::invalid_field);
    CHECK_THAT(out.message, Catch::Contains("runs one model"));
  }
  SyntheticModelSpec other = service_model_spec();
  other.n_vocab = 1000;
  const std::string other_path = Server::log("cascadevocab") + ".gguf";
  write_synthetic_model(other, other_path);
  CHECK_THROWS_WITH(Server("cascadevocab", {"--tiers", other_path + "," + model_path()}),
                    Catch::Contains("different tokenizers"));
  CHECK_THROWS_WITH(Server("cascadepolicy", {"--tiers", small + "," + model_path(), "--tier", "biggest"}),
                    Catch::Contains("--tier biggest"));
  CHECK_THROWS_WITH(Server("cascadeone", {"--tiers", model_path()}), Catch::Contains("two models or more"));
  std::filesystem::remove(other_path);
}

// The real pair (TROUPE_REAL_DRAFT small, TROUPE_REAL_MODEL large): verify at
// accept_ratio 1 equals the large tier alone, token for token; escalate
// gives one well-formed stream whose segments add up.
TEST_CASE("the real pair as tiers: verify at 1 equals the large model greedily, escalate streams once", "[.realcascade]") {
  const char* large = std::getenv("TROUPE_REAL_MODEL");
  const char* small = std::getenv("TROUPE_REAL_DRAFT");
  REQUIRE(large != nullptr);
  REQUIRE(small != nullptr);
  const std::string endpoint = ipc_endpoint("realcascade");
  ChildProcess server({troupe_binary(), "serve", "--tiers", std::string(small) + "," + large, "--listen", endpoint,
                       "--threads", "2", "--kv-tokens", "8192", "--data-dir", Server::data_dir(endpoint)},
                      Server::log("realcascade"), "listening on", 180s);
  const std::vector<std::string> prompts{"def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
                                         "def is_palindrome(s: str) -> bool:\n"};
  for (const auto& prompt : prompts) {
    INFO(prompt);
    const auto want = ask(endpoint, prompt, routed("large", 32));
    const auto got = ask(endpoint, prompt, routed("verify", 32));
    REQUIRE(want.done);
    REQUIRE(got.done);
    CHECK(got.tokens == want.tokens);
    CHECK(got.usage.spec_drafted > 0);
    const auto esc = ask(endpoint, prompt, routed("escalate", 32, 0.9f));
    REQUIRE(esc.done);
    int32_t sum = 0;
    for (const auto& [tier, n] : esc.usage.tiers) sum += n;
    CHECK(sum == esc.usage.completion_tokens);
    CHECK(static_cast<int32_t>(esc.tokens.size()) == esc.usage.completion_tokens);
  }
}

namespace {

// The budget rule's figures of one class in `troupe stats` (judged -1: none).
messages::EscalationClassFields budget_class(const std::string& endpoint, const std::string& name) {
  messages::ClientConnection c(endpoint);
  messages::Bytes keep;
  const auto* s = stats(c, keep);
  REQUIRE(s);
  for (const auto& f : messages::read_stats(*s).escalation_classes)
    if (f.name == name) return f;
  return {name, -1, 0, 0};
}

}  // namespace

TEST_CASE("escalate under the budget rule: both outcomes once a class has figures, a job's items their own class, and "
          "the figures survive a restart",
          "[service]") {
  const std::string small = unsure_model_path();
  const std::vector<std::string> flags{"--tiers", small + "," + model_path(), "--escalate-hold", "4",
                                       "--escalate-budget", "0.5"};
  std::string endpoint;
  messages::EscalationClassFields before;
  {
    Server server("cascadebudget", flags);
    endpoint = server.endpoint;
    // The small model is unsure of everything: under the threshold rule's
    // 0.82 each answer escalates. Under the budget, once the class has 16
    // judged answers, its threshold sits among their confidences.
    int escalated = 0, kept = 0;
    for (int i = 0; i < 40; ++i) {
      messages::SamplingFields s = routed("escalate", 4);
      s.escalate_class = "e2e";
      const auto out = ask(server.endpoint, "Item " + std::to_string(i * 7919 % 1000) + ": the fox and the dog", s);
      INFO(out.message);
      REQUIRE(out.done);
      if (i < 16) continue;
      const bool up = out.usage.tiers.size() == 2;
      CHECK(out.usage.tiers.front().second == (up ? 0 : 4));
      (up ? escalated : kept) += 1;
    }
    CHECK(escalated > 0);
    CHECK(kept > 0);
    before = budget_class(server.endpoint, "class/e2e");
    CHECK(before.judged == 40);
    CHECK(before.threshold > 0.0f);
    CHECK(before.threshold < 0.82f);
    CHECK(budget_class(server.endpoint, "*").judged == 40);
    CHECK(budget_class(server.endpoint, "workload/0").judged == -1);  // none asked without a class

    // A job's items are counted as the job's class.
    messages::ClientConnection c(server.endpoint);
    const std::string job = submitted_job(c, "Say: {item}", routed("escalate", 4));
    bool counted = false;
    for (int i = 0; i < 200 && !counted; ++i) {
      counted = budget_class(server.endpoint, "job/" + job).judged == 3;
      if (!counted) std::this_thread::sleep_for(50ms);
    }
    CHECK(counted);
  }  // SIGTERM: the drain stores the figures
  Server again("cascadebudget", flags, endpoint);
  messages::EscalationClassFields after;
  for (int i = 0; i < 100 && after.judged <= 0; ++i) {  // read back from the store as the router starts
    after = budget_class(again.endpoint, "class/e2e");
    if (after.judged <= 0) std::this_thread::sleep_for(20ms);
  }
  CHECK(after == before);
}

namespace {

// A job of `requests` (labels a, b, ...) with `check`, run to its end: its results.
std::vector<messages::JobItemFields> checked_job(const std::string& endpoint, const std::vector<messages::Bytes>& requests,
                                                 const messages::JobCheckFields& check) {
  std::vector<std::string> labels;
  for (size_t i = 0; i < requests.size(); ++i) labels.push_back(std::string(1, static_cast<char>('a' + i)));
  messages::ClientConnection c(endpoint);
  const uint64_t jid = c.next_id();
  c.send(messages::submit_requests_job(jid, labels, requests, "", wire::Priority::batch, check));
  std::string job;
  while (auto f = c.receive(10s)) {
    const auto* r = messages::check_response(*f);
    if (r && r->client_request_id() == jid) {
      REQUIRE(r->body_as_JobAccepted());
      job = r->body_as_JobAccepted()->job()->job_id()->str();
      break;
    }
  }
  return finished_results(c, job);
}

}  // namespace

TEST_CASE("a checked job: an item the small tier answers and the check refuses is answered again by the large tier, "
          "counted in its result and the tier's stats",
          "[service]") {
  const std::string small = unsure_model_path();
  Server server("cascadecheck", {"--tiers", small + "," + model_path()});
  const std::vector<std::string> prompts{"The fox and the dog", "A quick brown fox jumps", "The lazy dog sleeps"};
  std::vector<std::string> large, alone;
  std::vector<messages::Bytes> requests;
  for (const auto& p : prompts) {
    large.push_back(ask(server.endpoint, p, routed("large", 6)).text);
    alone.push_back(ask(server.endpoint, p, routed("small", 6)).text);
    requests.push_back(messages::generate_request(0, p, routed("small", 6)));
  }
  // Every answer passes: the small tier's stand.
  const auto kept = checked_job(server.endpoint, requests, {wire::JobCheckKind::regex, R"([\s\S]+)"});
  REQUIRE(kept.size() == prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    CHECK(kept[i].check == wire::CheckOutcome::passed);
    CHECK(kept[i].retried == 0);
    CHECK(kept[i].text == alone[i]);
  }
  // None passes: each is answered again by the large tier, whose answer is kept, marked failed.
  const auto again = checked_job(server.endpoint, requests, {wire::JobCheckKind::contains, "no model writes this"});
  REQUIRE(again.size() == prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    CHECK(again[i].check == wire::CheckOutcome::failed);
    CHECK(again[i].retried == 1);
    CHECK(again[i].text == large[i]);
  }
  messages::ClientConnection c(server.endpoint);
  messages::Bytes keep;
  const auto figures = messages::read_stats(*stats(c, keep)).tiers;
  REQUIRE(figures.size() == 2);
  CHECK(figures[0].check_failures == prompts.size());
  CHECK(figures[1].check_failures == prompts.size());
}
