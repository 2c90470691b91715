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

// FlatBuffers 2.0.8's verifier aligns a vector's length, not its elements:
// a crafted buffer can put a [ulong] 4 bytes off, and reading one is
// undefined behaviour (tests/fuzz, worker_frames). Builders always align
// them, so such a buffer is no message. Measured from the buffer's start,
// as the verifier measures.
template <typename T>
bool elements_aligned(std::string_view bytes, const flatbuffers::Vector<T>* v) {
  // An empty vector has no element to misread (and builders do not align it).
  return !v || v->size() == 0 || (reinterpret_cast<const char*>(v->Data()) - bytes.data()) % alignof(T) == 0;
}

}  // namespace troupe::messages
