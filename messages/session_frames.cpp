#include "messages/session_frames.h"

#include <algorithm>
#include <vector>

namespace troupe::messages {
namespace {

flatbuffers::Offset<wire::SessionSummary> build_summary(flatbuffers::FlatBufferBuilder& fbb, const SessionSummaryFields& s) {
  const auto id = fbb.CreateString(s.session_id);
  const auto model = fbb.CreateString(s.model);
  const auto owner = s.owner.empty() ? 0 : fbb.CreateString(s.owner);
  return wire::CreateSessionSummary(fbb, id, s.turns, s.tokens, s.created_ms, s.updated_ms, model, owner, s.escalations);
}

Bytes session_id_request(uint64_t id, std::string_view session_id, bool remove) {
  flatbuffers::FlatBufferBuilder fbb(128);
  const auto sid = fbb.CreateString(session_id.data(), session_id.size());
  if (remove) return request_bytes(id, wire::RequestBody::DeleteSession, wire::CreateDeleteSession(fbb, sid).Union(), fbb);
  return request_bytes(id, wire::RequestBody::ShowSession, wire::CreateShowSession(fbb, sid).Union(), fbb);
}

}  // namespace

Bytes list_sessions_request(uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb(64);
  return request_bytes(id, wire::RequestBody::ListSessions, wire::CreateListSessions(fbb).Union(), fbb);
}
Bytes show_session_request(uint64_t id, std::string_view session_id) { return session_id_request(id, session_id, false); }
Bytes delete_session_request(uint64_t id, std::string_view session_id) { return session_id_request(id, session_id, true); }

Bytes session_list_response(uint64_t id, std::span<const SessionSummaryFields> sessions) {
  flatbuffers::FlatBufferBuilder fbb(256 + 96 * sessions.size());
  std::vector<flatbuffers::Offset<wire::SessionSummary>> list;
  for (const auto& s : sessions) list.push_back(build_summary(fbb, s));
  const auto v = fbb.CreateVector(list.data(), list.size());
  return response_bytes(id, wire::ResponseBody::SessionList, wire::CreateSessionList(fbb, v).Union(), fbb);
}

Bytes session_response(uint64_t id, const SessionSummaryFields& summary, std::span<const RoleContent> messages,
                       std::span<const wire::TurnState> turn_states, std::string_view context_summary,
                       std::span<const int32_t> turn_messages, std::span<const wire::TurnUsage> turn_usage,
                       std::span<const int32_t> pinned) {
  size_t bytes = 256 + turn_states.size() + context_summary.size() + 24 * turn_usage.size();
  for (const auto& [role, content] : messages) bytes += role.size() + content.size() + 32;
  flatbuffers::FlatBufferBuilder fbb(bytes);
  const auto s = build_summary(fbb, summary);
  std::vector<flatbuffers::Offset<wire::ChatMessage>> msgs;
  for (size_t i = 0; i < messages.size(); ++i) {
    const bool pin = std::binary_search(pinned.begin(), pinned.end(), static_cast<int32_t>(i));
    msgs.push_back(wire::CreateChatMessage(fbb, fbb.CreateString(messages[i].first), fbb.CreateString(messages[i].second),
                                           0, 0, pin));
  }
  const auto v = fbb.CreateVector(msgs.data(), msgs.size());
  const auto states = fbb.CreateVector(turn_states.data(), turn_states.size());
  const auto cs = context_summary.empty() ? 0 : fbb.CreateString(context_summary.data(), context_summary.size());
  const auto sizes = fbb.CreateVector(turn_messages.data(), turn_messages.size());
  const auto usage = fbb.CreateVectorOfStructs(turn_usage.data(), turn_usage.size());
  return response_bytes(id, wire::ResponseBody::Session, wire::CreateSession(fbb, s, v, states, cs, sizes, usage).Union(),
                        fbb);
}

Bytes ack_response(uint64_t id, std::string_view message) {
  flatbuffers::FlatBufferBuilder fbb(64 + message.size());
  const auto m = fbb.CreateString(message.data(), message.size());
  return response_bytes(id, wire::ResponseBody::Ack, wire::CreateAck(fbb, m).Union(), fbb);
}

SessionSummaryFields read_session_summary(const wire::SessionSummary* s) {
  SessionSummaryFields f;
  if (!s) return f;
  if (s->session_id()) f.session_id = s->session_id()->str();
  f.turns = s->turns();
  f.tokens = s->tokens();
  f.created_ms = s->created_ms();
  f.updated_ms = s->updated_ms();
  if (s->model()) f.model = s->model()->str();
  if (s->owner()) f.owner = s->owner()->str();
  return f;
}

Bytes take_session_request(uint64_t id, const TakeSessionFields& t) {
  flatbuffers::FlatBufferBuilder fbb(128 + t.session_id.size() + t.owner.size() + t.to.size());
  const auto body = wire::CreateTakeSession(fbb, fbb.CreateString(t.session_id), t.step, fbb.CreateString(t.owner), t.admin,
                                            fbb.CreateString(t.to));
  return request_bytes(id, wire::RequestBody::TakeSession, body.Union(), fbb);
}

TakeSessionFields read_take_session(const wire::TakeSession& t) {
  return {t.session_id() ? t.session_id()->str() : "", t.step(), t.owner() ? t.owner()->str() : "", t.admin(),
          t.to() ? t.to()->str() : ""};
}

namespace {
std::string blob_string(const flatbuffers::Vector<uint8_t>* v) {
  return v ? std::string(reinterpret_cast<const char*>(v->data()), v->size()) : std::string();
}
flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::Blob>>> blobs(flatbuffers::FlatBufferBuilder& fbb,
                                                                              const std::vector<std::string>& all) {
  std::vector<flatbuffers::Offset<wire::Blob>> out;
  out.reserve(all.size());
  for (const std::string& b : all)
    out.push_back(wire::CreateBlob(fbb, fbb.CreateVector(reinterpret_cast<const uint8_t*>(b.data()), b.size())));
  return fbb.CreateVector(out);
}
std::vector<std::string> read_blobs(const flatbuffers::Vector<flatbuffers::Offset<wire::Blob>>* v) {
  std::vector<std::string> out;
  if (v)
    for (const auto* b : *v) out.push_back(blob_string(b->data()));
  return out;
}
}  // namespace

Bytes session_records_response(uint64_t id, const SessionRecordsFields& r) {
  size_t bytes = 256 + r.header.size();
  for (const auto& t : r.turns) bytes += t.size() + 16;
  for (const auto& p : r.kv_pages) bytes += p.size() + 16;
  flatbuffers::FlatBufferBuilder fbb(bytes);
  const auto sid = fbb.CreateString(r.session_id);
  const auto header = fbb.CreateVector(reinterpret_cast<const uint8_t*>(r.header.data()), r.header.size());
  const auto turns = blobs(fbb, r.turns);
  const auto pages = blobs(fbb, r.kv_pages);
  return response_bytes(id, wire::ResponseBody::SessionRecords, wire::CreateSessionRecords(fbb, sid, header, turns, pages).Union(),
                        fbb);
}

SessionRecordsFields read_session_records(const wire::SessionRecords& r) {
  return {r.session_id() ? r.session_id()->str() : "", blob_string(r.header()), read_blobs(r.turns()), read_blobs(r.kv_pages())};
}

}  // namespace troupe::messages
