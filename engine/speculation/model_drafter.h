#pragma once
// The draft-model source: a small model with the target's tokenizer proposes
// each sequence's next k tokens, every drafting sequence batched into each of
// the k forwards. It keeps each sequence's K/V in its own pages (its
// backend's pool, not the target's). A request carries the sequence's whole
// token history; the drafter keeps the longest prefix it has already
// computed, cuts the rest off its block table (the target rejected those
// drafts), computes the new tokens, then drafts.
//
// Sampled drafts come with the distribution q each was drawn from, which
// rejection sampling needs (acceptance.h). q is cut to the kMaxSupport
// likeliest tokens before the draw. That keeps the messages that carry it
// small, and acceptance stays exact because the draft really is drawn from
// the cut q.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/batch.h"
#include "engine/sampler.h"

namespace troupe {

class Backend;
struct Vocabulary;

// Why `draft` cannot draft for `target` (their tokens differ), or "" when it can.
std::string draft_pair_mismatch(const Vocabulary& target, const Vocabulary& draft);
// A hash of every token's text, in order: equal for vocabularies that
// draft_pair_mismatch accepts (compared across processes).
uint64_t vocabulary_fingerprint(const Vocabulary& v);

class ModelDrafter {
 public:
  // max_batch_tokens: the most tokens one forward takes (long catch-ups
  // are split over several).
  explicit ModelDrafter(Backend& backend, int64_t max_batch_tokens = 512);
  ~ModelDrafter();
  ModelDrafter(const ModelDrafter&) = delete;
  ModelDrafter& operator=(const ModelDrafter&) = delete;

  struct Request {
    uint64_t id = 0;
    std::span<const int32_t> history;  // prompt and output so far (at least one token)
    int32_t k = 0;                     // drafts wanted, 1..8
    SamplingParams sampling;           // the sequence's; temperature 0 drafts greedily
  };
  struct Proposal {
    uint64_t id = 0;
    std::vector<int32_t> tokens;                // up to k; fewer (or none) when pages ran out
    std::vector<Sampler::Distribution> dists;   // one q per token; empty when greedy
  };
  // One proposal per request, in order. Throws only for a malformed request
  // (the backend's own errors propagate).
  std::vector<Proposal> propose(std::span<const Request> requests);

  void forget(uint64_t id);  // the sequence ended: its pages go back
  size_t sequences() const { return sequences_.size(); }
  int32_t computed(uint64_t id) const;  // positions of `id` with K/V (tests)

  // Measured in the last propose(): ms of one drafting forward (the rounds
  // after the catch-up), and of the whole call.
  double round_ms() const { return round_ms_; }
  // Drafts a few tokens for a throw-away sequence so that round_ms() is
  // known before the first request (the controller weighs the draft
  // model's cost from the start).
  void calibrate();
  double last_ms() const { return last_ms_; }
  // Of the last propose(): the time not spent in steady drafting rounds,
  // mostly reading the tokens the sequences gained since their last window.
  double catch_up_ms() const { return catch_up_ms_; }

  static constexpr size_t kMaxSupport = 64;
  static constexpr int32_t kMaxDraft = 8;

 private:
  struct Sequence;
  struct Work;
  Sequence& sequence(const Request& r);
  bool make_room(Sequence& s, int32_t tokens, std::span<const Request> keep);
  void check(std::span<const Request> requests);
  std::vector<Work> prepare(std::span<const Request> requests, std::vector<Proposal>& out);
  // One batched forward for every sequence short of its drafts; false when none is.
  bool round(std::vector<Work>& work, std::vector<Proposal>& out, double& drafting_ms, int32_t& drafting_rounds);

  Backend& backend_;
  int64_t max_batch_tokens_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> sequences_;
  uint64_t clock_ = 0;  // LRU order of use
  double round_ms_ = 0, last_ms_ = 0, catch_up_ms_ = 0;
  Logits logits_;
};

}  // namespace troupe
