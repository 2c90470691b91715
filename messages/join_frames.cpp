#include "messages/join_frames.h"

#include "messages/verified_root.h"

namespace troupe::messages {

Bytes join_request(std::string_view endpoint, uint64_t instance) {
  flatbuffers::FlatBufferBuilder fbb(64 + endpoint.size());
  const auto e = fbb.CreateString(endpoint.data(), endpoint.size());
  fbb.Finish(wire::join::CreateJoinRequest(fbb, e, instance), wire::join::JoinRequestIdentifier());
  return Bytes(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

Bytes join_reply(bool accepted, std::string_view reason) {
  flatbuffers::FlatBufferBuilder fbb(64 + reason.size());
  const auto r = reason.empty() ? flatbuffers::Offset<flatbuffers::String>() : fbb.CreateString(reason.data(), reason.size());
  fbb.Finish(wire::join::CreateJoinReply(fbb, accepted, r), wire::join::JoinRequestIdentifier());
  return Bytes(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

const wire::join::JoinRequest* check_join_request(std::string_view bytes) {
  const auto* r = verified_root<wire::join::JoinRequest>(bytes, wire::join::JoinRequestIdentifier());
  return r && r->endpoint() && r->endpoint()->size() > 0 ? r : nullptr;
}

const wire::join::JoinReply* check_join_reply(std::string_view bytes) {
  return verified_root<wire::join::JoinReply>(bytes, wire::join::JoinRequestIdentifier());
}

}  // namespace troupe::messages
