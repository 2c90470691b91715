#pragma once
// The HTTP API's ways to ask for a constrained output, read into
// Sampling.constraint: OpenAI's `response_format` (text, json_object,
// json_schema), llama-server's `grammar` and `json_schema`, and vLLM's
// `guided_json`, `guided_regex`, `guided_choice` and `guided_grammar`.
// At most one of them per request.
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "messages/client_frames.h"

namespace troupe::service {

struct ConstraintError {
  std::string param, message;
};

// `body` parsed in order (ordered_json): declared properties keep their order.
std::optional<ConstraintError> read_constraint(const nlohmann::ordered_json& body, messages::ConstraintFields& into);

}  // namespace troupe::service
