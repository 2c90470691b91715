// The Files and Batch translation (service/openai_batch.h): multipart
// uploads, a batch's input lines checked one by one, the batch object from a
// job, and its output and error files from the job's results.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "messages/client_validation.h"
#include "service/openai_batch.h"

using namespace troupe;
using nlohmann::json;

namespace {

const std::vector<std::string> kModels{"m"};

std::string line(const std::string& id, const std::string& content, const std::string& url = "/v1/chat/completions") {
  return json{{"custom_id", id}, {"method", "POST"}, {"url", url},
              {"body", {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 5}}}}
      .dump();
}

service::ApiError lines_error(const std::string& jsonl, uint32_t max_lines = 100) {
  auto r = service::read_batch_lines(jsonl, "/v1/chat/completions", kModels, 4096, max_lines);
  REQUIRE(std::holds_alternative<service::ApiError>(r));
  return std::get<service::ApiError>(r);
}

}  // namespace

TEST_CASE("a multipart upload gives its fields, and a malformed one is refused") {
  const std::string body =
      "--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
      "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\n{\"a\": 1}\r\n--not the end\n\r\n--XyZ--\r\n";
  auto r = service::read_multipart("multipart/form-data; boundary=XyZ", body);
  REQUIRE(std::holds_alternative<std::map<std::string, service::FormField>>(r));
  const auto& f = std::get<0>(r);
  CHECK(f.at("purpose").data == "batch");
  CHECK(f.at("file").filename == "a.jsonl");
  CHECK(f.at("file").data == "{\"a\": 1}\r\n--not the end\n");
  CHECK(std::holds_alternative<std::map<std::string, service::FormField>>(
      service::read_multipart("multipart/form-data; boundary=\"XyZ\"", body)));
  for (const auto& [type, bad] : std::vector<std::pair<std::string, std::string>>{
           {"application/json", body},
           {"multipart/form-data", body},
           {"multipart/form-data; boundary=XyZ", "no delimiter at all"},
           {"multipart/form-data; boundary=XyZ", "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nopen"},
           {"multipart/form-data; boundary=XyZ", "--XyZ\r\nContent-Disposition: form-data\r\n\r\nx\r\n--XyZ--"},
           {"multipart/form-data; boundary=XyZ", "--XyZ\r\nno end of headers"},
           {"multipart/form-data; boundary=XyZ", "--XyZjunk"}}) {
    INFO(bad);
    CHECK(std::holds_alternative<service::ApiError>(service::read_multipart(type, bad)));
  }
  CHECK(std::get<service::ApiError>(service::read_multipart("text/plain", "")).status == 415);
}

TEST_CASE("a batch's lines become requests in order, and blank lines are skipped") {
  const std::string jsonl = line("a", "one") + "\n\n" + line("b", "two") + "\r\n";
  auto r = service::read_batch_lines(jsonl, "/v1/chat/completions", kModels, 4096, 10);
  REQUIRE(std::holds_alternative<service::BatchLines>(r));
  const auto& l = std::get<service::BatchLines>(r);
  CHECK(l.custom_ids == std::vector<std::string>{"a", "b"});
  REQUIRE(l.requests.size() == 2);
  messages::Rejection why;
  const auto* req = messages::check_request(l.requests[1], {}, why);
  REQUIRE(req);
  REQUIRE(req->body_type() == wire::RequestBody::ChatTurn);
  CHECK(req->body_as_ChatTurn()->messages()->Get(0)->content()->str() == "two");
  CHECK(req->body_as_ChatTurn()->sampling()->max_tokens() == 5);
  const std::string completion =
      json{{"custom_id", "c"}, {"method", "POST"}, {"url", "/v1/completions"}, {"body", {{"prompt", "x"}}}}.dump();
  auto c = service::read_batch_lines(completion, "/v1/completions", kModels, 4096, 10);
  REQUIRE(std::holds_alternative<service::BatchLines>(c));
  CHECK(messages::check_request(std::get<service::BatchLines>(c).requests[0], {}, why)->body_type() ==
        wire::RequestBody::Generate);
}

TEST_CASE("a batch line that cannot run is refused, naming its line, and nothing else is read") {
  const std::string ok = line("a", "x");
  struct Case {
    std::string jsonl, said;
  };
  for (const Case& c : {Case{ok + "\n{", "line 2: not a JSON object"},
                        Case{ok + "\n" + line("a", "y"), "line 2: custom_id 'a' is not unique"},
                        Case{line("", "x"), "custom_id must be"},
                        Case{line("a", "x", "/v1/completions"), "url must be"},
                        Case{json{{"custom_id", "a"}, {"method", "GET"}, {"url", "/v1/chat/completions"}}.dump(), "method"},
                        Case{json{{"custom_id", "a"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
                                  {"body", {{"messages", json::array()}}}}.dump(), "messages"},
                        Case{json{{"custom_id", "a"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
                                  {"body", {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"stream", true}}}}.dump(),
                             "stream is not supported"},
                        Case{json{{"custom_id", "a"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
                                  {"body", {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"n", 2}}}}.dump(),
                             "n must be 1"},
                        Case{json{{"custom_id", "a"}, {"method", "POST"}, {"url", "/v1/chat/completions"},
                                  {"body", {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"model", "other"}}}}.dump(),
                             "does not exist"},
                        Case{json{{"custom_id", "a"}, {"method", 1}, {"url", "/v1/chat/completions"}}.dump(), "method"},
                        Case{json{{"custom_id", "a"}, {"method", "POST"}, {"url", {1}}}.dump(), "url must be"},
                        Case{"\n\n", "holds no request"}}) {
    INFO(c.jsonl);
    const service::ApiError e = lines_error(c.jsonl);
    CHECK(e.status == 400);
    CHECK(e.param == "input_file_id");
    CHECK(e.message.find(c.said) != std::string::npos);
  }
  CHECK(lines_error(ok + "\n" + line("b", "y") + "\n" + line("c", "z"), 2).message.find("line 3: a batch holds at most 2") !=
        std::string::npos);
}

TEST_CASE("a batch object shows its job: counts, files, times, metadata, and its files are its results as JSONL") {
  std::string input;
  auto note = service::batch_annotation(R"({"input_file_id":"file-1","endpoint":"/v1/chat/completions",
                                            "completion_window":"24h","metadata":{"k":"v"}})",
                                        input);
  REQUIRE(std::holds_alternative<std::string>(note));
  CHECK(input == "file-1");
  messages::JobSummaryFields job;
  job.job_id = "job-1";
  job.items = 3, job.finished_items = 2, job.failed_items = 1;
  job.created_ms = 10000, job.updated_ms = 20000;
  job.annotation = std::get<std::string>(note);
  CHECK(service::is_batch(job));
  json b = json::parse(service::batch_object(job));
  CHECK(b["id"] == "batch_job-1");
  CHECK(service::job_of_batch(b["id"].get<std::string>()) == "job-1");
  CHECK(b["status"] == "in_progress");
  CHECK(b["output_file_id"].is_null());
  CHECK(b["request_counts"] == json{{"total", 3}, {"completed", 1}, {"failed", 1}});
  CHECK(b["metadata"]["k"] == "v");
  CHECK(b["created_at"] == 10);
  job.state = wire::JobState::finished, job.finished_items = 3;
  b = json::parse(service::batch_object(job));
  CHECK(b["status"] == "completed");
  CHECK(b["completed_at"] == 20);
  bool errors = true;
  CHECK(service::job_of_output(b["output_file_id"].get<std::string>(), errors) == "job-1");
  CHECK_FALSE(errors);
  CHECK(service::job_of_output(b["error_file_id"].get<std::string>(), errors) == "job-1");
  CHECK(errors);
  CHECK(service::job_of_output("file-abc", errors).empty());

  std::vector<messages::JobItemFields> results(3);
  results[0].index = 0, results[0].label = "a", results[0].text = "hi", results[0].prompt_tokens = 4;
  results[0].completion_tokens = 1;
  results[1].index = 1, results[1].label = "b", results[1].error = "too long";
  results[2].index = 2, results[2].label = "c", results[2].text = "yo", results[2].finish_reason = wire::FinishReason::length;
  const std::string out = service::batch_results(job, results, false, "m");
  const auto first = json::parse(out.substr(0, out.find('\n')));
  CHECK(first["custom_id"] == "a");
  CHECK(first["response"]["status_code"] == 200);
  CHECK(first["response"]["body"]["choices"][0]["message"]["content"] == "hi");
  CHECK(first["response"]["body"]["model"] == "m");
  CHECK(first["response"]["body"]["usage"]["total_tokens"] == 5);
  CHECK(std::count(out.begin(), out.end(), '\n') == 2);
  CHECK(out.find("\"custom_id\":\"c\"") != std::string::npos);
  const json err = json::parse(service::batch_results(job, results, true, "m"));
  CHECK(err["custom_id"] == "b");
  CHECK(err["error"]["message"] == "too long");

  job.annotation = "";
  CHECK_FALSE(service::is_batch(job));
  for (const char* bad : {R"({"endpoint":"/v1/chat/completions","completion_window":"24h"})",
                          R"({"input_file_id":"f","endpoint":"/v1/embeddings","completion_window":"24h"})",
                          R"({"input_file_id":"f","endpoint":"/v1/completions","completion_window":"1h"})",
                          R"({"input_file_id":"f","endpoint":"/v1/completions","completion_window":"24h","metadata":[1]})",
                          "not json"}) {
    INFO(bad);
    CHECK(std::holds_alternative<service::ApiError>(service::batch_annotation(bad, input)));
  }
}
