// Batch jobs' decisions: stored before accepted, items in flight up to the
// limit, each result stored before its event, retries that are not the
// item's fault, and cancellation.
#include <catch2/catch.hpp>

#include "messages/client_frames.h"
#include "service/batch_jobs.h"
#include "tests/service/harness.h"

using namespace troupe;
using namespace troupe::service;

namespace {

BatchJobs make_jobs(int32_t in_flight = 2, SpeculationDefault speculation = SpeculationDefault::every(SpeculationMode::off)) {
  BatchJobsConfig c;
  c.speculation = speculation;
  c.max_draft = 6;
  c.tokenizer = test::synthetic_tokenizer();
  c.max_context = 512;
  c.max_in_flight = in_flight;
  int64_t t = 0;
  c.clock = [t]() mutable { return t += 1000000; };
  c.unix_clock = [] { return int64_t{1700000000000}; };
  return BatchJobs(c);
}

JobSubmission submission(int n_items) {
  JobSubmission s;
  s.peer = "client";
  s.client_id = 9;
  for (int i = 0; i < n_items; ++i) s.items.push_back("paper " + std::to_string(i));
  s.item_template = "Summarize: {item}";
  s.sampling.max_tokens = 4;
  return s;
}

// Stores what is asked and answers the item requests as a scheduler would.
void finish_all(BatchJobs& jobs, JobWork& w, std::vector<std::string>& events) {
  for (int round = 0; round < 100 && (!w.admits.empty() || !w.results.empty()); ++round) {
    for (const auto& [topic, e] : w.events) events.push_back(topic);
    std::vector<AdmitRequest> admits = std::move(w.admits);
    std::vector<JobWork::Result> results = std::move(w.results);
    for (const auto& r : results) jobs.stored(r.job.id, r.result, "");
    for (const auto& a : admits) {
      jobs.on_item(a.client_id, messages::tokens_response(a.client_id, "sum", {}));
      messages::DoneFields d;
      d.reason = wire::FinishReason::length;
      d.completion_tokens = 1;
      jobs.on_item(a.client_id, messages::done_response(a.client_id, d));
    }
    w = jobs.take();
  }
  for (const auto& [topic, e] : w.events) events.push_back(topic);
}

}  // namespace

TEST_CASE("a job is accepted only once stored, and its items run as the server's own requests, a few at a time") {
  BatchJobs jobs = make_jobs(2);
  jobs.load({});
  jobs.submit(submission(5));
  JobWork w = jobs.take();
  REQUIRE(w.creates.size() == 1);
  CHECK(w.replies.empty());  // not yet: the store has not confirmed
  const persistence::JobRecord job = w.creates[0].job;
  CHECK(job.items.size() == 5);
  jobs.created(job, "client", 9, "");
  w = jobs.take();
  REQUIRE(w.replies.size() == 1);
  CHECK(messages::check_response(w.replies[0].bytes)->body_type() == wire::ResponseBody::JobAccepted);
  REQUIRE(w.admits.size() == 2);
  CHECK(is_internal_peer(w.admits[0].peer));
  CHECK(w.admits[0].priority == Priority::batch);
  std::vector<std::string> events;
  finish_all(jobs, w, events);
  CHECK(std::count(events.begin(), events.end(), job.id) == 6);  // 5 items, then the job
  jobs.query("client", 10, JobQuery::results, job.id);
  w = jobs.take();
  const auto* reply = messages::check_response(w.replies.at(0).bytes)->body_as_JobReply();
  REQUIRE(reply);
  CHECK(reply->job()->state() == wire::JobState::finished);
  CHECK(reply->results()->size() == 5);
}

TEST_CASE("a job that could not be stored is refused and never runs") {
  BatchJobs jobs = make_jobs();
  jobs.load({});
  jobs.submit(submission(2));
  JobWork w = jobs.take();
  jobs.created(w.creates[0].job, "client", 9, "disk full");
  w = jobs.take();
  CHECK(messages::check_response(w.replies.at(0).bytes)->body_as_Error()->code() == wire::ErrorCode::storage_failed);
  CHECK(w.admits.empty());
}

TEST_CASE("an item refused for a full queue runs again later, and an item whose result was not stored runs again") {
  BatchJobs jobs = make_jobs(1);
  jobs.load({});
  jobs.submit(submission(1));
  JobWork w = jobs.take();
  jobs.created(w.creates[0].job, "client", 9, "");
  w = jobs.take();
  REQUIRE(w.admits.size() == 1);
  const uint64_t first = w.admits[0].client_id;
  jobs.on_item(first, messages::error_response(first, wire::ErrorCode::queue_full, "full"));
  w = jobs.take();
  CHECK(w.retry_after_ms > 0);
  CHECK(w.results.empty());
  jobs.retry();
  w = jobs.take();
  REQUIRE(w.admits.size() == 1);
  const uint64_t second = w.admits[0].client_id;
  messages::DoneFields d;
  d.reason = wire::FinishReason::stop;
  jobs.on_item(second, messages::done_response(second, d));
  w = jobs.take();
  REQUIRE(w.results.size() == 1);
  jobs.stored(w.results[0].job.id, w.results[0].result, "I/O error");
  w = jobs.take();
  CHECK(w.retry_after_ms > 0);
  jobs.retry();
  CHECK(jobs.take().admits.size() == 1);
}

TEST_CASE("a stored job resumes with exactly its unfinished items, and queries before loading wait for it") {
  BatchJobs jobs = make_jobs(8);
  jobs.query("client", 1, JobQuery::list, "");
  CHECK(jobs.take().replies.empty());
  persistence::JobRecord stored;
  stored.id = "job-1";
  stored.items = {"a", "b", "c"};
  stored.results[1] = messages::JobItemFields{1, "done", wire::FinishReason::stop, 1, 1, ""};
  jobs.load({stored});
  JobWork w = jobs.take();
  CHECK(w.replies.size() == 1);  // the early query, answered
  CHECK(w.admits.size() == 2);
  CHECK(w.events.size() == 1);   // job_resumed
}

TEST_CASE("a resumed job's first item brings the finished items' outputs for its suffix tree, once") {
  BatchJobs jobs = make_jobs(1, SpeculationDefault::every(SpeculationMode::suffix));
  persistence::JobRecord stored;
  stored.id = "job-2";
  stored.item_template = "Summarize: {item}";
  stored.items = {"a", "b", "c", "d"};
  stored.results[0] = messages::JobItemFields{0, "first summary", wire::FinishReason::stop, 1, 2, ""};
  stored.results[2] = messages::JobItemFields{2, "third summary", wire::FinishReason::stop, 1, 2, ""};
  jobs.load({stored});
  JobWork w = jobs.take();
  REQUIRE(w.admits.size() == 1);
  // Template items take the server's speculation.
  CHECK(w.admits[0].speculation == SpeculationMode::suffix);
  CHECK(w.admits[0].max_draft == 6);
  const auto tok = test::synthetic_tokenizer();
  const std::vector<std::vector<int32_t>> want = {tok->encode("first summary", false, false),
                                                  tok->encode("third summary", false, false)};
  CHECK(w.admits[0].suffix_seed == want);
  // The next item finds the tree built: it brings nothing.
  jobs.on_item(w.admits[0].client_id, messages::done_response(w.admits[0].client_id, {}));
  w = jobs.take();
  REQUIRE(w.admits.size() == 1);
  CHECK(w.admits[0].suffix_seed.empty());
  // Without suffix drafting nothing is tokenized for it.
  BatchJobs plain = make_jobs(1, SpeculationDefault::every(SpeculationMode::ngram));
  plain.load({stored});
  w = plain.take();
  REQUIRE(w.admits.size() == 1);
  CHECK(w.admits[0].speculation == SpeculationMode::ngram);
  CHECK(w.admits[0].suffix_seed.empty());
}

TEST_CASE("under the server's default a greedy job's items speculate with auto, a sampled job's do not") {
  for (const float temperature : {0.0f, 0.7f}) {
    BatchJobs jobs = make_jobs(1, SpeculationDefault{});
    persistence::JobRecord stored;
    stored.id = "job-t";
    stored.item_template = "Summarize: {item}";
    stored.items = {"a"};
    stored.sampling.temperature = temperature;
    jobs.load({stored});
    const JobWork w = jobs.take();
    REQUIRE(w.admits.size() == 1);
    CHECK(w.admits[0].speculation == (temperature == 0 ? SpeculationMode::automatic : SpeculationMode::off));
  }
}

TEST_CASE("cancelling a job stores it cancelled first, then cancels its items in flight") {
  BatchJobs jobs = make_jobs(2);
  jobs.load({});
  jobs.submit(submission(4));
  JobWork w = jobs.take();
  const persistence::JobRecord job = w.creates[0].job;
  jobs.created(job, "client", 9, "");
  w = jobs.take();
  REQUIRE(w.admits.size() == 2);
  jobs.query("client", 11, JobQuery::cancel, job.id);
  w = jobs.take();
  REQUIRE(w.cancel_writes.size() == 1);
  CHECK(w.cancel_writes[0].job.state == wire::JobState::cancelled);
  CHECK(w.cancels.empty());
  jobs.cancel_stored(w.cancel_writes[0].job, "client", 11, "");
  w = jobs.take();
  CHECK(w.cancels.size() == 2);
  CHECK(messages::check_response(w.replies.at(0).bytes)->body_as_JobReply()->job()->state() == wire::JobState::cancelled);
  jobs.query("client", 12, JobQuery::status, "no-such-job");
  w = jobs.take();
  CHECK(messages::check_response(w.replies.at(0).bytes)->body_as_Error()->code() == wire::ErrorCode::unknown_job);
}

TEST_CASE("a job with an item that does not fit the context is refused as too_long and nothing is stored") {
  BatchJobsConfig c;
  c.tokenizer = test::synthetic_tokenizer();
  c.max_context = 8;
  BatchJobs jobs(c);
  jobs.load({});
  jobs.submit(submission(3));
  JobWork w = jobs.take();
  CHECK(w.creates.empty());
  CHECK(w.admits.empty());
  const auto* e = messages::check_response(w.replies.at(0).bytes)->body_as_Error();
  REQUIRE(e);
  CHECK(e->code() == wire::ErrorCode::too_long);
  CHECK_THAT(e->message()->str(), Catch::Contains("SubmitJob.items[0]") && Catch::Contains("the context holds 8") &&
                                      Catch::Contains("nothing was stored"));
}

TEST_CASE("a stored job whose items cannot run fails them with the reason, once, and never expands an oversized prompt") {
  BatchJobsConfig c;
  c.tokenizer = test::synthetic_tokenizer();
  c.max_context = 8;
  c.max_prompt_bytes = 1 << 20;
  BatchJobs jobs(c);
  persistence::JobRecord stored;  // as a store written before the gate bounded expansions holds it
  stored.id = "job-old";
  stored.items = {std::string(100 << 10, 'x'), "tiny"};
  for (int i = 0; i < 2000; ++i) stored.item_template += "{item}";
  CHECK(stored.prompt_bytes(0) == size_t{2000} * (100 << 10));  // 200 MB, counted, never built
  jobs.load({stored});
  JobWork w = jobs.take();
  CHECK(w.admits.empty());
  REQUIRE(w.results.size() == 2);
  CHECK_THAT(w.results[0].result.error, Catch::Contains("expands to 204800000 bytes; at most 1048576"));
  CHECK_THAT(w.results[1].result.error, Catch::Contains("the context holds 8"));
  jobs.stored(w.results[0].job.id, w.results[0].result, "");
  jobs.stored(w.results[1].job.id, w.results[1].result, "");
  w = jobs.take();
  CHECK(w.admits.empty());  // not retried
  CHECK(w.results.empty());
}

TEST_CASE("an item's prompt length is counted without building it") {
  persistence::JobRecord j;
  j.items = {"abc", ""};
  CHECK(j.prompt_bytes(0) == 3);
  j.item_template = "Summarize {item} and {item}.";
  CHECK(j.prompt_bytes(0) == j.prompt(0).size());
  CHECK(j.prompt_bytes(1) == j.prompt(1).size());
  j.item_template = "no placeholder";
  CHECK(j.prompt_bytes(0) == j.prompt(0).size());
}

TEST_CASE("with a damaged store, a job it could not read is a storage error, not an unknown job") {
  BatchJobs jobs = make_jobs();
  persistence::JobRecord readable;
  readable.id = "job-ok";
  readable.items = {"a"};
  readable.state = wire::JobState::finished;
  jobs.load({readable}, "cannot read the store in d: Corruption: block checksum mismatch");
  jobs.take();
  jobs.query("client", 1, JobQuery::status, "job-lost");
  const JobWork held1 = jobs.take();
  const auto* e = messages::check_response(held1.replies.at(0).bytes)->body_as_Error();
  REQUIRE(e);
  CHECK(e->code() == wire::ErrorCode::storage_failed);
  CHECK_THAT(e->message()->str(), Catch::Contains("job 'job-lost' is not among the jobs the store could read") &&
                                      Catch::Contains("checksum mismatch") && Catch::Contains("troupe store check"));
  jobs.query("client", 2, JobQuery::status, "job-ok");
  CHECK(messages::check_response(jobs.take().replies.at(0).bytes)->body_type() == wire::ResponseBody::JobReply);
}

TEST_CASE("ended jobs past max_cached_jobs keep only their summary in memory, and their results are read from the store") {
  BatchJobsConfig c;
  c.tokenizer = test::synthetic_tokenizer();
  c.max_context = 512;
  c.max_cached_jobs = 2;
  c.unix_clock = [] { return int64_t{1700000000000}; };
  BatchJobs jobs(c);
  std::vector<persistence::JobRecord> stored;
  for (int i = 0; i < 5; ++i) {
    persistence::JobRecord j;
    j.id = "job-" + std::to_string(i);
    j.items = {"a", "b"};
    j.state = wire::JobState::finished;
    j.results[0] = messages::JobItemFields{0, "one", wire::FinishReason::stop, 1, 1, ""};
    j.results[1] = messages::JobItemFields{1, "two", wire::FinishReason::stop, 1, 1, ""};
    stored.push_back(j);
  }
  jobs.load(stored);
  jobs.take();
  CHECK(jobs.jobs_in_memory() == 2);
  jobs.query("client", 1, JobQuery::list, "");
  CHECK(messages::check_response(jobs.take().replies.at(0).bytes)->body_as_JobList()->jobs()->size() == 5);
  jobs.query("client", 2, JobQuery::status, "job-0");  // archived: the summary answers
  const JobWork held2 = jobs.take();
  const auto* status = messages::check_response(held2.replies.at(0).bytes)->body_as_JobReply();
  REQUIRE(status);
  CHECK(status->job()->finished_items() == 2);
  jobs.query("client", 3, JobQuery::results, "job-0");
  JobWork w = jobs.take();
  CHECK(w.replies.empty());
  REQUIRE(w.loads.size() == 1);
  CHECK(w.loads[0].job_id == "job-0");
  jobs.loaded(w.loads[0], stored[0], "");
  const JobWork held3 = jobs.take();
  const auto* results = messages::check_response(held3.replies.at(0).bytes)->body_as_JobReply();
  REQUIRE(results);
  CHECK(results->results()->size() == 2);
  jobs.query("client", 4, JobQuery::results, "job-1");
  w = jobs.take();
  jobs.loaded(w.loads.at(0), std::nullopt, "Corruption: block checksum mismatch");
  const JobWork held4 = jobs.take();
  const auto* e = messages::check_response(held4.replies.at(0).bytes)->body_as_Error();
  REQUIRE(e);
  CHECK(e->code() == wire::ErrorCode::storage_failed);
  jobs.query("client", 5, JobQuery::results, "job-4");  // recent: in memory
  CHECK(jobs.take().replies.size() == 1);
}

TEST_CASE("jobs retention deleted answer unknown_job, whether whole in memory or archived, and a running one stays") {
  BatchJobsConfig c;
  c.tokenizer = test::synthetic_tokenizer();
  c.max_context = 512;
  c.max_cached_jobs = 1;
  c.unix_clock = [] { return int64_t{1700000000000}; };
  BatchJobs jobs(c);
  jobs.forget({"job-early"});  // told before the load: not loaded then
  std::vector<persistence::JobRecord> stored;
  for (const char* id : {"job-early", "job-archived", "job-whole", "job-running"}) {
    persistence::JobRecord j;
    j.id = id;
    j.items = {"a"};
    j.state = std::string(id) == "job-running" ? wire::JobState::running : wire::JobState::finished;
    if (j.state == wire::JobState::finished) j.results[0] = messages::JobItemFields{0, "one", wire::FinishReason::stop, 1, 1, ""};
    stored.push_back(j);
  }
  jobs.load(stored);
  jobs.take();
  jobs.forget({"job-archived", "job-whole", "job-running"});
  const auto code = [&](const char* id) {
    jobs.query("client", 1, JobQuery::status, id);
    const JobWork w = jobs.take();
    const auto* r = messages::check_response(w.replies.at(0).bytes);
    return r->body_type() == wire::ResponseBody::Error ? r->body_as_Error()->code() : wire::ErrorCode::none;
  };
  CHECK(code("job-early") == wire::ErrorCode::unknown_job);
  CHECK(code("job-archived") == wire::ErrorCode::unknown_job);
  CHECK(code("job-whole") == wire::ErrorCode::unknown_job);
  CHECK(code("job-running") == wire::ErrorCode::none);
  jobs.query("client", 2, JobQuery::list, "");
  CHECK(messages::check_response(jobs.take().replies.at(0).bytes)->body_as_JobList()->jobs()->size() == 1);
}

TEST_CASE("a stored job still marked running with every result in finishes at load, its final state written") {
  BatchJobs jobs = make_jobs(2);
  persistence::JobRecord stored;
  stored.id = "job-done";
  stored.items = {"a", "b"};
  stored.item_template = "{item}";
  for (int32_t i = 0; i < 2; ++i) {
    messages::JobItemFields r;
    r.index = i;
    r.text = "x";
    stored.results[i] = r;
  }
  jobs.load({stored});
  JobWork w = jobs.take();
  CHECK(w.admits.empty());  // nothing runs again
  REQUIRE(w.headers.size() == 1);
  CHECK(w.headers[0].id == "job-done");
  CHECK(w.headers[0].state == wire::JobState::finished);
  jobs.query("c", 1, JobQuery::status, "job-done");
  JobWork q = jobs.take();
  REQUIRE(q.replies.size() == 1);
  const auto* reply = messages::check_response(q.replies[0].bytes)->body_as_JobReply();
  REQUIRE(reply);
  CHECK(reply->job()->state() == wire::JobState::finished);
}

TEST_CASE("a job of whole requests runs each as the gate reads it, under the job's priority, and labels its results") {
  BatchJobsConfig c;
  c.tokenizer = test::synthetic_tokenizer();
  c.max_context = 512;
  c.max_in_flight = 4;
  c.unix_clock = [] { return int64_t{1700000000000}; };
  std::vector<std::string> read;
  c.read_request = [&read](const std::string& request) -> std::variant<AdmitRequest, std::string> {
    read.push_back(request);
    if (request == "broken") return std::string("the item's prompt has 900 tokens");
    AdmitRequest a;
    a.prompt = {1, 2, 3};
    a.sampling.max_tokens = 7;
    a.priority = Priority::interactive;  // the job's priority wins
    return a;
  };
  BatchJobs jobs(c);
  jobs.load({});
  JobSubmission s;
  s.peer = "client";
  s.client_id = 9;
  s.items = {"first", "second"};
  s.requests = {"request one", "broken"};
  s.annotation = "{\"input_file_id\":\"f\"}";
  jobs.submit(s);
  JobWork w = jobs.take();
  REQUIRE(w.creates.size() == 1);
  CHECK(w.creates[0].job.requests == s.requests);
  CHECK(w.creates[0].job.annotation == s.annotation);
  const std::string id = w.creates[0].job.id;
  jobs.created(w.creates[0].job, "client", 9, "");
  w = jobs.take();
  CHECK(read == s.requests);
  REQUIRE(w.admits.size() == 1);
  CHECK(w.admits[0].prompt == std::vector<int32_t>{1, 2, 3});
  CHECK(w.admits[0].sampling.max_tokens == 7);
  CHECK(w.admits[0].priority == Priority::batch);
  CHECK(is_internal_peer(w.admits[0].peer));
  // The item that cannot run is a result with its error, labelled as the other.
  REQUIRE(w.results.size() == 1);
  CHECK(w.results[0].result.index == 1);
  CHECK(w.results[0].result.label == "second");
  CHECK(w.results[0].result.error == "the item's prompt has 900 tokens");
  std::vector<std::string> events;
  finish_all(jobs, w, events);
  jobs.query("client", 10, JobQuery::results, id);
  w = jobs.take();
  const auto* reply = messages::check_response(w.replies.at(0).bytes)->body_as_JobReply();
  REQUIRE(reply);
  CHECK(reply->job()->state() == wire::JobState::finished);
  CHECK(reply->job()->failed_items() == 1);
  CHECK(reply->job()->annotation()->str() == s.annotation);
  REQUIRE(reply->results()->size() == 2);
  CHECK(reply->results()->Get(0)->label()->str() == "first");
  CHECK(reply->results()->Get(0)->text()->str() == "sum");
}

namespace {

// One item answered: `text`, written by `tier` (a server with tiers names it in Done).
void answer(BatchJobs& jobs, const AdmitRequest& a, const std::string& text, const std::string& tier) {
  jobs.on_item(a.client_id, messages::tokens_response(a.client_id, text, {}));
  messages::DoneFields d;
  d.reason = wire::FinishReason::stop;
  d.completion_tokens = 3;
  if (!tier.empty()) d.tiers = {{tier, 3}};
  jobs.on_item(a.client_id, messages::done_response(a.client_id, d));
}

}  // namespace

TEST_CASE("a checked job: an answer a smaller tier wrote that fails the check is answered again by the next tier, and "
          "the results and tier counts say so") {
  BatchJobsConfig c;
  c.tokenizer = test::synthetic_tokenizer();
  c.max_context = 512;
  c.max_in_flight = 4;
  c.clock = [] { return int64_t{1}; };
  c.unix_clock = [] { return int64_t{1700000000000}; };
  auto tiers = std::make_shared<TierTable>();
  tiers->names = {"mini", "midi", "maxi"};
  tiers->aliases = {{"mini"}, {"midi"}, {"maxi"}};
  c.tiers = tiers;
  BatchJobs jobs(c);
  jobs.load({});
  JobSubmission s = submission(2);
  s.sampling.tier = "small";
  s.check = {wire::JobCheckKind::regex, R"(Answer: \d+)"};
  jobs.submit(s);
  JobWork w = jobs.take();
  REQUIRE(w.creates.size() == 1);
  CHECK(w.creates[0].job.check == s.check);  // stored with the job: a resumed job checks too
  jobs.created(w.creates[0].job, "client", 9, "");
  w = jobs.take();
  REQUIRE(w.admits.size() == 2);
  const AdmitRequest first = w.admits[0], second = w.admits[1];
  CHECK(first.route.tier == 0);
  answer(jobs, first, "Answer: 12", "mini");  // passes
  answer(jobs, second, "I think twelve", "mini");  // fails: the next tier answers it again
  w = jobs.take();
  CHECK(w.check_failures == std::vector<std::string>{"mini"});
  REQUIRE(w.results.size() == 1);
  CHECK(w.results[0].result.check == wire::CheckOutcome::passed);
  CHECK(w.results[0].result.retried == 0);
  REQUIRE(w.admits.size() == 1);
  const AdmitRequest again = w.admits[0];
  CHECK(again.sampling.tier == "midi");
  CHECK(again.route.kind == RouteKind::fixed);
  CHECK(again.route.tier == 1);
  answer(jobs, again, "Still twelve", "midi");  // fails again: the last tier
  w = jobs.take();
  CHECK(w.check_failures == std::vector<std::string>{"midi"});
  REQUIRE(w.admits.size() == 1);
  CHECK(w.admits[0].route.tier == 2);
  answer(jobs, w.admits[0], "Answer: 13", "maxi");
  w = jobs.take();
  REQUIRE(w.results.size() == 1);
  CHECK(w.results[0].result.index == 1);
  CHECK(w.results[0].result.text == "Answer: 13");
  CHECK(w.results[0].result.check == wire::CheckOutcome::passed);
  CHECK(w.results[0].result.retried == 2);
}

TEST_CASE("a checked job: the last tier's failing answer is kept, marked failed, and without tiers it is only marked") {
  for (bool with_tiers : {true, false}) {
    DYNAMIC_SECTION((with_tiers ? "tiers" : "one model")) {
      BatchJobsConfig c;
      c.tokenizer = test::synthetic_tokenizer();
      c.max_context = 512;
      c.clock = [] { return int64_t{1}; };
      c.unix_clock = [] { return int64_t{1700000000000}; };
      if (with_tiers) {
        auto tiers = std::make_shared<TierTable>();
        tiers->names = {"mini", "maxi"};
        tiers->aliases = {{"mini"}, {"maxi"}};
        c.tiers = tiers;
      }
      BatchJobs jobs(c);
      jobs.load({});
      JobSubmission s = submission(1);
      s.check = {wire::JobCheckKind::json_schema, R"({"type": "object", "required": ["title"]})"};
      jobs.submit(s);
      JobWork w = jobs.take();
      jobs.created(w.creates.at(0).job, "client", 9, "");
      w = jobs.take();
      REQUIRE(w.admits.size() == 1);
      answer(jobs, w.admits[0], R"({"name": "x"})", with_tiers ? "maxi" : "");
      w = jobs.take();
      CHECK(w.admits.empty());
      REQUIRE(w.results.size() == 1);
      CHECK(w.results[0].result.check == wire::CheckOutcome::failed);
      CHECK(w.results[0].result.text == R"({"name": "x"})");
      CHECK(w.check_failures == (with_tiers ? std::vector<std::string>{"maxi"} : std::vector<std::string>{}));
    }
  }
}
