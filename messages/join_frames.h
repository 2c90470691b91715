#pragma once
// Building and checking a worker's announcement to a front end and the
// answer (messages/join.fbs).
#include <cstdint>
#include <string>
#include <string_view>

#include "messages/client_frames.h"
#include "messages/join_generated.h"

namespace troupe::messages {

Bytes join_request(std::string_view endpoint, uint64_t instance);
Bytes join_reply(bool accepted, std::string_view reason);
// nullptr: not a well-formed message of that kind (or no endpoint given).
const wire::join::JoinRequest* check_join_request(std::string_view bytes);
const wire::join::JoinReply* check_join_reply(std::string_view bytes);

}  // namespace troupe::messages
