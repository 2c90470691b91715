#include "messages/draft_frames.h"

#include "messages/verified_root.h"

namespace troupe::messages {

Bytes draft_plan(uint64_t step, std::span<const DraftSequenceSpec> sequences, std::span<const uint64_t> forget) {
  flatbuffers::FlatBufferBuilder fbb(256);
  std::vector<flatbuffers::Offset<wire::draft::DraftSequence>> out;
  out.reserve(sequences.size());
  for (const DraftSequenceSpec& s : sequences) {
    const auto tokens = fbb.CreateVector(s.tokens.data(), s.tokens.size());
    const auto sampling = s.sampling ? build_sequence_sampling(fbb, *s.sampling, false) : 0;
    out.push_back(wire::draft::CreateDraftSequence(fbb, s.sequence_id, s.start, tokens, s.k, sampling));
  }
  const auto list = fbb.CreateVector(out.data(), out.size());
  const auto gone = fbb.CreateVector(forget.data(), forget.size());
  fbb.Finish(wire::draft::CreateDraftPlan(fbb, step, list, gone), wire::draft::DraftPlanIdentifier());
  return Bytes(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

Bytes draft_result(uint64_t step, std::span<const DraftProposalFields> proposals, std::string_view error, double draft_ms,
                   double round_ms, const DrafterInfo& info, double catch_up_ms) {
  flatbuffers::FlatBufferBuilder fbb(256);
  std::vector<flatbuffers::Offset<wire::draft::Proposal>> out;
  out.reserve(proposals.size());
  for (const DraftProposalFields& p : proposals) {
    const auto tokens = fbb.CreateVector(p.tokens.data(), p.tokens.size());
    const DraftQOffsets q = build_draft_q(fbb, p.q);
    out.push_back(wire::draft::CreateProposal(fbb, p.sequence_id, tokens, q.sizes, q.tokens, q.probs, p.resync));
  }
  const auto list = fbb.CreateVector(out.data(), out.size());
  const auto err = error.empty() ? flatbuffers::Offset<flatbuffers::String>() : fbb.CreateString(error.data(), error.size());
  const auto model = fbb.CreateString(info.model);
  fbb.Finish(wire::draft::CreateDraftResult(fbb, step, list, err, draft_ms, round_ms, model, info.n_vocab, info.vocabulary,
                                                      catch_up_ms),
             wire::draft::DraftPlanIdentifier());
  return Bytes(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}


const wire::draft::DraftPlan* check_draft_plan(std::string_view bytes) {
  const auto* p = verified_root<wire::draft::DraftPlan>(bytes, wire::draft::DraftPlanIdentifier());
  return p && elements_aligned(bytes, p->forget()) ? p : nullptr;
}
const wire::draft::DraftResult* check_draft_result(std::string_view bytes) {
  return verified_root<wire::draft::DraftResult>(bytes, wire::draft::DraftPlanIdentifier());
}

}  // namespace troupe::messages
