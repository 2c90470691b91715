#include "service/openai_batch.h"

#include <set>

#include <nlohmann/json.hpp>

namespace troupe::service {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kBatchPrefix = "batch_";
constexpr std::string_view kOutputPrefix = "file-out-", kErrorPrefix = "file-err-";

// A header's parameter (`boundary=...`, `name="..."`), unquoted.
std::string parameter(std::string_view header, std::string_view key) {
  for (size_t at = 0; (at = header.find(key, at)) != std::string_view::npos; at += key.size()) {
    if (at > 0 && header[at - 1] != ' ' && header[at - 1] != ';') continue;
    if (header.substr(at + key.size(), 1) != "=") continue;
    std::string_view v = header.substr(at + key.size() + 1);
    if (!v.empty() && v.front() == '"') {
      v.remove_prefix(1);
      return std::string(v.substr(0, v.find('"')));
    }
    return std::string(v.substr(0, v.find_first_of("; \t")));
  }
  return {};
}

int64_t seconds(int64_t ms) { return ms / 1000; }

const char* batch_status(const messages::JobSummaryFields& j) {
  switch (j.state) {
    case wire::JobState::finished: return "completed";
    case wire::JobState::cancelled: return "cancelled";
    default: return "in_progress";
  }
}

}  // namespace

std::variant<std::map<std::string, FormField>, ApiError> read_multipart(std::string_view content_type,
                                                                        std::string_view body) {
  if (!content_type.starts_with("multipart/form-data"))
    return ApiError{415, "a file is uploaded as multipart/form-data", "", "invalid_field"};
  const std::string boundary = parameter(content_type, "boundary");
  if (boundary.empty() || boundary.size() > 200) return bad_field("", "the multipart body has no boundary");
  const std::string delimiter = "--" + boundary;
  std::map<std::string, FormField> fields;
  size_t at = body.find(delimiter);
  if (at == std::string_view::npos) return bad_field("", "the multipart body has no part");
  for (;;) {
    at += delimiter.size();
    if (body.substr(at, 2) == "--") return fields;  // the closing delimiter
    if (body.substr(at, 2) != "\r\n") return bad_field("", "a multipart delimiter is not followed by a line end");
    const size_t head_end = body.find("\r\n\r\n", at + 2);
    if (head_end == std::string_view::npos) return bad_field("", "a multipart part has no end to its headers");
    const std::string_view head = body.substr(at + 2, head_end - at - 2);
    const size_t next = body.find("\r\n" + delimiter, head_end + 4);
    if (next == std::string_view::npos) return bad_field("", "a multipart part is not closed");
    std::string name, filename;
    for (size_t line = 0; line < head.size();) {
      const size_t end = std::min(head.find("\r\n", line), head.size());
      const std::string_view h = head.substr(line, end - line);
      if (h.size() > 20 && (h.substr(0, 20) == "Content-Disposition:" || h.substr(0, 20) == "content-disposition:")) {
        name = parameter(h, "name");
        filename = parameter(h, "filename");
      }
      line = end + 2;
    }
    if (name.empty()) return bad_field("", "a multipart part has no name");
    fields[name] = {filename, std::string(body.substr(head_end + 4, next - head_end - 4))};
    at = next + 2;
  }
}

std::string file_object(const messages::FileFields& f) {
  return json{{"id", f.file_id},          {"object", "file"},     {"bytes", f.bytes},
              {"created_at", seconds(f.created_ms)}, {"filename", f.filename}, {"purpose", f.purpose},
              {"status", "processed"},     {"status_details", nullptr}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

std::string list_of(const std::vector<std::string>& objects) {
  std::string data;
  for (const auto& o : objects) data += (data.empty() ? "" : ",") + o;
  return "{\"object\":\"list\",\"data\":[" + data + "],\"has_more\":false}";
}

}  // namespace

std::string file_list(const wire::FileList& files) {
  std::vector<std::string> out;
  if (files.files())
    for (const auto* f : *files.files()) out.push_back(file_object(messages::read_file_info(f)));
  return list_of(out);
}

std::string batch_list(const wire::JobList& jobs) {
  std::vector<std::string> out;
  if (jobs.jobs())
    for (const auto* j : *jobs.jobs())
      if (const auto job = messages::read_job_summary(j); is_batch(job)) out.push_back(batch_object(job));
  return list_of(out);
}

std::variant<BatchLines, ApiError> read_batch_lines(std::string_view jsonl, const std::string& endpoint,
                                                    const std::vector<std::string>& models, int32_t max_tokens,
                                                    uint32_t max_lines) {
  BatchLines out;
  std::set<std::string> seen;
  const bool chat = endpoint == "/v1/chat/completions";
  size_t number = 0;
  for (size_t at = 0; at < jsonl.size();) {
    const size_t end = std::min(jsonl.find('\n', at), jsonl.size());
    const std::string_view text = jsonl.substr(at, end - at);
    at = end + 1;
    ++number;
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank lines are no requests
    const std::string where = "line " + std::to_string(number);
    auto fail = [&](const std::string& why) { return bad_field("input_file_id", "the input file's " + where + ": " + why); };
    if (out.requests.size() >= max_lines)
      return fail("a batch holds at most " + std::to_string(max_lines) + " requests");
    const json line = json::parse(text, nullptr, false);
    if (line.is_discarded() || !line.is_object()) return fail("not a JSON object");
    const auto id = line.find("custom_id");
    if (id == line.end() || !id->is_string() || id->get<std::string>().empty() || id->get<std::string>().size() > 512)
      return fail("custom_id must be a string of 1 to 512 bytes");
    if (!seen.insert(id->get<std::string>()).second)
      return fail("custom_id '" + id->get<std::string>() + "' is not unique");
    if (string_field(line, "method") != "POST") return fail("method must be POST");
    if (string_field(line, "url") != endpoint) return fail("url must be the batch's endpoint, " + endpoint);
    const auto body = line.find("body");
    if (body == line.end() || !body->is_object()) return fail("body must be an object");
    // What a stored result cannot give back is refused, not dropped.
    for (const char* key : {"stream", "logprobs", "tools", "session"})
      if (body->contains(key) && !(*body)[key].is_null() && (*body)[key] != false)
        return fail(std::string(key) + " is not supported in a batch");
    if (body->contains("n") && (*body)["n"] != 1) return fail("n must be 1 in a batch");
    auto parsed = parse_completion(body->dump(), chat, "", models, max_tokens);
    if (auto* e = std::get_if<ApiError>(&parsed)) return fail((e->param.empty() ? "" : e->param + ": ") + e->message);
    out.custom_ids.push_back(id->get<std::string>());
    out.requests.push_back(std::get<CompletionCall>(std::move(parsed)).request);
  }
  if (out.requests.empty()) return bad_field("input_file_id", "the input file holds no request");
  return out;
}

std::variant<std::string, ApiError> batch_annotation(const std::string& text, std::string& input_file_id) {
  const json body = json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return ApiError{400, "the body must be a JSON object", "", "malformed"};
  const auto file = body.find("input_file_id");
  if (file == body.end() || !file->is_string() || file->get<std::string>().empty())
    return bad_field("input_file_id", "input_file_id must name an uploaded file");
  input_file_id = file->get<std::string>();
  const std::string endpoint = string_field(body, "endpoint");
  if (endpoint != "/v1/chat/completions" && endpoint != "/v1/completions")
    return bad_field("endpoint", "endpoint must be /v1/chat/completions or /v1/completions");
  if (string_field(body, "completion_window") != "24h") return bad_field("completion_window", "completion_window must be 24h");
  json metadata = body.contains("metadata") && !body["metadata"].is_null() ? body["metadata"] : json::object();
  if (!metadata.is_object() || metadata.size() > 16) return bad_field("metadata", "metadata must be an object of at most 16 keys");
  return json{{"input_file_id", input_file_id}, {"endpoint", endpoint}, {"completion_window", "24h"},
              {"metadata", metadata}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_batch(const messages::JobSummaryFields& job) { return job.annotation.starts_with("{\"input_file_id\""); }

std::string batch_id(const std::string& job_id) { return std::string(kBatchPrefix) + job_id; }

std::string job_of_batch(std::string_view id) {
  return id.starts_with(kBatchPrefix) ? std::string(id.substr(kBatchPrefix.size())) : std::string();
}

std::string job_of_output(std::string_view file_id, bool& errors) {
  errors = file_id.starts_with(kErrorPrefix);
  if (!errors && !file_id.starts_with(kOutputPrefix)) return {};
  return std::string(file_id.substr(kOutputPrefix.size()));
}

std::string batch_object(const messages::JobSummaryFields& j) {
  const json note = json::parse(j.annotation, nullptr, false);
  const bool ended = j.state != wire::JobState::running;
  const int32_t failed = j.failed_items, done = j.finished_items - j.failed_items;
  const json end_time = seconds(j.updated_ms);
  return json{{"id", batch_id(j.job_id)},
              {"object", "batch"},
              {"endpoint", string_field(note, "endpoint")},
              {"errors", nullptr},
              {"input_file_id", string_field(note, "input_file_id")},
              {"completion_window", "24h"},
              {"status", batch_status(j)},
              {"output_file_id", ended && done > 0 ? json(std::string(kOutputPrefix) + j.job_id) : json()},
              {"error_file_id", ended && failed > 0 ? json(std::string(kErrorPrefix) + j.job_id) : json()},
              {"created_at", seconds(j.created_ms)},
              {"in_progress_at", seconds(j.created_ms)},
              {"expires_at", seconds(j.created_ms) + 86400},
              {"finalizing_at", j.state == wire::JobState::finished ? end_time : json()},
              {"completed_at", j.state == wire::JobState::finished ? end_time : json()},
              {"failed_at", nullptr},
              {"expired_at", nullptr},
              {"cancelling_at", j.state == wire::JobState::cancelled ? end_time : json()},
              {"cancelled_at", j.state == wire::JobState::cancelled ? end_time : json()},
              {"request_counts", {{"total", j.items}, {"completed", done}, {"failed", failed}}},
              {"metadata", note.is_object() && note.contains("metadata") ? note["metadata"] : json::object()}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string batch_results(const messages::JobSummaryFields& j, std::span<const messages::JobItemFields> results,
                          bool errors, const std::string& model) {
  const json note = json::parse(j.annotation, nullptr, false);
  const bool chat = string_field(note, "endpoint") == "/v1/chat/completions";
  std::string out;
  for (const auto& r : results) {
    if (r.error.empty() == errors) continue;
    const std::string id = "batch_req_" + j.job_id + "_" + std::to_string(r.index);
    json line = {{"id", id}, {"custom_id", r.label}};
    if (errors) {
      line["response"] = nullptr;
      line["error"] = {{"code", "invalid_request"}, {"message", r.error}};
    } else {
      json choice = {{"index", 0}, {"finish_reason", finish_name(r.finish_reason)}, {"logprobs", nullptr}};
      if (chat) choice["message"] = {{"role", "assistant"}, {"content", r.text}};
      else choice["text"] = r.text;
      const json body = {{"id", (chat ? "chatcmpl-" : "cmpl-") + j.job_id + "-" + std::to_string(r.index)},
                         {"object", chat ? "chat.completion" : "text_completion"},
                         {"created", seconds(j.updated_ms)},
                         {"model", model},
                         {"choices", json::array({choice})},
                         {"usage", {{"prompt_tokens", r.prompt_tokens},
                                    {"completion_tokens", r.completion_tokens},
                                    {"total_tokens", r.prompt_tokens + r.completion_tokens}}}};
      line["response"] = {{"status_code", 200}, {"request_id", id}, {"body", body}};
      line["error"] = nullptr;
    }
    out += line.dump(-1, ' ', false, json::error_handler_t::replace);
    out += '\n';
  }
  return out;
}

}  // namespace troupe::service
