// Ingestion's decisions: what each client frame is, and the checks every
// prompt passes before the scheduler.
#include <catch2/catch.hpp>

#include <tuple>

#include "messages/client_frames.h"
#include "messages/file_frames.h"
#include "messages/job_frames.h"
#include "messages/session_frames.h"
#include "service/request_gate.h"
#include "tests/service/harness.h"

using namespace troupe;
using namespace troupe::service;

namespace {

GateConfig gate_config(int64_t max_context = 4096) {
  GateConfig c;
  c.tokenizer = test::synthetic_tokenizer();
  c.max_context = max_context;
  c.page_size = 4;
  return c;
}

messages::SamplingFields greedy(int32_t max_tokens = 8) {
  messages::SamplingFields s;
  s.temperature = 0;
  s.max_tokens = max_tokens;
  return s;
}

}  // namespace

TEST_CASE("a Generate becomes an AdmitRequest with its tokens, sampling and priority") {
  RequestGate gate(gate_config());
  const Admission a = gate.to_admit("peer", messages::generate_request(7, "hello world", greedy(), wire::Priority::batch), 42);
  const auto* r = std::get_if<AdmitRequest>(&a);
  REQUIRE(r);
  CHECK(r->peer == "peer");
  CHECK(r->client_id == 7);
  CHECK(r->accepted_ns == 42);
  CHECK(r->priority == Priority::batch);
  CHECK(r->prompt == test::synthetic_tokenizer()->encode("hello world", false, false));
  CHECK(r->sampling.max_tokens == 8);
  CHECK_FALSE(gate.check(*r));
}

TEST_CASE("a ChatTurn without a session is templated at once, and with one it waits for the session's history") {
  RequestGate gate(gate_config());
  const std::vector<std::pair<std::string, std::string>> msgs{{"user", "hi"}};
  const Admission plain = gate.to_admit("p", messages::chat_request(1, "", msgs, greedy()), 0);
  REQUIRE(std::holds_alternative<AdmitRequest>(plain));
  CHECK_FALSE(std::get<AdmitRequest>(plain).prompt.empty());
  Admission turn = gate.to_admit("p", messages::chat_request(2, "s1", msgs, greedy()), 0);
  REQUIRE(std::holds_alternative<SessionTurn>(turn));
  const SessionTurn& t = std::get<SessionTurn>(turn);
  CHECK(t.request.session_id == "s1");
  CHECK(t.request.prompt.empty());
  CHECK(t.request.turn_messages.size() == 1);
}

TEST_CASE("a session turn's stored pages serve only the prefix its new prompt shares with the stored tokens") {
  RequestGate gate(gate_config());
  const std::vector<std::pair<std::string, std::string>> msgs{{"user", "and then?"}};
  SessionTurn turn = std::get<SessionTurn>(gate.to_admit("p", messages::chat_request(2, "s1", msgs, greedy()), 0));
  persistence::SessionStart start;
  start.turns = {{{"user", "tell me a story"}, {"assistant", "once upon a time"}}};
  // The stored token history: the templated history, then tokens the new prompt does not have.
  const std::vector<ChatMessage> old{{"user", "tell me a story"}, {"assistant", "once upon a time"}};
  start.kv_tokens = encode_chat(*test::synthetic_tokenizer(), ChatFormat::chatml, old, false);
  const size_t shared_pages = start.kv_tokens.size() / 4;
  start.kv_stored = static_cast<int32_t>(shared_pages + 3);  // more stored than the new prompt can use
  start.kv_data.assign(static_cast<size_t>(start.kv_stored), "page");
  auto next = gate.with_history(std::move(turn), std::move(start));
  const auto* a = std::get_if<AdmitRequest>(&next);
  REQUIRE(a);
  CHECK(a->persisted_pages <= static_cast<int32_t>(shared_pages));
  CHECK(a->persisted_pages >= static_cast<int32_t>(shared_pages) - 1);
  CHECK(a->restore_pages.size() == static_cast<size_t>(a->persisted_pages));
}

TEST_CASE("a session turn past its window brings the answers it no longer shows, where it drafts from suffix trees") {
  RequestGate gate(gate_config(256));
  persistence::SessionStart stored;
  for (int t = 0; t < 12; ++t)
    stored.turns.push_back({{"user", "question " + std::to_string(t) + " about the weather today"},
                            {"assistant", "answer " + std::to_string(t) + ": it rains in the city again"}});
  const std::vector<std::pair<std::string, std::string>> msgs{{"user", "and tomorrow?"}};
  auto turn_with = [&](wire::Speculation mode) {
    SessionTurn turn = std::get<SessionTurn>(gate.to_admit(
        "p", messages::chat_request(2, "s1", msgs, greedy(), wire::Priority::chat, false, mode), 0));
    auto next = gate.with_history(std::move(turn), stored);
    REQUIRE(std::holds_alternative<AdmitRequest>(next));
    return std::get<AdmitRequest>(std::move(next));
  };
  const AdmitRequest a = turn_with(wire::Speculation::suffix);
  REQUIRE(a.window_first_turn > 0);
  REQUIRE(a.suffix_seed.size() == static_cast<size_t>(a.window_first_turn));
  CHECK(a.suffix_seed.back() ==
        test::synthetic_tokenizer()->encode(stored.turns[static_cast<size_t>(a.window_first_turn - 1)][1].content, false, false));
  CHECK(turn_with(wire::Speculation::auto_).suffix_seed.size() == a.suffix_seed.size());
  CHECK(turn_with(wire::Speculation::ngram).suffix_seed.empty());
}

TEST_CASE("queries are routed, not admitted: ping, stats, cancel, sessions and jobs") {
  RequestGate gate(gate_config());
  auto kind_of = [&](const messages::Bytes& b) {
    const Admission a = gate.to_admit("p", b, 0);
    REQUIRE(std::holds_alternative<Query>(a));
    return std::get<Query>(a);
  };
  CHECK(kind_of(messages::ping_request(1, 99)).kind == Query::Kind::ping);
  CHECK(kind_of(messages::ping_request(1, 99)).number == 99);
  CHECK(kind_of(messages::stats_request(1)).kind == Query::Kind::stats);
  const Query c = kind_of(messages::cancel_request(2, 5));
  CHECK(c.kind == Query::Kind::cancel);
  CHECK(c.number == 5);
  CHECK(kind_of(messages::list_sessions_request(3)).kind == Query::Kind::list_sessions);
  CHECK(kind_of(messages::show_session_request(3, "s")).name == "s");
  CHECK(kind_of(messages::delete_session_request(3, "s")).kind == Query::Kind::delete_session);
  CHECK(kind_of(messages::job_status_request(4, "j")).job == JobQuery::status);
  CHECK(kind_of(messages::job_results_request(4, "j")).job == JobQuery::results);
  CHECK(kind_of(messages::cancel_job_request(4, "j")).job == JobQuery::cancel);
  CHECK(kind_of(messages::list_jobs_request(4)).job == JobQuery::list);
  const std::vector<std::string> items{"a", "b"};
  const Admission job = gate.to_admit("p", messages::submit_job_request(5, items, "Summarize: {item}", greedy()), 0);
  REQUIRE(std::holds_alternative<JobSubmission>(job));
  CHECK(std::get<JobSubmission>(job).items == items);
}

TEST_CASE("bad frames and impossible requests are rejections naming the problem") {
  RequestGate gate(gate_config(64));
  const Admission garbage = gate.to_admit("p", "not a flatbuffer", 0);
  REQUIRE(std::holds_alternative<messages::Rejection>(garbage));
  CHECK(std::get<messages::Rejection>(garbage).code == wire::ErrorCode::malformed);

  const Admission draft = gate.to_admit(
      "p", messages::generate_request(1, "x", greedy(), wire::Priority::interactive, false, false, false, 1, wire::Speculation::draft), 0);
  REQUIRE(std::holds_alternative<messages::Rejection>(draft));
  CHECK_THAT(std::get<messages::Rejection>(draft).message, Catch::Contains("no draft model"));

  AdmitRequest a;
  a.client_id = 1;
  CHECK(gate.check(a)->message == "prompt: no tokens");
  a.prompt.assign(64, 70);
  a.session_id = std::string("long-chat");
  const auto too_long = gate.check(a);
  REQUIRE(too_long);
  CHECK(too_long->code == wire::ErrorCode::too_long);
  CHECK_THAT(too_long->message, Catch::Contains("session 'long-chat' has outgrown it"));
  a.prompt.resize(10);
  a.samples = 17;
  CHECK(gate.check(a)->code == wire::ErrorCode::invalid_field);
}

TEST_CASE("requests with n > 1 do not speculate, and others (logprobs too) get the server's default") {
  GateConfig c = gate_config();
  c.speculation = SpeculationDefault::every(SpeculationMode::ngram);
  RequestGate gate(c);
  auto admitted = [&](const messages::Bytes& b) { return std::get<AdmitRequest>(gate.to_admit("p", b, 0)); };
  CHECK(admitted(messages::generate_request(1, "x", greedy())).speculation == SpeculationMode::ngram);
  // Logprobs are the verify pass's: the target model's, speculating or not.
  const AdmitRequest lp = admitted(messages::generate_request(1, "x", greedy(), wire::Priority::interactive, false, true,
                                                              false, 1, wire::Speculation::server_default, 0, {},
                                                              wire::ContextPolicy::server_default, false, 5));
  CHECK(lp.speculation == SpeculationMode::ngram);
  CHECK(lp.top_logprobs == 5);
  CHECK(admitted(messages::generate_request(1, "x", greedy(), wire::Priority::interactive, false, false, false, 2))
            .speculation == SpeculationMode::off);
}

TEST_CASE("by default greedy requests speculate with auto and sampled ones do not, unless they ask") {
  RequestGate gate(gate_config());  // GateConfig's default: serve --speculation auto-greedy
  auto admitted = [&](const messages::Bytes& b) { return std::get<AdmitRequest>(gate.to_admit("p", b, 0)); };
  CHECK(admitted(messages::generate_request(1, "x", greedy())).speculation == SpeculationMode::automatic);
  messages::SamplingFields sampled = greedy();
  sampled.temperature = 0.7f;
  sampled.seed = 11;
  CHECK(admitted(messages::generate_request(2, "x", sampled)).speculation == SpeculationMode::off);
  // A request's own choice wins either way.
  CHECK(admitted(messages::generate_request(3, "x", sampled, wire::Priority::interactive, false, false, false, 1,
                                            wire::Speculation::suffix))
            .speculation == SpeculationMode::suffix);
  CHECK(admitted(messages::generate_request(4, "x", greedy(), wire::Priority::interactive, false, false, false, 1,
                                            wire::Speculation::off))
            .speculation == SpeculationMode::off);
  const std::vector<std::pair<std::string, std::string>> msgs{{"user", "hi"}};
  CHECK(admitted(messages::chat_request(5, "", msgs, greedy())).speculation == SpeculationMode::automatic);
  CHECK(admitted(messages::chat_request(6, "", msgs, sampled)).speculation == SpeculationMode::off);
}

TEST_CASE("a job whose template times an item expands past the prompt bound is too_long at the gate") {
  RequestGate gate(gate_config());
  std::string tmpl;
  for (int i = 0; i < 2000; ++i) tmpl += "{item}";  // 12 KB of template
  const std::vector<std::string> items{"short", std::string(100 << 10, 'x')};  // 100 KiB: 200 MB expanded
  const Admission job = gate.to_admit("p", messages::submit_job_request(5, items, tmpl, greedy()), 0);
  const auto* r = std::get_if<messages::Rejection>(&job);
  REQUIRE(r);
  CHECK(r->code == wire::ErrorCode::too_long);
  CHECK(r->message == "SubmitJob.items[1]: expands to 204800000 bytes through the template's 2000 '{item}'s, "
                      "at most 1048576");
  const std::vector<std::string> fine{"short", std::string(500, 'x')};
  CHECK(std::holds_alternative<JobSubmission>(gate.to_admit("p", messages::submit_job_request(6, fine, tmpl, greedy()), 0)));
}

TEST_CASE("a job's check is taken when it can run exactly, refused with invalid_field naming why when it cannot") {
  RequestGate gate(gate_config());
  const std::vector<std::string> items{"one"};
  const auto with_check = [&](wire::JobCheckKind kind, const std::string& text) {
    return gate.to_admit("p", messages::submit_job_request(5, items, "{item}", greedy(), wire::Priority::batch, {kind, text}), 0);
  };
  const Admission fine = with_check(wire::JobCheckKind::json_schema, R"({"type": "array", "uniqueItems": true})");
  REQUIRE(std::holds_alternative<JobSubmission>(fine));
  CHECK(std::get<JobSubmission>(fine).check.kind == wire::JobCheckKind::json_schema);
  for (const auto& [kind, text, why] : {std::tuple{wire::JobCheckKind::regex, std::string("(?=x)y"), "pattern"},
                                        std::tuple{wire::JobCheckKind::json_schema, std::string(R"({"type": "strng"})"), "type"},
                                        std::tuple{wire::JobCheckKind::contains, std::string(), "checks nothing"}}) {
    const Admission bad = with_check(kind, text);
    const auto* r = std::get_if<messages::Rejection>(&bad);
    REQUIRE(r);
    CHECK(r->code == wire::ErrorCode::invalid_field);
    CHECK_THAT(r->message, Catch::StartsWith("SubmitJob.check: ") && Catch::Contains(why));
  }
}

TEST_CASE("under CURVE a frame carries its client's name, weight and ownership, priority is capped, and the gateway reads only stats") {
  auto clients = std::make_shared<messages::ClientDirectory>();
  clients->add({"alice", std::string(40, 'a'), 3, wire::Priority::chat, false, ""});
  clients->add({"root", std::string(40, 'r'), 1, wire::Priority::interactive, true, ""});
  GateConfig c = gate_config();
  c.clients = clients;
  RequestGate gate(c);
  const Admission a =
      gate.to_admit("p", messages::generate_request(1, "hello", greedy(), wire::Priority::interactive), 0, "alice");
  const auto* r = std::get_if<AdmitRequest>(&a);
  REQUIRE(r);
  CHECK(r->tenant == "alice");
  CHECK(r->weight == 3);
  CHECK(r->priority == Priority::chat);  // asked interactive, allowed chat
  const Admission b = gate.to_admit("p", messages::generate_request(2, "hello", greedy(), wire::Priority::batch), 0, "alice");
  CHECK(std::get<AdmitRequest>(b).priority == Priority::batch);  // less urgent than the cap stays
  const Admission q = gate.to_admit("p", messages::list_sessions_request(3), 0, "alice");
  REQUIRE(std::get_if<Query>(&q));
  CHECK(std::get<Query>(q).who.name == "alice");
  CHECK_FALSE(std::get<Query>(q).who.admin);
  CHECK(std::get<Query>(gate.to_admit("p", messages::list_sessions_request(4), 0, "root")).who.admin);
  // A name CURVE never gave: refused, never served as someone.
  const Admission x = gate.to_admit("p", messages::list_sessions_request(5), 0, "mallory");
  REQUIRE(std::get_if<messages::Rejection>(&x));
  // The HTTP gateway's own scrape (/metrics) reads stats and nothing else.
  const Admission st = gate.to_admit("p", messages::stats_request(7), 0, kGatewayStats);
  REQUIRE(std::get_if<Query>(&st));
  CHECK(std::get<Query>(st).kind == Query::Kind::stats);
  for (const auto& bytes : {messages::list_sessions_request(8), messages::list_jobs_request(9),
                            messages::generate_request(10, "hello", greedy(), wire::Priority::batch)}) {
    const Admission no = gate.to_admit("p", bytes, 0, kGatewayStats);
    REQUIRE(std::get_if<messages::Rejection>(&no));
    CHECK(std::get<messages::Rejection>(no).message == "the gateway's own requests read only stats");
  }
  // A session's hand-off is for front ends, whose key is an admin client's.
  const messages::TakeSessionFields take{"s", wire::HandOffStep::ask, "alice", false, "tcp://b:7700"};
  const Admission t_alice = gate.to_admit("p", messages::take_session_request(11, take), 0, "alice");
  REQUIRE(std::get_if<messages::Rejection>(&t_alice));
  CHECK(std::get<messages::Rejection>(t_alice).code == wire::ErrorCode::forbidden);
  const Admission t_root = gate.to_admit("p", messages::take_session_request(12, take), 0, "root");
  REQUIRE(std::get_if<Query>(&t_root));
  CHECK(std::get<Query>(t_root).kind == Query::Kind::take_session);
  CHECK(std::get<Query>(t_root).take.owner == "alice");
  CHECK(std::get<Query>(t_root).take.to == "tcp://b:7700");
  // Without CURVE: no name, everyone may use everything, one share per connection.
  RequestGate open(gate_config());
  const Admission o = open.to_admit("p", messages::list_sessions_request(6), 0);
  CHECK(std::get<Query>(o).who.admin);
  CHECK(std::get<Query>(o).who.name.empty());
}

TEST_CASE("a job of whole requests is refused whole when one of them would be alone, and file requests go to the store") {
  RequestGate gate(gate_config(64));
  const std::vector<std::pair<std::string, std::string>> msgs{{"user", "hi"}};
  const std::vector<messages::Bytes> fine{messages::chat_request(1, "", msgs, greedy()),
                                          messages::generate_request(2, "hello", greedy())};
  const std::vector<std::string> labels{"a", "b"};
  const Admission ok = gate.to_admit("p", messages::submit_requests_job(5, labels, fine, "{}"), 0);
  const auto* job = std::get_if<JobSubmission>(&ok);
  REQUIRE(job);
  CHECK(job->requests == fine);
  CHECK(job->items == labels);
  CHECK(job->annotation == "{}");
  const auto item = gate.job_item(fine[1], 7);
  REQUIRE(std::holds_alternative<AdmitRequest>(item));
  CHECK(std::get<AdmitRequest>(item).prompt == test::synthetic_tokenizer()->encode("hello", false, false));
  // The second would be refused alone (its prompt outgrows the context): the job is.
  const std::vector<messages::Bytes> one_bad{fine[0], messages::generate_request(3, std::string(400, 'x'), greedy())};
  const Admission refused = gate.to_admit("p", messages::submit_requests_job(6, labels, one_bad, "{}"), 0);
  const auto* r = std::get_if<messages::Rejection>(&refused);
  REQUIRE(r);
  CHECK(r->client_request_id == 6);
  CHECK(r->message.rfind("SubmitJob.requests[1]: ", 0) == 0);
  // A session turn or a query is no item.
  for (const auto& not_item : {messages::chat_request(4, "s1", msgs, greedy()), messages::stats_request(4)})
    CHECK(std::holds_alternative<messages::Rejection>(gate.job_item(not_item, 0)));
  const std::vector<messages::Bytes> mismatched{fine[0]};
  CHECK(std::holds_alternative<messages::Rejection>(
      gate.to_admit("p", messages::submit_requests_job(7, labels, mismatched, "{}"), 0)));
  const Admission file = gate.to_admit("p", messages::put_file_request(8, "batch", "x", "data"), 0);
  const auto* q = std::get_if<Query>(&file);
  REQUIRE(q);
  CHECK(q->kind == Query::Kind::file);
  CHECK(q->request == messages::put_file_request(8, "batch", "x", "data"));
  CHECK(std::holds_alternative<messages::Rejection>(gate.to_admit("p", messages::put_file_request(9, "", "x", "data"), 0)));
  CHECK(std::holds_alternative<messages::Rejection>(gate.to_admit("p", messages::get_file_request(9, "../x", true), 0)));
}
