#include "engine/grammar/token_trie.h"

#include <algorithm>
#include <numeric>

#include "engine/tokenizer.h"

namespace troupe::grammar {

TokenTrie::TokenTrie(const std::vector<std::string>& bytes, std::vector<int32_t> end_of_generation)
    : n_vocab_(static_cast<int32_t>(bytes.size())), bytes_(bytes), eog_(std::move(end_of_generation)) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < n_vocab_; ++id)
    if (!bytes_[static_cast<size_t>(id)].empty() && !std::binary_search(eog_.begin(), eog_.end(), id))
      order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const std::string &x = bytes_[static_cast<size_t>(a)], &y = bytes_[static_cast<size_t>(b)];
    return x != y ? x < y : a < b;
  });
  // Sorted strings give the preorder directly: each token adds the nodes
  // past its common prefix with the one before.
  nodes_.push_back({0, 0, 0, 0, 0});
  std::vector<int32_t> path{0};  // node index per depth along the current string
  std::string prev;
  for (int32_t id : order) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < prev.size() && common < s.size() && prev[common] == s[common]) ++common;
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<int32_t>(nodes_.size()));
      const auto token_at = static_cast<int32_t>(ids_.size());
      nodes_.push_back({static_cast<uint8_t>(s[d]), static_cast<uint16_t>(std::min<size_t>(d + 1, 65535)), 0, token_at, token_at});
    }
    max_depth_ = std::max(max_depth_, s.size());
    ids_.push_back(id);
    nodes_[static_cast<size_t>(path.back())].end_token = static_cast<int32_t>(ids_.size());
    if (nodes_[static_cast<size_t>(path.back())].first_token > nodes_[static_cast<size_t>(path.back())].end_token - 1)
      nodes_[static_cast<size_t>(path.back())].first_token = nodes_[static_cast<size_t>(path.back())].end_token - 1;
    prev = s;
  }
  // Subtree ends: the next node at the same or a smaller depth.
  std::vector<int32_t> open;
  for (int32_t i = 0; i < static_cast<int32_t>(nodes_.size()); ++i) {
    while (!open.empty() && nodes_[static_cast<size_t>(open.back())].depth >= nodes_[static_cast<size_t>(i)].depth) {
      nodes_[static_cast<size_t>(open.back())].subtree_end = i;
      open.pop_back();
    }
    open.push_back(i);
  }
  for (int32_t i : open) nodes_[static_cast<size_t>(i)].subtree_end = static_cast<int32_t>(nodes_.size());
}

std::pair<int32_t, size_t> TokenTrie::longest_prefix(std::string_view text) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t at = 0;
  for (size_t d = 0; d < text.size(); ++d) {
    // Children of `at` lie in (at, subtree_end) at depth d + 1, in byte order.
    int32_t child = at + 1, found = -1;
    while (child < nodes_[static_cast<size_t>(at)].subtree_end) {
      if (nodes_[static_cast<size_t>(child)].byte == static_cast<uint8_t>(text[d])) {
        found = child;
        break;
      }
      child = nodes_[static_cast<size_t>(child)].subtree_end;
    }
    if (found < 0) break;
    at = found;
    const Node& n = nodes_[static_cast<size_t>(at)];
    if (n.end_token > n.first_token) best = {ids_[static_cast<size_t>(n.first_token)], d + 1};
  }
  return best;
}

std::shared_ptr<const TokenTrie> token_trie_of(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(tokenizer.size());
  for (int32_t id = 0; id < static_cast<int32_t>(tokenizer.size()); ++id) {
    const TokenType t = tokenizer.token_type(id);
    if (t == TokenType::normal || t == TokenType::byte || t == TokenType::user_defined || t == TokenType::undefined)
      bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  }
  return std::make_shared<TokenTrie>(bytes, tokenizer.end_of_generation_ids());
}

}  // namespace troupe::grammar
