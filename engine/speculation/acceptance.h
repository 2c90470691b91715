#pragma once
// Verifying drafted tokens against the target model's logits for the
// window [last token, d1, ..., dk] (k + 1 rows, one forward pass):
//
//   greedy   accept while d_i equals the target's argmax at position i - 1;
//            then add the target's own token at the first mismatch (or after
//            the last draft): the output is exactly greedy decoding's.
//            With SamplingParams::accept_ratio α < 1 (a lenient, "speculative
//            cascade" rule) d_i is also kept when p_i(d_i) >= α p_i(argmax),
//            i.e. when its logit is within -ln α of the top one: the output is
//            the drafter's wherever the target finds it nearly as likely.
//   sampled  accept d_i with probability min(1, p_i(d_i) / q_i(d_i)), where p
//            is the target's distribution after the sampler's penalties and
//            cuts and q the drafter's (a point mass for n-gram drafts); on
//            rejection draw from norm(max(0, p_i − q_i)). The output follows
//            the target's distribution exactly (Leviathan et al., Chen et al.).
//
// Rejected positions are rolled back by the caller truncating the KV.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace troupe {

struct Acceptance {
  int32_t accepted = 0;  // drafts kept, d1..d_accepted
  int32_t next = -1;     // the target's token after them
};

// row(i): the target's logits at window position i (modifiable: the sampler
// applies penalties in place). history: every token before the window's
// first, prompt included; it is extended with what is kept (accepted drafts
// and `next`). draft_dist: the drafter's distributions, one per draft
// (nullptr: deterministic drafts).
Acceptance accept_drafts(Sampler& sampler, std::span<const int32_t> drafts, const std::function<std::span<float>(int32_t)>& row,
                         std::vector<int32_t>& history, const std::vector<Sampler::Distribution>* draft_dist = nullptr);

}  // namespace troupe
