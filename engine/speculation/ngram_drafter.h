#pragma once
// Prompt lookup, the drafter that costs nothing: find the most recent
// earlier occurrence of the sequence's last n tokens (n from n_max down to
// n_min) in its own prompt and output, and propose the tokens that followed
// it (continuing the period when fewer follow). Strong where outputs copy their inputs (summaries, code edits), weak
// on free prose; the controller (controller.h) learns which per sequence.
#include <cstdint>
#include <span>
#include <vector>

namespace troupe {

class NgramDrafter {
 public:
  explicit NgramDrafter(int32_t n_max = 4, int32_t n_min = 2) : n_max_(n_max), n_min_(n_min) {}

  // Up to k tokens to follow `history`; empty when no n-gram recurs.
  std::vector<int32_t> propose(std::span<const int32_t> history, int32_t k) const;

 private:
  int32_t n_max_, n_min_;
};

}  // namespace troupe
