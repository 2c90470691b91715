#include "messages/step_frames.h"

#include "messages/verified_root.h"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace troupe::messages {

namespace {

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::step::PageData>>> build_pages(
    flatbuffers::FlatBufferBuilder& fbb, std::span<const PageBytes> pages) {
  if (pages.empty()) return 0;
  std::vector<flatbuffers::Offset<wire::step::PageData>> out;
  out.reserve(pages.size());
  for (const PageBytes& p : pages)
    out.push_back(wire::step::CreatePageData(
        fbb, p.page, fbb.CreateVector(reinterpret_cast<const uint8_t*>(p.data.data()), p.data.size())));
  return fbb.CreateVector(out.data(), out.size());
}

size_t page_bytes(std::span<const PageBytes> pages) {
  size_t n = 0;
  for (const PageBytes& p : pages) n += p.data.size() + 16;
  return n;
}

}  // namespace

flatbuffers::Offset<wire::step::SequenceSampling> build_sequence_sampling(flatbuffers::FlatBufferBuilder& fbb, const SamplingFields& f,
                                                                 bool logprobs, const GrammarSpec& grammar,
                                                                 int32_t top_logprobs) {
  std::vector<wire::step::TokenBias> bias;
  for (const auto& [token, b] : f.logit_bias) bias.emplace_back(token, b);
  const auto biases = bias.empty() ? 0 : fbb.CreateVectorOfStructs(bias.data(), bias.size());
  const auto gbnf = f.grammar.empty() ? 0 : fbb.CreateString(f.grammar);
  return wire::step::CreateSequenceSampling(fbb, f.temperature, f.top_k, f.top_p, f.min_p, f.repetition_penalty,
                                            f.presence_penalty, f.frequency_penalty, f.penalty_last_n, f.seed, logprobs,
                                            biases, f.accept_ratio, gbnf, grammar.start, grammar.jump_forward,
                                            top_logprobs);
}

DraftQOffsets build_draft_q(flatbuffers::FlatBufferBuilder& fbb, std::span<const DraftDistribution> q) {
  if (q.empty()) return {};
  std::vector<int32_t> sizes, tokens;
  std::vector<float> probs;
  for (const DraftDistribution& d : q) {
    sizes.push_back(static_cast<int32_t>(d.size()));
    for (const auto& [t, p] : d) tokens.push_back(t), probs.push_back(p);
  }
  return {fbb.CreateVector(sizes), fbb.CreateVector(tokens), fbb.CreateVector(probs)};
}

std::vector<DraftDistribution> read_draft_q(const flatbuffers::Vector<int32_t>* sizes, const flatbuffers::Vector<int32_t>* tokens,
                                            const flatbuffers::Vector<float>* probs, int32_t drafts, int32_t n_vocab) {
  std::vector<DraftDistribution> out;
  if (!sizes || sizes->size() == 0) return out;
  auto bad = [](const std::string& why) { throw std::invalid_argument("draft distributions: " + why); };
  if (static_cast<int64_t>(sizes->size()) != drafts)
    bad(std::to_string(sizes->size()) + " for " + std::to_string(drafts) + " drafts");
  if (!tokens || !probs || tokens->size() != probs->size()) bad("tokens and probabilities differ in length");
  uint32_t at = 0;
  for (int32_t size : *sizes) {
    if (size <= 0 || static_cast<uint64_t>(at) + static_cast<uint32_t>(size) > tokens->size()) bad("sizes exceed the pairs");
    DraftDistribution d;
    d.reserve(static_cast<size_t>(size));
    double total = 0;
    for (int32_t i = 0; i < size; ++i, ++at) {
      const int32_t t = tokens->Get(at);
      const float p = probs->Get(at);
      if (t < 0 || t >= n_vocab) bad("token " + std::to_string(t) + " outside the vocabulary");
      if (!std::isfinite(p) || p < 0) bad("a probability that is negative or not finite");
      total += p;
      d.emplace_back(t, p);
    }
    if (std::abs(total - 1.0) > 1e-3) bad("probabilities sum to " + std::to_string(total));
    out.push_back(std::move(d));
  }
  if (at != tokens->size()) bad("more pairs than the sizes cover");
  return out;
}

Bytes step_plan(uint64_t step, std::span<const SliceSpec> slices, std::span<const uint64_t> forget, const StepKv& kv,
                uint64_t front) {
  flatbuffers::FlatBufferBuilder fbb(1024 + page_bytes(kv.imports));
  std::vector<flatbuffers::Offset<wire::step::Slice>> out;
  out.reserve(slices.size());
  for (const SliceSpec& s : slices) {
    const auto tokens = fbb.CreateVector(s.tokens.data(), s.tokens.size());
    const auto table = fbb.CreateVector(s.block_table.data(), s.block_table.size());
    flatbuffers::Offset<wire::step::SequenceSampling> sampling;
    flatbuffers::Offset<flatbuffers::Vector<int32_t>> history;
    if (s.sampling) {
      history = fbb.CreateVector(s.history.data(), s.history.size());
      sampling = build_sequence_sampling(fbb, *s.sampling, s.logprobs, s.grammar, s.top_logprobs);
    }
    const DraftQOffsets q = build_draft_q(fbb, s.draft_q);
    out.push_back(wire::step::CreateSlice(fbb, s.sequence_id, s.start, tokens, table, s.wants_token, sampling, history,
                                          s.drafts, q.sizes, q.tokens, q.probs, s.evicted, s.query_window));
  }
  const auto list = fbb.CreateVector(out.data(), out.size());
  const auto gone = fbb.CreateVector(forget.data(), forget.size());
  std::vector<wire::step::PageCopy> pc;
  pc.reserve(kv.copies.size());
  for (const auto& [src, dst] : kv.copies) pc.emplace_back(src, dst);
  const auto copy_list = fbb.CreateVectorOfStructs(pc.data(), pc.size());
  const auto export_list = kv.exports.empty() ? 0 : fbb.CreateVector(kv.exports.data(), kv.exports.size());
  const auto import_list = build_pages(fbb, kv.imports);
  const auto swap_list = kv.swap_outs.empty() ? 0 : fbb.CreateVector(kv.swap_outs.data(), kv.swap_outs.size());
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::step::KvShift>>> shift_list;
  if (!kv.shifts.empty()) {
    std::vector<flatbuffers::Offset<wire::step::KvShift>> shifts;
    for (const KvShift& sh : kv.shifts)
      shifts.push_back(wire::step::CreateKvShift(fbb, fbb.CreateVector(sh.src_table.data(), sh.src_table.size()), sh.src_start,
                                                 fbb.CreateVector(sh.dst_table.data(), sh.dst_table.size()), sh.dst_start,
                                                 sh.count, sh.delta));
    shift_list = fbb.CreateVector(shifts);
  }
  std::vector<wire::step::LocalSlot> ls;
  ls.reserve(kv.local_slots.size());
  for (const auto& [page, slot] : kv.local_slots) ls.emplace_back(page, slot);
  const auto local_list = ls.empty() ? 0 : fbb.CreateVectorOfStructs(ls.data(), ls.size());
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::step::KvEviction>>> eviction_list;
  if (!kv.evictions.empty()) {
    std::vector<flatbuffers::Offset<wire::step::KvEviction>> evictions;
    for (const EvictionSpec& e : kv.evictions)
      evictions.push_back(wire::step::CreateKvEviction(fbb, e.sequence_id, fbb.CreateVector(e.src_table.data(), e.src_table.size()),
                                                       fbb.CreateVector(e.dst_table.data(), e.dst_table.size()), e.length,
                                                       e.keep, e.rope_offset, e.policy.sinks, e.policy.window, e.policy.pool));
    eviction_list = fbb.CreateVector(evictions);
  }
  fbb.Finish(wire::step::CreateStepPlan(fbb, step, list, gone, copy_list, export_list, import_list, swap_list,
                                        kv.export_codec, shift_list, false, front, local_list, eviction_list),
             wire::step::StepPlanIdentifier());
  return Bytes(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

Bytes step_result(uint64_t step, std::span<const SampledToken> sampled, std::string_view error, double forward_ms,
                  const WorkerInfo& worker, std::span<const PageBytes> exported, std::span<const PageBytes> swapped) {
  flatbuffers::FlatBufferBuilder fbb(256 + 32 * sampled.size() + page_bytes(exported) + page_bytes(swapped));
  std::vector<flatbuffers::Offset<wire::step::Sampled>> out;
  out.reserve(sampled.size());
  for (const SampledToken& s : sampled) {
    const auto accepted = s.accepted.empty() ? 0 : fbb.CreateVector(s.accepted.data(), s.accepted.size());
    const auto forced = s.forced.empty() ? 0 : fbb.CreateVector(s.forced.data(), s.forced.size());
    const auto lps = s.logprobs.empty() ? 0 : fbb.CreateVector(s.logprobs);
    const auto top_ids = s.top_ids.empty() ? 0 : fbb.CreateVector(s.top_ids);
    const auto top_lps = s.top_logprobs.empty() ? 0 : fbb.CreateVector(s.top_logprobs);
    out.push_back(wire::step::CreateSampled(fbb, s.sequence_id, s.token, s.logprob, accepted, forced, s.grammar_blocked,
                                            lps, top_ids, top_lps));
  }
  const auto list = fbb.CreateVector(out.data(), out.size());
  const auto err = error.empty() ? flatbuffers::Offset<flatbuffers::String>() : fbb.CreateString(error.data(), error.size());
  const auto model = fbb.CreateString(worker.model);
  const auto pages = build_pages(fbb, exported);
  const auto swaps = build_pages(fbb, swapped);
  const auto experts =
      worker.expert_tokens.empty() ? 0 : fbb.CreateVector(worker.expert_tokens.data(), worker.expert_tokens.size());
  fbb.Finish(wire::step::CreateStepResult(fbb, step, list, err, forward_ms, worker.kv_pages, worker.page_size,
                                          worker.n_vocab, model, worker.can_copy_pages, pages, worker.can_transfer_pages,
                                          swaps, worker.kv_type, worker.can_shift_kv, worker.instance,
                                          worker.model_fingerprint, false, worker.draining, worker.process, experts,
                                          worker.kv_local_pages, worker.can_evict_kv),
             wire::step::StepPlanIdentifier());
  return Bytes(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

Bytes release_plan(uint64_t front) {
  flatbuffers::FlatBufferBuilder fbb(64);
  wire::step::StepPlanBuilder b(fbb);
  b.add_release(true);
  b.add_front(front);
  fbb.Finish(b.Finish(), wire::step::StepPlanIdentifier());
  return Bytes(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

Bytes worker_lost_result(std::string_view why) {
  flatbuffers::FlatBufferBuilder fbb(128 + why.size());
  const auto err = fbb.CreateString(why.data(), why.size());
  wire::step::StepResultBuilder b(fbb);
  b.add_error(err);
  b.add_worker_lost(true);
  fbb.Finish(b.Finish(), wire::step::StepPlanIdentifier());
  return Bytes(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

const wire::step::StepPlan* check_step_plan(std::string_view bytes) {
  const auto* p = verified_root<wire::step::StepPlan>(bytes, wire::step::StepPlanIdentifier());
  return p && elements_aligned(bytes, p->forget()) ? p : nullptr;
}
const wire::step::StepResult* check_step_result(std::string_view bytes) {
  return verified_root<wire::step::StepResult>(bytes, wire::step::StepPlanIdentifier());
}

}  // namespace troupe::messages
