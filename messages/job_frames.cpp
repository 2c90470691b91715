#include "messages/job_frames.h"

#include <vector>

namespace troupe::messages {
namespace {

flatbuffers::Offset<wire::JobSummary> build_summary(flatbuffers::FlatBufferBuilder& fbb, const JobSummaryFields& j) {
  const auto id = fbb.CreateString(j.job_id);
  const auto owner = j.owner.empty() ? 0 : fbb.CreateString(j.owner);
  const auto note = j.annotation.empty() ? 0 : fbb.CreateString(j.annotation);
  return wire::CreateJobSummary(fbb, id, j.state, j.items, j.finished_items, j.completion_tokens, j.created_ms,
                                j.updated_ms, owner, note, j.failed_items);
}

Bytes job_id_request(uint64_t id, wire::RequestBody type, std::string_view job_id) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto jid = fbb.CreateString(job_id.data(), job_id.size());
  switch (type) {
    case wire::RequestBody::JobResults: return request_bytes(id, type, wire::CreateJobResults(fbb, jid).Union(), fbb);
    case wire::RequestBody::CancelJob: return request_bytes(id, type, wire::CreateCancelJob(fbb, jid).Union(), fbb);
    default: return request_bytes(id, wire::RequestBody::JobStatus, wire::CreateJobStatus(fbb, jid).Union(), fbb);
  }
}

}  // namespace

flatbuffers::Offset<wire::JobItemResult> build_job_item(flatbuffers::FlatBufferBuilder& fbb, const JobItemFields& r) {
  const auto text = fbb.CreateString(r.text);
  const auto error = fbb.CreateString(r.error);
  const auto label = r.label.empty() ? 0 : fbb.CreateString(r.label);
  return wire::CreateJobItemResult(fbb, r.index, text, r.finish_reason, r.prompt_tokens, r.completion_tokens, error,
                                   r.validated, label, r.check, r.retried);
}

JobCheckFields read_job_check(const wire::JobCheck* c) {
  if (!c) return {};
  return {c->kind(), c->text() ? c->text()->str() : std::string()};
}

flatbuffers::Offset<wire::JobCheck> build_job_check(flatbuffers::FlatBufferBuilder& fbb, const JobCheckFields& c) {
  if (c.kind == wire::JobCheckKind::none) return 0;
  return wire::CreateJobCheck(fbb, c.kind, fbb.CreateString(c.text));
}

Bytes submit_job_request(uint64_t id, std::span<const std::string> items, std::string_view item_template,
                         const SamplingFields& s, wire::Priority priority, const JobCheckFields& check) {
  size_t bytes = 256 + item_template.size() + check.text.size();
  for (const auto& i : items) bytes += i.size() + 8;
  flatbuffers::FlatBufferBuilder fbb(bytes);
  std::vector<flatbuffers::Offset<flatbuffers::String>> list;
  for (const auto& i : items) list.push_back(fbb.CreateString(i));
  const auto v = fbb.CreateVector(list.data(), list.size());
  const auto t = fbb.CreateString(item_template.data(), item_template.size());
  const auto sampling = build_sampling(fbb, s);
  const auto c = build_job_check(fbb, check);
  return request_bytes(id, wire::RequestBody::SubmitJob,
                       wire::CreateSubmitJob(fbb, v, t, sampling, priority, 0, 0, c).Union(), fbb);
}

Bytes submit_requests_job(uint64_t id, std::span<const std::string> labels, std::span<const Bytes> requests,
                          std::string_view annotation, wire::Priority priority, const JobCheckFields& check) {
  size_t bytes = 256 + annotation.size();
  for (const auto& l : labels) bytes += l.size() + 8;
  for (const auto& r : requests) bytes += r.size() + 16;
  flatbuffers::FlatBufferBuilder fbb(bytes);
  std::vector<flatbuffers::Offset<flatbuffers::String>> list;
  for (const auto& l : labels) list.push_back(fbb.CreateString(l));
  const auto v = fbb.CreateVector(list.data(), list.size());
  std::vector<flatbuffers::Offset<wire::Blob>> blobs;
  for (const auto& r : requests)
    blobs.push_back(wire::CreateBlob(fbb, fbb.CreateVector(reinterpret_cast<const uint8_t*>(r.data()), r.size())));
  const auto rv = fbb.CreateVector(blobs.data(), blobs.size());
  const auto note = fbb.CreateString(annotation.data(), annotation.size());
  const auto c = build_job_check(fbb, check);
  return request_bytes(id, wire::RequestBody::SubmitJob,
                       wire::CreateSubmitJob(fbb, v, 0, 0, priority, rv, note, c).Union(), fbb);
}

Bytes job_status_request(uint64_t id, std::string_view job_id) { return job_id_request(id, wire::RequestBody::JobStatus, job_id); }
Bytes job_results_request(uint64_t id, std::string_view job_id) { return job_id_request(id, wire::RequestBody::JobResults, job_id); }
Bytes cancel_job_request(uint64_t id, std::string_view job_id) { return job_id_request(id, wire::RequestBody::CancelJob, job_id); }
Bytes list_jobs_request(uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return request_bytes(id, wire::RequestBody::ListJobs, wire::CreateListJobs(fbb).Union(), fbb);
}

Bytes job_accepted_response(uint64_t id, const JobSummaryFields& job) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto s = build_summary(fbb, job);
  return response_bytes(id, wire::ResponseBody::JobAccepted, wire::CreateJobAccepted(fbb, s).Union(), fbb);
}

Bytes job_reply_response(uint64_t id, const JobSummaryFields& job, std::span<const JobItemFields> results) {
  size_t bytes = 256;
  for (const auto& r : results) bytes += r.text.size() + r.error.size() + r.label.size() + 48;
  flatbuffers::FlatBufferBuilder fbb(bytes);
  const auto s = build_summary(fbb, job);
  std::vector<flatbuffers::Offset<wire::JobItemResult>> list;
  for (const auto& r : results) list.push_back(build_job_item(fbb, r));
  const auto v = results.empty() ? 0 : fbb.CreateVector(list.data(), list.size());
  return response_bytes(id, wire::ResponseBody::JobReply, wire::CreateJobReply(fbb, s, v).Union(), fbb);
}

Bytes job_list_response(uint64_t id, std::span<const JobSummaryFields> jobs) {
  flatbuffers::FlatBufferBuilder fbb(128 + 96 * jobs.size());
  std::vector<flatbuffers::Offset<wire::JobSummary>> list;
  for (const auto& j : jobs) list.push_back(build_summary(fbb, j));
  const auto v = fbb.CreateVector(list.data(), list.size());
  return response_bytes(id, wire::ResponseBody::JobList, wire::CreateJobList(fbb, v).Union(), fbb);
}

Bytes job_event(wire::JobEventKind kind, const JobSummaryFields& job, const JobItemFields* item, double tokens_per_second) {
  flatbuffers::FlatBufferBuilder fbb(256 + (item ? item->text.size() : 0));
  const auto s = build_summary(fbb, job);
  const auto i = item ? build_job_item(fbb, *item) : 0;
  fbb.Finish(wire::CreateJobEvent(fbb, kind, s, i, tokens_per_second));
  return finish_bytes(fbb);
}

JobSummaryFields read_job_summary(const wire::JobSummary* j) {
  JobSummaryFields f;
  if (!j) return f;
  if (j->job_id()) f.job_id = j->job_id()->str();
  f.state = j->state();
  f.items = j->items();
  f.finished_items = j->finished_items();
  f.completion_tokens = j->completion_tokens();
  f.created_ms = j->created_ms();
  f.updated_ms = j->updated_ms();
  if (j->owner()) f.owner = j->owner()->str();
  if (j->annotation()) f.annotation = j->annotation()->str();
  f.failed_items = j->failed_items();
  return f;
}

JobItemFields read_job_item(const wire::JobItemResult* r) {
  JobItemFields f;
  if (!r) return f;
  f.index = r->index();
  if (r->text()) f.text = r->text()->str();
  f.finish_reason = r->finish_reason();
  f.validated = r->validated();
  f.prompt_tokens = r->prompt_tokens();
  f.completion_tokens = r->completion_tokens();
  if (r->error()) f.error = r->error()->str();
  if (r->label()) f.label = r->label()->str();
  f.check = r->check();
  f.retried = r->retried();
  return f;
}

const wire::JobEvent* check_job_event(std::string_view text) {
  const auto* data = reinterpret_cast<const uint8_t*>(text.data());
  flatbuffers::Verifier verifier(data, text.size(), flatbuffers::Verifier::Options{});
  if (text.size() < sizeof(flatbuffers::uoffset_t) || !verifier.VerifyBuffer<wire::JobEvent>(nullptr)) return nullptr;
  return flatbuffers::GetRoot<wire::JobEvent>(data);
}

}  // namespace troupe::messages
