#pragma once
// What the HTTP gateway's handlers (gateways/http_*.cpp) share: an
// error answered as OpenAI's error object, Unix time, and a path's id.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "messages/http_server.h"
#include "service/openai_api.h"

namespace troupe::gateways {

inline int send_error(messages::HttpResponder& res, const service::ApiError& e, const messages::HttpHeaders& extra = {}) {
  res.send(e.status, "application/json", e.json(), extra);
  return e.status;
}

inline int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "/v1/troupe/jobs/ID[/events]" and the like: the id between `prefix` and
// `suffix` ("" when the path is not of that shape, or the id holds a '/').
inline std::string path_id(const std::string& path, std::string_view prefix, std::string_view suffix = "") {
  if (path.size() <= prefix.size() + suffix.size() || path.compare(0, prefix.size(), prefix) != 0 ||
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    return {};
  std::string id = path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
  return id.find('/') == std::string::npos ? id : std::string();
}

}  // namespace troupe::gateways
