#pragma once
// Drafting from history (SuffixDecoding, Oliaro et al. 2024): a tree of every
// suffix of earlier token sequences (a session's turns, a job's finished
// items, the server's recent outputs), cut at `depth` tokens, each node
// counting the suffixes that pass through it. Asked with a sequence's tail, it
// finds the longest stretch of that tail the history holds, then follows the
// most frequent continuation while its estimated probability (the product of
// child count / parent count along the path) stays above a floor: long
// drafts where history agrees, short or none where it does not.
//
// Memory: 16 bytes a node and up to `depth` nodes a token (fewer where
// sequences share text), plus the tokens kept for eviction; bytes() reports
// what a tree holds, and a tree over `max_tokens` drops its oldest sequences.
//
// A tree serializes as its sequences with a checksum (the trie is rebuilt on
// load, ~1 µs a token); a damaged record is refused with an error, never half
// read.
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe {

struct SuffixDraft {
  std::vector<int32_t> tokens;
  int32_t match = 0;     // tokens of the tail the tree matched
  double score = 0;      // expected accepted tokens: the sum of the path's probabilities
};

class SuffixTree {
 public:
  static constexpr int32_t kDefaultDepth = 24;
  explicit SuffixTree(int32_t depth = kDefaultDepth, int64_t max_tokens = int64_t{1} << 20);

  // Starts a new sequence (a turn, an item's output) and appends to it; the
  // open sequence's suffixes count as soon as its tokens arrive.
  void begin();
  void append(std::span<const int32_t> tokens);
  void append(int32_t token) { append(std::span<const int32_t>(&token, 1)); }
  // A whole sequence at once: begin() then append().
  void add(std::span<const int32_t> tokens) {
    begin();
    append(tokens);
  }

  // Up to `max_draft` tokens to follow `tail`. The draft stops where the
  // path's probability falls under `min_probability`, and at
  // `per_match` × the matched length (short matches are weak evidence).
  // `tail_is_open`: the tree's open sequence ends with `tail` (a request's
  // own tree), whose occurrence there has no continuation yet and is not
  // counted against the ones that do.
  SuffixDraft propose(std::span<const int32_t> tail, int32_t max_draft, double min_probability = 0.1,
                      double per_match = 2.0, bool tail_is_open = false) const;

  // The sequence appended to last (empty: none).
  std::span<const int32_t> open_sequence() const {
    return seqs_.empty() ? std::span<const int32_t>() : std::span<const int32_t>(seqs_.back());
  }
  int64_t tokens() const { return tokens_; }
  int64_t sequences() const { return static_cast<int64_t>(seqs_.size()); }
  int64_t nodes() const { return live_nodes_; }
  int64_t bytes() const;
  int32_t depth() const { return depth_; }
  int64_t max_tokens() const { return max_tokens_; }
  void clear();

  std::string serialize() const;
  // Throws std::runtime_error naming what is wrong (checksum, version, a
  // token out of range) for a damaged record.
  static SuffixTree parse(std::string_view bytes, int64_t max_tokens = int64_t{1} << 20);

 private:
  struct Node {
    uint32_t count = 0;
    int32_t token = 0;
    uint32_t first_child = 0;  // 0: none (node 0 is the root)
    uint32_t next_sibling = 0;
  };
  uint32_t child(uint32_t parent, int32_t token) const;
  uint32_t child_or_add(uint32_t parent, int32_t token);
  void unlink(uint32_t parent, uint32_t node);
  // The open sequence's token `t` extends each suffix path that ends at the
  // token before it (open_paths_) and starts one of its own: O(depth) a token.
  void count_token(int32_t t);
  // Uncounts every suffix path of a whole sequence that leaves the tree.
  void uncount(const std::vector<int32_t>& seq);
  void evict_oldest();

  int32_t depth_;
  int64_t max_tokens_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> free_;
  std::unordered_map<int32_t, uint32_t> root_children_;  // the root has a vocabulary's branching
  std::deque<std::vector<int32_t>> seqs_;
  std::vector<uint32_t> open_paths_;  // nodes of the open sequence's suffixes ending at its last token, longest first
  int64_t tokens_ = 0, live_nodes_ = 0;
};

// The best of several trees' drafts (a request's own, its session's or
// job's, the server's): the one that promises the most accepted tokens,
// none where that is under kMinSuffixDraftScore. A server-wide tree matches
// something in almost any text; on open chat its weak drafts cost the 1.5B
// on 2 cores 13 % with suffix and 7 % with auto, and with the floor
// nothing (docs/BENCHMARKS.md, "Suffix speculation").
// `open`: the tree among them whose open sequence ends with `tail`.
constexpr double kMinSuffixDraftScore = 1.5;
SuffixDraft best_suffix_draft(std::span<const SuffixTree* const> trees, std::span<const int32_t> tail,
                              int32_t max_draft, const SuffixTree* open = nullptr);

}  // namespace troupe
