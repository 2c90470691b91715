#pragma once
// A model's vocabulary as a trie of the tokens' bytes, stored in preorder so
// a grammar walks it with one loop: a node whose byte the grammar refuses
// skips its whole subtree. Built once per model and shared by every grammar.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace troupe {
class Tokenizer;
}

namespace troupe::grammar {

class TokenTrie {
 public:
  // `bytes[id]`: what token `id` writes; an empty string (control tokens,
  // unused ids) is never offered to a grammar. `end_of_generation`: the
  // tokens that end an answer, allowed exactly where the grammar is whole.
  TokenTrie(const std::vector<std::string>& bytes, std::vector<int32_t> end_of_generation);

  int32_t vocabulary_size() const { return n_vocab_; }
  const std::vector<int32_t>& end_of_generation() const { return eog_; }
  const std::string& bytes(int32_t token) const { return bytes_[static_cast<size_t>(token)]; }

  // Preorder nodes; node 0 is the root (no byte).
  struct Node {
    uint8_t byte;
    uint16_t depth;
    int32_t subtree_end;  // the next node not under this one
    int32_t first_token, end_token;  // tokens ending here: ids_[first_token, end_token)
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return ids_; }
  size_t max_depth() const { return max_depth_; }

  // The longest token whose bytes start `text` (0 when none does).
  std::pair<int32_t, size_t> longest_prefix(std::string_view text) const;

 private:
  int32_t n_vocab_ = 0;
  std::vector<std::string> bytes_;
  std::vector<int32_t> eog_;
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  size_t max_depth_ = 0;
};

// The trie of a model's tokenizer: normal, byte and user-defined tokens by
// their bytes; control, unknown and unused tokens left out.
std::shared_ptr<const TokenTrie> token_trie_of(const Tokenizer& tokenizer);

}  // namespace troupe::grammar
