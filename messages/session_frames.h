#pragma once
// Buffers of the stored-session requests and replies (messages/client.fbs):
// ListSessions → SessionList, ShowSession → Session, DeleteSession → Ack,
// TakeSession (between front ends) → SessionRecords or Ack.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "messages/client_frames.h"

namespace troupe::messages {

struct SessionSummaryFields {
  std::string session_id;
  int32_t turns = 0;
  int32_t tokens = 0;
  int64_t created_ms = 0, updated_ms = 0;
  std::string model;
  std::string owner;
  int32_t escalations = 0;  // turns a smaller tier handed to a larger one
};

using RoleContent = std::pair<std::string, std::string>;

Bytes list_sessions_request(uint64_t id);
Bytes show_session_request(uint64_t id, std::string_view session_id);
Bytes delete_session_request(uint64_t id, std::string_view session_id);

Bytes session_list_response(uint64_t id, std::span<const SessionSummaryFields> sessions);
Bytes session_response(uint64_t id, const SessionSummaryFields& summary, std::span<const RoleContent> messages,
                       std::span<const wire::TurnState> turn_states = {}, std::string_view context_summary = {},
                       std::span<const int32_t> turn_messages = {}, std::span<const wire::TurnUsage> turn_usage = {},
                       std::span<const int32_t> pinned = {});  // indices into messages, ascending
Bytes ack_response(uint64_t id, std::string_view message);

SessionSummaryFields read_session_summary(const wire::SessionSummary* s);

// A session handed between front ends: its stored records and KV pages.
struct SessionRecordsFields {
  std::string session_id;
  std::string header;
  std::vector<std::string> turns;
  std::vector<std::string> kv_pages;
};
struct TakeSessionFields {
  std::string session_id;
  wire::HandOffStep step = wire::HandOffStep::ask;
  std::string owner;
  bool admin = false;
  std::string to;
};
Bytes take_session_request(uint64_t id, const TakeSessionFields& t);
TakeSessionFields read_take_session(const wire::TakeSession& t);
Bytes session_records_response(uint64_t id, const SessionRecordsFields& r);
SessionRecordsFields read_session_records(const wire::SessionRecords& r);

}  // namespace troupe::messages
