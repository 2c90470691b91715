#pragma once
// troupe's own HTTP endpoints (docs/HTTP.md): sessions and batch jobs as
// JSON. A body becomes the client Request a ZeroMQ client would send; an
// answer frame becomes the JSON object and its HTTP status.
#include <string>
#include <variant>

#include "messages/client_frames.h"
#include "service/openai_api.h"

namespace troupe::service {

struct HttpAnswer {
  int status = 200;
  std::string json;
};

// POST /v1/troupe/jobs: {"items":[...], "template":"...{item}...", sampling fields as in completions}.
std::variant<messages::Bytes, ApiError> parse_job_submission(const std::string& body, int32_t max_tokens);

// Any answer to a sessions or jobs request (SessionList, Session, Ack,
// JobAccepted, JobReply, JobList, Error); "" (no answer) is a 504.
HttpAnswer troupe_answer(const std::string& frame);

// GET /v1/troupe/stats: what `troupe stats` prints, as one JSON object (tiers and workers as lists).
std::string stats_json(const messages::StatsFields& s);

}  // namespace troupe::service
