#pragma once
// OpenAI's Files and Batch APIs in troupe's terms (docs/HTTP.md, "Batches"):
// an uploaded file is a stored file (persistence/files.h); a batch is a
// durable job of whole requests, one per line of its input file, run at
// batch priority and resumed after a crash as every job is; its output and
// error files are the job's stored results, written as JSONL when read.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "messages/file_frames.h"
#include "messages/job_frames.h"
#include "service/openai_api.h"

namespace troupe::service {

// A multipart/form-data body's fields, by name (what OpenAI's clients send
// to POST /v1/files).
struct FormField {
  std::string filename;
  std::string data;
};
std::variant<std::map<std::string, FormField>, ApiError> read_multipart(std::string_view content_type,
                                                                        std::string_view body);

std::string file_object(const messages::FileFields& f);
// OpenAI's lists: every file, every job that is a batch.
std::string file_list(const wire::FileList& files);
std::string batch_list(const wire::JobList& jobs);

// A batch's input file read into requests, each line checked as the
// endpoint's body would be alone. A line that cannot run: the error names it.
struct BatchLines {
  std::vector<std::string> custom_ids;
  std::vector<messages::Bytes> requests;
};
std::variant<BatchLines, ApiError> read_batch_lines(std::string_view jsonl, const std::string& endpoint,
                                                    const std::vector<std::string>& models, int32_t max_tokens,
                                                    uint32_t max_lines);

// POST /v1/batches: the body's endpoint, window and metadata, checked; the
// annotation the job keeps (what the batch object shows again).
std::variant<std::string, ApiError> batch_annotation(const std::string& body, std::string& input_file_id);

// A job that is a batch (its annotation one); a plain job is not.
bool is_batch(const messages::JobSummaryFields& job);
std::string batch_id(const std::string& job_id);
std::string job_of_batch(std::string_view batch_id);  // "" when it is not a batch id
// Output and error files are views of a batch's results: "file-out-<job>", "file-err-<job>".
std::string job_of_output(std::string_view file_id, bool& errors);  // "" when it is not one

std::string batch_object(const messages::JobSummaryFields& job);
// The output (errors false: each successful line's response) or error file
// (each line that could not run), in the input's order.
// `model`: the served model, named in each response.
std::string batch_results(const messages::JobSummaryFields& job, std::span<const messages::JobItemFields> results,
                          bool errors, const std::string& model);

}  // namespace troupe::service
