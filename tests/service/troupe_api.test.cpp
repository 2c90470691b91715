// troupe's own HTTP endpoints (service/troupe_api.h): a job body becomes the
// SubmitJob a ZeroMQ client would send, each answer to a sessions or jobs
// request becomes its JSON and status, and the stats become one object.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "messages/client_frames.h"
#include "messages/client_validation.h"
#include "messages/job_frames.h"
#include "messages/session_frames.h"
#include "service/openai_api.h"
#include "service/troupe_api.h"

using namespace troupe;
using nlohmann::json;

namespace {

const wire::Request* request_of(const messages::Bytes& b) {
  messages::Rejection why;
  return messages::check_request(b, {}, why);
}

const wire::SubmitJob* job_ok(const std::string& body, messages::Bytes& bytes, int32_t max_tokens = 4096) {
  auto parsed = service::parse_job_submission(body, max_tokens);
  if (auto* e = std::get_if<service::ApiError>(&parsed)) FAIL("refused: " << e->param << ": " << e->message);
  bytes = std::get<messages::Bytes>(parsed);
  const auto* r = request_of(bytes);
  REQUIRE(r);
  REQUIRE(r->body_as_SubmitJob());
  return r->body_as_SubmitJob();
}

service::ApiError job_error(const std::string& body, int32_t max_tokens = 4096) {
  auto parsed = service::parse_job_submission(body, max_tokens);
  REQUIRE(std::holds_alternative<service::ApiError>(parsed));
  return std::get<service::ApiError>(parsed);
}

// An answer that must be a 200, read as JSON.
json ok(const messages::Bytes& frame) {
  const service::HttpAnswer a = service::troupe_answer(frame);
  CHECK(a.status == 200);
  return json::parse(a.json);
}

messages::SessionSummaryFields session(const std::string& id) {
  messages::SessionSummaryFields s;
  s.session_id = id;
  s.turns = 2;
  s.tokens = 40;
  s.created_ms = 5'500;
  s.updated_ms = 9'999;
  s.model = "qwen";
  s.owner = "alice";
  return s;
}

messages::JobSummaryFields job(const std::string& id, wire::JobState state) {
  messages::JobSummaryFields j;
  j.job_id = id;
  j.state = state;
  j.items = 3;
  j.finished_items = 2;
  j.completion_tokens = 17;
  j.created_ms = 2'000;
  j.updated_ms = 3'500;
  j.owner = "bob";
  return j;
}

}  // namespace

TEST_CASE("job bodies become a SubmitJob with the completion's sampling, and answers become JSON") {
  auto parsed = service::parse_job_submission(R"({"items":["a","b"],"template":"Sum: {item}","max_tokens":9,
                                                 "temperature":0})",
                                              4096);
  REQUIRE(std::holds_alternative<messages::Bytes>(parsed));
  const auto* j = request_of(std::get<messages::Bytes>(parsed))->body_as_SubmitJob();
  REQUIRE(j);
  CHECK(j->items()->size() == 2);
  CHECK(j->template_()->str() == "Sum: {item}");
  CHECK(j->sampling()->max_tokens() == 9);
  CHECK(j->sampling()->temperature() == 0.0f);
  auto bad = service::parse_job_submission(R"({"items":[]})", 4096);
  REQUIRE(std::holds_alternative<service::ApiError>(bad));
  CHECK(std::get<service::ApiError>(bad).param == "items");
  const service::HttpAnswer unknown =
      service::troupe_answer(messages::error_response(1, wire::ErrorCode::unknown_job, "no job x"));
  CHECK(unknown.status == 404);
  CHECK(json::parse(unknown.json)["error"]["message"] == "no job x");
  CHECK(service::troupe_answer("").status == 504);
}

TEST_CASE("troupe api: a job's check is read by kind, a schema as JSON, anything else refused by name") {
  messages::Bytes bytes;
  const auto* regex = job_ok(R"({"items":["a"],"check":{"regex":"Answer: \\d+"}})", bytes);
  REQUIRE(regex->check());
  CHECK(regex->check()->kind() == wire::JobCheckKind::regex);
  CHECK(regex->check()->text()->str() == "Answer: \\d+");
  messages::Bytes more;
  const auto* schema = job_ok(R"({"items":["a"],"check":{"json_schema":{"type":"object"}}})", more);
  CHECK(schema->check()->kind() == wire::JobCheckKind::json_schema);
  CHECK(json::parse(schema->check()->text()->str()) == json{{"type", "object"}});
  for (const char* body : {R"({"items":["a"],"check":{"regex":1}})", R"({"items":["a"],"check":{"grep":"x"}})",
                           R"({"items":["a"],"check":{"contains":"x","regex":"y"}})", R"({"items":["a"],"check":"x"})",
                           R"({"items":["a"],"check":{"json_schema":"not an object"}})"}) {
    INFO(body);
    CHECK(job_error(body).param == "check");
  }
}

TEST_CASE("troupe api: a job's items and template are kept, its sampling read as a completion's, model ignored") {
  messages::Bytes bytes;
  const auto* j =
      job_ok(R"({"items":["one","two","three"],"model":"any name","top_k":5,"stop":["\n"],"seed":7})", bytes);
  REQUIRE(j->items()->size() == 3);
  CHECK(j->items()->Get(2)->str() == "three");
  CHECK((!j->template_() || j->template_()->str().empty()));  // no template: each item is its prompt
  CHECK(j->priority() == wire::Priority::batch);
  const messages::SamplingFields s = messages::read_sampling(j->sampling());
  CHECK(s.top_k == 5);
  CHECK(s.stop == std::vector<std::string>{"\n"});
  CHECK(s.seed == 7);
  CHECK(s.max_tokens == 1024);  // the completion's default, within the server's bound
  CHECK(messages::read_sampling(job_ok(R"({"items":["x"]})", bytes, 64)->sampling()).max_tokens == 64);
  CHECK(job_ok(R"({"items":["x"],"template":null})", bytes)->items()->size() == 1);
}

TEST_CASE("troupe api: a job body that is not an object, or whose items or template are wrong, is refused by field") {
  for (const char* body : {"{not json", "[1]", "\"items\""}) {
    INFO(body);
    const auto e = job_error(body);
    CHECK(e.status == 400);
    CHECK(e.message == "the body must be a JSON object");
    CHECK(e.param.empty());
    CHECK(e.code == "malformed");
  }
  for (const char* body : {"{}", R"({"items":"a"})", R"({"items":[]})"}) {
    INFO(body);
    const auto e = job_error(body);
    CHECK(e.status == 400);
    CHECK(e.param == "items");
    CHECK(e.message == "items must be a non-empty array of strings");
    CHECK(e.code == "invalid_field");
  }
  auto e = job_error(R"({"items":["a",2]})");
  CHECK(e.param == "items");
  CHECK(e.message == "items must be strings");
  e = job_error(R"({"items":["a"],"template":["{item}"]})");
  CHECK(e.param == "template");
  CHECK(e.message == "template must be a string");
}

TEST_CASE("troupe api: a job's sampling is refused as a completion's would be") {
  CHECK(job_error(R"({"items":["a"],"temperature":"hot"})").param == "temperature");
  CHECK(job_error(R"({"items":["a"],"max_tokens":65})", 64).param == "max_tokens");
  CHECK(job_error(R"({"items":["a"],"n":1.5})").param == "n");
}

TEST_CASE("troupe api: no answer is a 504, an unreadable or unexpected one a 500") {
  const service::HttpAnswer none = service::troupe_answer("");
  CHECK(none.status == 504);
  CHECK(json::parse(none.json)["error"]["message"] == "the server did not answer in time");
  CHECK(json::parse(none.json)["error"]["code"] == "timeout");
  const service::HttpAnswer junk = service::troupe_answer("not a frame");
  CHECK(junk.status == 500);
  CHECK(json::parse(junk.json)["error"]["message"] == "an unreadable answer");
  const service::HttpAnswer pong = service::troupe_answer(messages::pong_response(1, 2));
  CHECK(pong.status == 500);
  CHECK(json::parse(pong.json)["error"]["message"] == "an unexpected answer");
  CHECK(json::parse(pong.json)["error"]["type"] == "server_error");
}

TEST_CASE("troupe api: an Error answer has its code's status and message") {
  const service::HttpAnswer full =
      service::troupe_answer(messages::error_response(1, wire::ErrorCode::queue_full, "busy"));
  CHECK(full.status == 429);
  CHECK(json::parse(full.json)["error"]["message"] == "busy");
  const service::HttpAnswer gone =
      service::troupe_answer(messages::error_response(1, wire::ErrorCode::unknown_session, "no session s"));
  CHECK(gone.status == 404);
  CHECK(json::parse(gone.json)["error"]["message"] == "no session s");
}

TEST_CASE("troupe api: a session list and a deletion become JSON, times in seconds") {
  const std::vector<messages::SessionSummaryFields> sessions{session("a"), session("b")};
  const json list = ok(messages::session_list_response(1, sessions));
  CHECK(list["object"] == "list");
  REQUIRE(list["data"].size() == 2);
  const json& a = list["data"][0];
  CHECK(a["id"] == "a");
  CHECK(a["object"] == "troupe.session");
  CHECK(a["turns"] == 2);
  CHECK(a["tokens"] == 40);
  CHECK(a["created"] == 5);
  CHECK(a["updated"] == 9);
  CHECK(a["model"] == "qwen");
  CHECK(a["owner"] == "alice");
  CHECK(list["data"][1]["id"] == "b");
  CHECK(ok(messages::session_list_response(1, {}))["data"] == json::array());
  const json deleted = ok(messages::ack_response(1, "session a deleted"));
  CHECK(deleted["deleted"] == true);
  CHECK(deleted["message"] == "session a deleted");
}

TEST_CASE("troupe api: a session's messages carry their turn and its state, and the context summary") {
  const std::vector<messages::RoleContent> msgs{
      {"user", "hi"}, {"assistant", "hello"}, {"user", "and?"}, {"assistant", "then"}, {"user", "extra"}};
  const std::vector<wire::TurnState> states{wire::TurnState::summarized, wire::TurnState::archived};
  const std::vector<int32_t> per_turn{2, 1, 1};
  const json s = ok(messages::session_response(1, session("s"), msgs, states, "they greeted", per_turn));
  CHECK(s["id"] == "s");
  CHECK(s["object"] == "troupe.session");
  CHECK(s["context_summary"] == "they greeted");
  REQUIRE(s["messages"].size() == 5);
  CHECK(s["messages"][0] == json{{"role", "user"}, {"content", "hi"}, {"turn", 0}, {"state", "summarized"}});
  CHECK(s["messages"][1]["turn"] == 0);
  CHECK(s["messages"][2]["turn"] == 1);
  CHECK(s["messages"][2]["state"] == "archived");
  CHECK(s["messages"][3]["turn"] == 2);
  CHECK(s["messages"][3]["state"] == "window");  // no state given for turn 2: in the window
  CHECK(s["messages"][4]["turn"] == -1);         // past the turns counted
  CHECK(s["messages"][4]["state"] == "window");
  const json plain = ok(messages::session_response(1, session("p"), msgs));
  CHECK(plain["messages"][0]["turn"] == -1);
  CHECK(plain["context_summary"] == "");
}

TEST_CASE("troupe api: a job accepted, a job's reply with its results and a job list become JSON") {
  const json accepted = ok(messages::job_accepted_response(1, job("j1", wire::JobState::running)));
  CHECK(accepted == json{{"id", "j1"},      {"object", "troupe.job"},    {"state", "running"},
                         {"items", 3},      {"finished_items", 2},       {"completion_tokens", 17},
                         {"created", 2},    {"updated", 3},              {"owner", "bob"}});
  messages::JobItemFields done, failed;
  done.index = 0;
  done.text = "a summary";
  done.finish_reason = wire::FinishReason::length;
  done.prompt_tokens = 12;
  done.completion_tokens = 9;
  failed.index = 2;
  failed.error = "the prompt is too long";
  const std::vector<messages::JobItemFields> results{done, failed};
  const json reply = ok(messages::job_reply_response(1, job("j1", wire::JobState::finished), results));
  CHECK(reply["state"] == "finished");
  REQUIRE(reply["results"].size() == 2);
  CHECK(reply["results"][0] == json{{"index", 0},          {"text", "a summary"}, {"finish_reason", "length"},
                                    {"prompt_tokens", 12}, {"completion_tokens", 9}, {"error", ""},
                                    {"check", "not_checked"}, {"retried", 0}});
  CHECK(reply["results"][1]["index"] == 2);
  CHECK(reply["results"][1]["error"] == "the prompt is too long");
  CHECK(reply["results"][1]["finish_reason"] == "stop");
  const json status = ok(messages::job_reply_response(1, job("j2", wire::JobState::cancelled)));
  CHECK(status["state"] == "cancelled");
  CHECK_FALSE(status.contains("results"));
  const std::vector<messages::JobSummaryFields> jobs{job("j1", wire::JobState::running),
                                                     job("j2", wire::JobState::finished)};
  const json list = ok(messages::job_list_response(1, jobs));
  CHECK(list["object"] == "list");
  REQUIRE(list["data"].size() == 2);
  CHECK(list["data"][1]["id"] == "j2");
  CHECK(list["data"][1]["state"] == "finished");
  CHECK(ok(messages::job_list_response(1, {}))["data"] == json::array());
}

TEST_CASE("troupe api: the stats become one object, with tiers and workers as lists, speculation by source") {
  messages::StatsFields s;
  s.model = "qwen";
  s.running = 2;
  s.waiting = 1;
  s.pages_total = 100;
  s.pages_used = 40;
  s.pages_cached = 10;
  s.pages_free = 50;
  s.local_pages_total = 8;
  s.local_pages_used = 3;
  s.steps = 1000;
  s.tokens_generated = 5000;
  s.pages_spilled = 6;
  s.pages_restored = 4;
  s.preemptions = 2;
  s.draining = true;
  s.store_degraded = "no space left";
  messages::TierStatsFields tier;
  tier.name = "mini";
  tier.requests = 10;
  tier.escalations = 3;
  tier.drafted = 7;
  tier.accepted = 5;
  s.tiers = {tier};
  messages::WorkerStatsFields worker;
  worker.endpoint = "tcp://w:1";
  worker.tier = "mini";
  worker.up = false;
  worker.lost = 1;
  worker.step_ms = 12.5;
  s.workers = {worker, worker};
  s.speculation = {{"suffix", 30, 20, 8}};
  s.suffix_tree_bytes = 4096, s.suffix_tree_tokens = 8, s.suffix_trees = 1;
  const json j = json::parse(service::stats_json(s));
  CHECK(j["speculation"]["suffix"]["accepted"] == 20);
  CHECK(j["speculation"]["suffix"]["windows"] == 8);
  CHECK(j["suffix_tree_bytes"] == 4096);
  CHECK(j["suffix_tree_tokens"] == 8);
  CHECK(j["suffix_trees"] == 1);
  CHECK(j["model"] == "qwen");
  CHECK(j["running"] == 2);
  CHECK(j["waiting"] == 1);
  CHECK(j["pages_total"] == 100);
  CHECK(j["pages_used"] == 40);
  CHECK(j["pages_cached"] == 10);
  CHECK(j["pages_free"] == 50);
  CHECK(j["local_pages_total"] == 8);
  CHECK(j["local_pages_used"] == 3);
  CHECK(j["steps"] == 1000);
  CHECK(j["tokens_generated"] == 5000);
  CHECK(j["pages_spilled"] == 6);
  CHECK(j["pages_restored"] == 4);
  CHECK(j["preemptions"] == 2);
  CHECK(j["draining"] == true);
  CHECK(j["store_degraded"] == "no space left");
  REQUIRE(j["tiers"].size() == 1);
  CHECK(j["tiers"][0]["tier"] == "mini");
  CHECK(j["tiers"][0]["requests"] == 10);
  CHECK(j["tiers"][0]["escalations"] == 3);
  CHECK(j["tiers"][0]["drafted"] == 7);
  CHECK(j["tiers"][0]["accepted"] == 5);
  REQUIRE(j["workers"].size() == 2);
  CHECK(j["workers"][0]["worker"] == "tcp://w:1");
  CHECK(j["workers"][0]["tier"] == "mini");
  CHECK(j["workers"][0]["up"] == false);
  CHECK(j["workers"][0]["lost"] == 1);
  CHECK(j["workers"][0]["step_ms"] == 12.5);
  const json empty = json::parse(service::stats_json({}));
  CHECK(empty["tiers"] == json::array());
  CHECK(empty["workers"] == json::array());
  CHECK(empty["store_degraded"] == "");
}

TEST_CASE("troupe api: text that is not UTF-8 in the stats is replaced, not an exception") {
  messages::StatsFields s;
  s.model = std::string("qwen\xff");
  s.store_degraded = std::string("disk \xc3");
  std::string out;
  REQUIRE_NOTHROW(out = service::stats_json(s));
  const json j = json::parse(out);
  CHECK(j["model"] == "qwen\xef\xbf\xbd");  // U+FFFD
  CHECK(j["store_degraded"].get<std::string>().rfind("disk ", 0) == 0);
}
