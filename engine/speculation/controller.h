#pragma once
// Per sequence, per step: which drafter and how many drafted tokens k
// (0..max_draft) pay. With a per-token acceptance estimate a for a source,
// a verify window of k drafts yields E(k) = (1 − a^(k+1)) / (1 − a) tokens.
// Its k extra tokens lengthen the step, which every sequence of the batch
// waits for: with the step costing base + c × tokens (measured), B sequences
// in it and step time T, speculating pays when
//
//   E(k) − 1  >  k × c × B / T      (tokens gained > tokens the batch loses)
//
// so at batch 1 on a memory-bound device almost any acceptance pays, and as
// the batch grows only near-verbatim drafts do: speculation turns itself
// down under load. Acceptance is an exponentially weighted estimate per
// source, updated after every verify; a source judged useless is probed
// again (one drafted token) every kProbeEvery steps, so a sequence that
// starts copying its input is noticed.
//
// Modes: `automatic` weighs every available source against none; `ngram`,
// `suffix` and `draft` fix the source and always speculate with it when it
// has drafts, the controller choosing only k (the k that pays best, or loses
// least); `off` never speculates. Sources: prompt lookup (ngram), suffix
// trees over history (suffix_tree.h), the draft model.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace troupe {

enum class SpeculationMode : uint8_t { off, ngram, draft, automatic, suffix };
enum class DraftSource : uint8_t { none, ngram, model, suffix };
const char* draft_source_name(DraftSource s);
// The modes that draft from suffix trees (a request's own, and history).
inline bool drafts_from_suffix(SpeculationMode m) { return m == SpeculationMode::suffix || m == SpeculationMode::automatic; }

// The cost of a step, learned from measured steps: ms as a function of the
// step's tokens. Small steps (decode, verify windows) and large ones
// (prefill chunks) run different kernels at different costs per token (on
// these CPUs ~17 ms and ~7 ms a token for the 1.5B model), so one line
// fitted through all of them makes windows look cheap. Steps are kept in
// buckets by size (1..64 exactly, then powers of two), each an
// exponentially weighted mean, and the cost at any size is read by
// interpolating between the observed buckets around it. Sizes up to 64 each
// have their own bucket: the many-token kernels work in groups of 16
// tokens, so 17 tokens cost nearly what 32 do, and a window that pushes a
// step past such a boundary must be priced as such.
class StepCostModel {
 public:
  void observe(int64_t tokens, double ms);
  double ms(int64_t tokens) const;                      // a step of this many tokens
  double extra_ms(int64_t tokens, int64_t more) const;  // what `more` tokens add to it
  // With one size observed only, what each further token is assumed to cost,
  // as a share of that step's time per token (a cautious guess that the
  // first windows then replace with measurements).
  static constexpr double kUnknownSlopeShare = 0.5;

 private:
  struct Bucket {
    double weight = 0, tokens = 0, ms = 0;  // decayed sums
  };
  static size_t bucket_of(int64_t tokens);
  static constexpr int64_t kExact = 64;
  std::array<Bucket, kExact + 8> buckets_{};  // 1..64, 65-128, ..., 4097-8192 and beyond
};

// What a draft-model window costs beyond its drafting rounds: the draft model
// first reads every token of the sequence it has not seen (those accepted
// from n-gram windows or decoded without speculation since its last
// window), a prefill that grows with the gap. Learned from the draft
// model's measured time per call.
class DraftCatchUpCost {
 public:
  // One call: catch_up_ms outside its drafting rounds (ModelDrafter::
  // catch_up_ms), after reading behind_tokens tokens it had not seen.
  void observe(double catch_up_ms, int64_t behind_tokens);
  // The catch-up before a window for a sequence behind_tokens behind.
  double ms(int64_t behind_tokens) const { return ms_per_token_ * static_cast<double>(std::max<int64_t>(0, behind_tokens)); }

 private:
  double ms_per_token_ = 0;  // nothing measured: no catch-up cost assumed
};

// A source's acceptance as the controller tracks it: accepted drafts over
// tries, both exponentially weighted (each rejection ends a window: a try).
struct AcceptanceEstimate {
  double kept = 1.0, tried = 2.5;  // the default prior: 0.4, worth a few observations
};
using AcceptanceEstimates = std::array<AcceptanceEstimate, 4>;  // by DraftSource (none's unused)

struct SpeculationStats {
  DraftSource last_source = DraftSource::none;
  int64_t drafted = 0, accepted = 0, verify_steps = 0;
  struct BySource {
    int64_t drafted = 0, accepted = 0, windows = 0;
  };
  std::array<BySource, 4> by_source{};  // indexed by DraftSource: auto mixes them
  double mean_accepted() const { return verify_steps ? static_cast<double>(accepted) / verify_steps : 0.0; }
};

// Drafts the free sources have ready this step (tokens each proposes).
struct DraftsAvailable {
  int32_t ngram = 0, suffix = 0;
  DraftsAvailable(int32_t ngram_tokens = 0, int32_t suffix_tokens = 0) : ngram(ngram_tokens), suffix(suffix_tokens) {}  // NOLINT: an int is n-gram drafts
};

class SpeculationController {
 public:
  // `prior`: what earlier sequences of the same work measured (a session's
  // turns, a job's items; service/acceptance_memory.h), each source's weight
  // cut to kPriorTries so this sequence's own windows soon outweigh it;
  // null: the default prior.
  SpeculationController(SpeculationMode mode, int32_t max_draft, bool draft_model_available = false,
                        const AcceptanceEstimates* prior = nullptr);

  struct Choice {
    DraftSource source = DraftSource::none;
    int32_t k = 0;
  };
  // available: how many tokens the n-gram drafter and the suffix trees propose now.
  // batch: sequences in the step (decoding and prefilling: all wait for it); cost: the step's cost model;
  // draft_ms_per_token: a draft-model step per token (0 without one);
  // step_tokens: the step's tokens without drafts (0: one per sequence);
  // draft_catch_up_ms: what the draft model would spend reading this
  // sequence's tokens it has not seen before it can draft (DraftCatchUpCost).
  Choice choose(DraftsAvailable available, int32_t batch, const StepCostModel& cost, double draft_ms_per_token = 0,
                int64_t step_tokens = 0, double draft_catch_up_ms = 0);
  void observe(DraftSource source, int32_t drafted, int32_t accepted);

  double acceptance(DraftSource source) const;
  const AcceptanceEstimates& estimates() const { return estimates_; }
  const SpeculationStats& stats() const { return stats_; }

  static constexpr int32_t kProbeEvery = 32;
  // Tokens per step a draft-model window must promise at 95 % acceptance
  // before the model is probed (see choose()).
  static constexpr double kModelProbeMargin = 0.5;
  static constexpr int32_t kFirstProbe = 8;  // the first probe comes sooner: costs are learned from it
  // auto drafts only where the expected tokens repay the window's cost with
  // this much to spare. It drafts when a source's recent acceptance looks
  // high, and acceptance then falls back toward its mean: windows priced at
  // break-even lost 7 % measured (the 1.5B, 4 streams of JSON records).
  static constexpr double kPaybackMargin = 1.25;
  // The most tries a carried-over prior counts as: about half of one long
  // window's evidence, so a sequence unlike its scope's earlier ones soon
  // shows it.
  static constexpr double kPriorTries = 4.0;

 private:
  static double net_gain(double a, int32_t k, double loss);
  static Choice probe(DraftsAvailable available, bool suffix, bool ngram, bool model);

  SpeculationMode mode_;
  int32_t max_draft_;
  bool model_available_;
  AcceptanceEstimates estimates_{};
  int32_t idle_steps_ = 0;  // steps since the last speculation (for probing)
  bool probed_ = false;
  SpeculationStats stats_;
};

}  // namespace troupe
