// The Files and Batch APIs' routes of the HTTP gateway (service/openai_batch.h
// translates; files and jobs live in the store and the job actor).
#include "gateways/http_gateway.h"

#include <functional>

#include <nlohmann/json.hpp>

#include "gateways/http_answers.h"
#include "messages/client_validation.h"
#include "messages/file_frames.h"
#include "messages/job_frames.h"
#include "service/openai_batch.h"

namespace troupe::gateways {

namespace {

// The answer's body when it is one of `type`; otherwise (an Error, none) the
// HTTP error it makes, in `error`.
const wire::Response* answered(const std::string& frame, wire::ResponseBody type, service::ApiError& error) {
  const auto* r = frame.empty() ? nullptr : messages::check_response(frame);
  if (r && r->body_type() == type) return r;
  if (!r) error = service::ApiError{504, "the server did not answer in time", "", "timeout"};
  else if (const auto* e = r->body_as_Error())
    error = service::api_error(e->code(), e->message() ? e->message()->str() : "");
  else error = service::ApiError{500, "an unexpected answer", "", "internal"};
  return nullptr;
}
// The answer points into the frame: never a temporary's.
const wire::Response* answered(std::string&& frame, wire::ResponseBody type, service::ApiError& error) = delete;

}  // namespace

// POST /v1/files: a multipart upload (purpose batch), stored before it is answered.
int HttpGateway::upload(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client) {
  auto form = service::read_multipart(req.header("Content-Type"), req.body);
  if (auto* e = std::get_if<service::ApiError>(&form)) return send_error(res, *e);
  auto& fields = std::get<0>(form);
  const auto purpose = fields.find("purpose"), file = fields.find("file");
  if (purpose == fields.end() || purpose->second.data != "batch")
    return send_error(res, service::ApiError{400, "troupe stores files for batches: purpose must be batch", "purpose",
                                             "invalid_field"});
  if (file == fields.end() || file->second.data.empty())
    return send_error(res, service::ApiError{400, "the upload has no file, or an empty one", "file", "invalid_field"});
  // The frame that stores it must fit the server's message limit, as the HTTP body did.
  if (file->second.data.size() + 1024 > options_.limits.max_message_bytes)
    return send_error(res, service::ApiError{413, "the file has " + std::to_string(file->second.data.size()) +
                                                     " bytes; this server stores files of at most " +
                                                     std::to_string(options_.limits.max_message_bytes - 1024),
                                             "file", "too_long"});
  service::ApiError error;
  const std::string frame = ask(messages::put_file_request(1, "batch", file->second.filename, file->second.data), client);
  const auto* r = answered(frame, wire::ResponseBody::FileInfo, error);
  if (!r) return send_error(res, error);
  res.send(200, "application/json", service::file_object(messages::read_file_info(r->body_as_FileInfo())));
  return 200;
}

// POST /v1/batches: the input file read and every line checked, then one durable job.
int HttpGateway::create_batch(const messages::HttpRequest& req, messages::HttpResponder& res, const std::string& client) {
  if (draining_) return send_error(res, service::api_error(wire::ErrorCode::shutting_down, "the server is draining"));
  std::string input;
  auto note = service::batch_annotation(req.body, input);
  if (auto* e = std::get_if<service::ApiError>(&note)) return send_error(res, *e);
  service::ApiError error;
  const std::string frame = ask(messages::get_file_request(1, input, true), client);
  const auto* r = answered(frame, wire::ResponseBody::FileInfo, error);
  if (!r) {
    error.param = "input_file_id";
    return send_error(res, error);
  }
  const auto* data = r->body_as_FileInfo()->data();
  const std::string_view jsonl = data ? std::string_view(reinterpret_cast<const char*>(data->data()), data->size()) : "";
  const std::string endpoint = nlohmann::json::parse(std::get<std::string>(note))["endpoint"];
  auto lines = service::read_batch_lines(jsonl, endpoint, options_.models, options_.limits.max_tokens,
                                         options_.limits.max_job_items);
  if (auto* e = std::get_if<service::ApiError>(&lines)) return send_error(res, *e);
  const auto& l = std::get<service::BatchLines>(lines);
  const messages::Bytes submit = messages::submit_requests_job(1, l.custom_ids, l.requests, std::get<std::string>(note));
  if (submit.size() > options_.limits.max_message_bytes)
    return send_error(res, service::ApiError{413, "the batch's requests take " + std::to_string(submit.size()) +
                                                      " bytes; at most " +
                                                      std::to_string(options_.limits.max_message_bytes),
                                             "input_file_id", "too_long"});
  const std::string submitted = ask(submit, client);
  const auto* accepted = answered(submitted, wire::ResponseBody::JobAccepted, error);
  if (!accepted) return send_error(res, error);
  res.send(200, "application/json", service::batch_object(messages::read_job_summary(accepted->body_as_JobAccepted()->job())));
  return 200;
}

// An output or error file: the batch's stored results, as JSONL.
int HttpGateway::batch_file(const std::string& job, bool errors, messages::HttpResponder& res, const std::string& client) {
  service::ApiError error;
  const std::string results_frame = ask(messages::job_results_request(1, job), client);
  const auto* r = answered(results_frame, wire::ResponseBody::JobReply, error);
  if (!r) return send_error(res, error);
  const auto summary = messages::read_job_summary(r->body_as_JobReply()->job());
  std::vector<messages::JobItemFields> results;
  if (const auto* list = r->body_as_JobReply()->results())
    for (const auto* x : *list) results.push_back(messages::read_job_item(x));
  if (!service::is_batch(summary)) return send_error(res, service::ApiError{404, "no such file", "", "not_found"});
  res.send(200, "application/jsonl", service::batch_results(summary, results, errors, options_.models.empty() ? "" : options_.models.front()));
  return 200;
}

int HttpGateway::batch_api(const messages::HttpRequest& q, messages::HttpResponder& r, const std::string& client) {
  const std::string& path = q.path;
  const bool get = q.method == "GET", post = q.method == "POST", del = q.method == "DELETE";
  service::ApiError error;
  // A job's answer as the batch it is (a plain job is no batch).
  auto batch_answer = [&](const std::string& frame, wire::ResponseBody type) {
    const auto* a = answered(frame, type, error);
    if (!a) return send_error(r, error);
    const auto job = messages::read_job_summary(type == wire::ResponseBody::JobReply ? a->body_as_JobReply()->job()
                                                                                       : a->body_as_JobAccepted()->job());
    if (!service::is_batch(job)) return send_error(r, service::ApiError{404, "no such batch", "", "not_found"});
    r.send(200, "application/json", service::batch_object(job));
    return 200;
  };
  // Asks, and answers 200 with what `body` makes of the answer (else the answer's error).
  const auto reply = [&](const messages::Bytes& request, wire::ResponseBody type, const char* content_type,
                         const std::function<std::string(const wire::Response&)>& body) {
    const std::string frame = ask(request, client);
    const auto* a = answered(frame, type, error);
    if (!a) return send_error(r, error);
    r.send(200, content_type, body(*a));
    return 200;
  };
  using Body = wire::ResponseBody;
  if (path == "/v1/files") {
    if (post) return upload(q, r, client);
    if (!get) return 0;
    return reply(messages::list_files_request(1), Body::FileList, "application/json",
                 [](const wire::Response& a) { return service::file_list(*a.body_as_FileList()); });
  }
  if (const std::string id = path_id(path, "/v1/files/", "/content"); !id.empty() && get) {
    bool errors = false;
    if (const std::string job = service::job_of_output(id, errors); !job.empty()) return batch_file(job, errors, r, client);
    return reply(messages::get_file_request(1, id, true), Body::FileInfo, "application/octet-stream",
                 [](const wire::Response& a) {
                   const auto* data = a.body_as_FileInfo()->data();
                   return data ? std::string(data->begin(), data->end()) : std::string();
                 });
  }
  if (const std::string id = path_id(path, "/v1/files/"); !id.empty() && del)
    return reply(messages::delete_file_request(1, id), Body::Ack, "application/json", [&](const wire::Response&) {
      return nlohmann::json{{"id", id}, {"object", "file"}, {"deleted", true}}.dump();
    });
  if (const std::string id = path_id(path, "/v1/files/"); !id.empty() && get)
    return reply(messages::get_file_request(1, id, false), Body::FileInfo, "application/json",
                 [](const wire::Response& a) { return service::file_object(messages::read_file_info(a.body_as_FileInfo())); });
  if (path == "/v1/batches") {
    if (post) return create_batch(q, r, client);
    if (!get) return 0;
    return reply(messages::list_jobs_request(1), Body::JobList, "application/json",
                 [](const wire::Response& a) { return service::batch_list(*a.body_as_JobList()); });
  }
  if (const std::string id = path_id(path, "/v1/batches/", "/cancel"); !id.empty() && post) {
    const std::string job = service::job_of_batch(id);
    if (job.empty()) return send_error(r, service::ApiError{404, "no such batch", "", "not_found"});
    return batch_answer(ask(messages::cancel_job_request(1, job), client), wire::ResponseBody::JobReply);
  }
  if (const std::string id = path_id(path, "/v1/batches/"); !id.empty() && get) {
    const std::string job = service::job_of_batch(id);
    if (job.empty()) return send_error(r, service::ApiError{404, "no such batch", "", "not_found"});
    return batch_answer(ask(messages::job_status_request(1, job), client), wire::ResponseBody::JobReply);
  }
  return 0;
}

}  // namespace troupe::gateways
