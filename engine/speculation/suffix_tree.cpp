#include "engine/speculation/suffix_tree.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace troupe {
namespace {

constexpr char kTreeMagic[4] = {'T', 'S', 'F', 'X'};
constexpr uint8_t kTreeVersion = 1;

uint64_t fnv1a(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : bytes) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Reads a varint at `at`; throws on a truncated or overlong one.
uint64_t get_varint(std::string_view in, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at >= in.size()) throw std::runtime_error("suffix tree record is truncated");
    const auto byte = static_cast<uint8_t>(in[at++]);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return v;
  }
  throw std::runtime_error("suffix tree record has an overlong number");
}

}  // namespace

SuffixTree::SuffixTree(int32_t depth, int64_t max_tokens) : depth_(std::max(depth, 2)), max_tokens_(max_tokens) {
  nodes_.emplace_back();  // the root
}

void SuffixTree::clear() {
  // Its memory goes too: bytes() is what a tree holds.
  nodes_ = std::vector<Node>(1);
  free_ = {};
  root_children_ = {};
  seqs_ = {};
  open_paths_.clear();
  tokens_ = live_nodes_ = 0;
}

uint32_t SuffixTree::child(uint32_t parent, int32_t token) const {
  if (parent == 0) {
    const auto it = root_children_.find(token);
    return it == root_children_.end() ? 0 : it->second;
  }
  for (uint32_t c = nodes_[parent].first_child; c != 0; c = nodes_[c].next_sibling)
    if (nodes_[c].token == token) return c;
  return 0;
}

uint32_t SuffixTree::child_or_add(uint32_t parent, int32_t token) {
  if (const uint32_t c = child(parent, token)) return c;
  uint32_t c;
  if (!free_.empty()) {
    c = free_.back();
    free_.pop_back();
  } else {
    c = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[c] = Node{0, token, 0, 0};
  if (parent == 0) {
    root_children_.emplace(token, c);
  } else {
    nodes_[c].next_sibling = nodes_[parent].first_child;
    nodes_[parent].first_child = c;
  }
  ++live_nodes_;
  return c;
}

void SuffixTree::unlink(uint32_t parent, uint32_t node) {
  if (parent == 0) {
    root_children_.erase(nodes_[node].token);
  } else if (nodes_[parent].first_child == node) {
    nodes_[parent].first_child = nodes_[node].next_sibling;
  } else {
    uint32_t c = nodes_[parent].first_child;
    while (c != 0 && nodes_[c].next_sibling != node) c = nodes_[c].next_sibling;
    if (c != 0) nodes_[c].next_sibling = nodes_[node].next_sibling;
  }
  free_.push_back(node);
  --live_nodes_;
}

void SuffixTree::count_token(int32_t t) {
  // A path already `depth` long ends here; the rest grow by t, and t starts one.
  if (static_cast<int32_t>(open_paths_.size()) >= depth_) open_paths_.erase(open_paths_.begin());
  for (uint32_t& node : open_paths_) {
    node = child_or_add(node, t);
    ++nodes_[node].count;
  }
  const uint32_t start = child_or_add(0, t);
  ++nodes_[start].count;
  open_paths_.push_back(start);
}

// Each suffix path top down: a node whose count reaches zero is passed by
// no other path, so later walks never need it.
void SuffixTree::uncount(const std::vector<int32_t>& seq) {
  const auto depth = static_cast<size_t>(depth_);
  for (size_t j = 0; j < seq.size(); ++j) {
    uint32_t parent = 0;
    for (size_t i = j; i < std::min(seq.size(), j + depth); ++i) {
      const uint32_t node = child(parent, seq[i]);
      if (node == 0) break;  // cannot happen for a sequence that was counted
      if (--nodes_[node].count == 0) unlink(parent, node);
      parent = node;
    }
  }
}

void SuffixTree::begin() {
  open_paths_.clear();
  if (!seqs_.empty() && seqs_.back().empty()) return;
  seqs_.emplace_back();
}

void SuffixTree::append(std::span<const int32_t> tokens) {
  if (seqs_.empty()) seqs_.emplace_back();
  std::vector<int32_t>& seq = seqs_.back();
  // One sequence longer than the whole budget keeps its first max_tokens.
  const auto room = static_cast<size_t>(std::max<int64_t>(0, max_tokens_ - static_cast<int64_t>(seq.size())));
  tokens = tokens.first(std::min(tokens.size(), room));
  seq.insert(seq.end(), tokens.begin(), tokens.end());
  for (const int32_t t : tokens) count_token(t);
  tokens_ += static_cast<int64_t>(tokens.size());
  while (tokens_ > max_tokens_ && seqs_.size() > 1) evict_oldest();
}

void SuffixTree::evict_oldest() {
  std::vector<int32_t> oldest = std::move(seqs_.front());
  seqs_.pop_front();
  uncount(oldest);
  tokens_ -= static_cast<int64_t>(oldest.size());
}

SuffixDraft SuffixTree::propose(std::span<const int32_t> tail, int32_t max_draft, double min_probability,
                                double per_match, bool tail_is_open) const {
  SuffixDraft best;
  if (max_draft <= 0 || tail.empty()) return best;
  // The longest stretch of the tail the history holds, with something after
  // it, and short enough to leave a full draft below it: the tree keeps
  // paths of `depth` tokens, so a match of depth - 1 could draft one token
  // (where output copies its prompt every match is that long). At least
  // half the depth stays for the match.
  const auto longest = std::min<int64_t>(static_cast<int64_t>(tail.size()), depth_ - std::min(max_draft, depth_ / 2));
  uint32_t at = 0;
  int64_t match = 0;
  for (int64_t m = longest; m >= 1 && match == 0; --m) {
    uint32_t node = 0;
    for (size_t i = tail.size() - static_cast<size_t>(m); i < tail.size(); ++i)
      if ((node = child(node, tail[i])) == 0) break;
    if (node != 0 && nodes_[node].first_child != 0) {
      at = node;
      match = m;
    }
  }
  if (match == 0) return best;
  best.match = static_cast<int32_t>(match);
  const auto limit = std::min<int64_t>({max_draft, static_cast<int64_t>(std::floor(per_match * static_cast<double>(match))),
                                        depth_ - match});
  double probability = 1.0;
  while (static_cast<int64_t>(best.tokens.size()) < limit) {
    uint32_t next = 0;
    for (uint32_t c = nodes_[at].first_child; c != 0; c = nodes_[c].next_sibling)
      if (next == 0 || nodes_[c].count > nodes_[next].count) next = c;
    if (next == 0) break;
    // The open tail's own occurrence ends at the matched node, below it none.
    const uint32_t seen = nodes_[at].count - (tail_is_open && best.tokens.empty() && nodes_[at].count > 1 ? 1 : 0);
    probability *= static_cast<double>(nodes_[next].count) / static_cast<double>(seen);
    if (probability < min_probability) break;
    best.tokens.push_back(nodes_[next].token);
    best.score += probability;
    at = next;
  }
  return best;
}

int64_t SuffixTree::bytes() const {
  constexpr int64_t kMapEntry = 40;  // an unordered_map node and its bucket, roughly
  int64_t seq_bytes = 0;
  for (const auto& s : seqs_) seq_bytes += static_cast<int64_t>(s.capacity() * sizeof(int32_t) + sizeof(s));
  return static_cast<int64_t>(nodes_.capacity() * sizeof(Node) + free_.capacity() * sizeof(uint32_t)) +
         static_cast<int64_t>(root_children_.size()) * kMapEntry + seq_bytes;
}

std::string SuffixTree::serialize() const {
  std::string out(kTreeMagic, sizeof(kTreeMagic));
  out.push_back(static_cast<char>(kTreeVersion));
  put_varint(out, static_cast<uint64_t>(depth_));
  put_varint(out, seqs_.size());
  for (const auto& s : seqs_) {
    put_varint(out, s.size());
    for (const int32_t t : s) put_varint(out, static_cast<uint32_t>(t));
  }
  const uint64_t sum = fnv1a(out);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((sum >> (8 * i)) & 0xff));
  return out;
}

SuffixTree SuffixTree::parse(std::string_view bytes, int64_t max_tokens) {
  if (bytes.size() < sizeof(kTreeMagic) + 1 + 8 || bytes.substr(0, sizeof(kTreeMagic)) != std::string_view(kTreeMagic, sizeof(kTreeMagic)))
    throw std::runtime_error("not a suffix tree record");
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  uint64_t sum = 0;
  for (int i = 0; i < 8; ++i) sum |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[body.size() + i])) << (8 * i);
  if (sum != fnv1a(body)) throw std::runtime_error("suffix tree record is damaged (checksum mismatch)");
  if (static_cast<uint8_t>(body[sizeof(kTreeMagic)]) != kTreeVersion)
    throw std::runtime_error("suffix tree record has version " + std::to_string(static_cast<uint8_t>(body[sizeof(kTreeMagic)])) +
                             "; this troupe reads version " + std::to_string(kTreeVersion));
  size_t at = sizeof(kTreeMagic) + 1;
  const uint64_t depth = get_varint(body, at);
  if (depth < 2 || depth > 1024) throw std::runtime_error("suffix tree record has depth " + std::to_string(depth));
  SuffixTree tree(static_cast<int32_t>(depth), max_tokens);
  const uint64_t n_seqs = get_varint(body, at);
  std::vector<int32_t> seq;
  for (uint64_t s = 0; s < n_seqs; ++s) {
    const uint64_t len = get_varint(body, at);
    if (len > body.size() - at) throw std::runtime_error("suffix tree record is truncated");
    seq.clear();
    for (uint64_t i = 0; i < len; ++i) {
      const uint64_t t = get_varint(body, at);
      if (t > static_cast<uint64_t>(INT32_MAX)) throw std::runtime_error("suffix tree record holds a token out of range");
      seq.push_back(static_cast<int32_t>(t));
    }
    tree.add(seq);
  }
  if (at != body.size()) throw std::runtime_error("suffix tree record has trailing bytes");
  return tree;
}

SuffixDraft best_suffix_draft(std::span<const SuffixTree* const> trees, std::span<const int32_t> tail,
                              int32_t max_draft, const SuffixTree* open) {
  SuffixDraft best;
  for (const SuffixTree* t : trees) {
    if (!t) continue;
    SuffixDraft d = t->propose(tail, max_draft, 0.1, 2.0, t == open);
    if (d.score > best.score) best = std::move(d);
  }
  if (best.score < kMinSuffixDraftScore) return {};
  return best;
}

}  // namespace troupe
