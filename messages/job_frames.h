#pragma once
// Buffers of batch jobs (messages/client.fbs): SubmitJob → JobAccepted,
// JobStatus / JobResults / CancelJob → JobReply, ListJobs → JobList, and
// the JobEvent published on the event socket.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "messages/client_frames.h"

namespace troupe::messages {

struct JobSummaryFields {
  std::string job_id;
  wire::JobState state = wire::JobState::running;
  int32_t items = 0, finished_items = 0;
  int64_t completion_tokens = 0;
  int64_t created_ms = 0, updated_ms = 0;
  std::string owner;
  std::string annotation;  // SubmitJob.annotation
  int32_t failed_items = 0;
};

struct JobItemFields {
  int32_t index = 0;
  std::string text;
  wire::FinishReason finish_reason = wire::FinishReason::stop;
  int32_t prompt_tokens = 0, completion_tokens = 0;
  std::string error;  // the item could not run; text is empty
  bool validated = false;  // JobItemResult.validated
  std::string label = {};  // a job of requests: the item's label
  wire::CheckOutcome check = wire::CheckOutcome::not_checked;  // JobItemResult.check
  int32_t retried = 0;  // JobItemResult.retried
};

// SubmitJob.check as plain data.
struct JobCheckFields {
  wire::JobCheckKind kind = wire::JobCheckKind::none;
  std::string text;
  bool operator==(const JobCheckFields&) const = default;
};
JobCheckFields read_job_check(const wire::JobCheck* c);
flatbuffers::Offset<wire::JobCheck> build_job_check(flatbuffers::FlatBufferBuilder& fbb, const JobCheckFields& c);

Bytes submit_job_request(uint64_t id, std::span<const std::string> items, std::string_view item_template,
                         const SamplingFields& s, wire::Priority priority = wire::Priority::batch,
                         const JobCheckFields& check = {});
// A job of whole requests (SubmitJob.requests), each under its label.
Bytes submit_requests_job(uint64_t id, std::span<const std::string> labels, std::span<const Bytes> requests,
                          std::string_view annotation, wire::Priority priority = wire::Priority::batch,
                          const JobCheckFields& check = {});
Bytes job_status_request(uint64_t id, std::string_view job_id);
Bytes job_results_request(uint64_t id, std::string_view job_id);
Bytes cancel_job_request(uint64_t id, std::string_view job_id);
Bytes list_jobs_request(uint64_t id);

Bytes job_accepted_response(uint64_t id, const JobSummaryFields& job);
Bytes job_reply_response(uint64_t id, const JobSummaryFields& job, std::span<const JobItemFields> results = {});
Bytes job_list_response(uint64_t id, std::span<const JobSummaryFields> jobs);
// The event socket's second frame (the first is the job id).
Bytes job_event(wire::JobEventKind kind, const JobSummaryFields& job, const JobItemFields* item, double tokens_per_second);

flatbuffers::Offset<wire::JobItemResult> build_job_item(flatbuffers::FlatBufferBuilder& fbb, const JobItemFields& r);
JobSummaryFields read_job_summary(const wire::JobSummary* j);
JobItemFields read_job_item(const wire::JobItemResult* r);
// A JobEvent from the event socket, verified; nullptr if it is not one.
const wire::JobEvent* check_job_event(std::string_view bytes);

}  // namespace troupe::messages
