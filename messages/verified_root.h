#pragma once
// The root table of a buffer that passes flatbuffers::Verifier (default
// limits) and carries `identifier`; nullptr otherwise. For the messages
// between the front end and its workers (step.fbs, draft.fbs), whose
// identifiers tell one kind from the other.
#include <flatbuffers/flatbuffers.h>

#include <string_view>

namespace troupe::messages {

template <typename T>
const T* verified_root(std::string_view bytes, const char* identifier) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < sizeof(flatbuffers::uoffset_t) + flatbuffers::kFileIdentifierLength) return nullptr;
  flatbuffers::Verifier v(p, bytes.size(), flatbuffers::Verifier::Options{});
  if (!v.VerifyBuffer<T>(identifier)) return nullptr;
  return flatbuffers::GetRoot<T>(p);
}

}  // namespace troupe::messages
