#pragma once
// Constrained decoding for one sequence: which tokens its grammar allows
// next, as a mask over the whole vocabulary, and the tokens it forces.
//
// A GrammarIndex is one compiled grammar against one vocabulary, shared by
// every sequence under that grammar (a batch job's thousand items): its
// automaton (stack_machine.h) and its masks, cached by automaton state, are
// computed once. Masks walk the token trie (token_trie.h) and skip every
// subtree whose first byte the grammar refuses.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/grammar/stack_machine.h"
#include "engine/grammar/token_trie.h"

namespace troupe::grammar {

// One bit per token of the vocabulary.
struct TokenMask {
  std::vector<uint64_t> bits;
  bool allows(int32_t token) const { return (bits[static_cast<size_t>(token) >> 6] >> (token & 63)) & 1; }
  size_t count() const;
};

class GrammarIndex {
 public:
  GrammarIndex(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie);
  const TokenTrie& trie() const { return *trie_; }
  const Grammar& grammar() const { return machine_.grammar(); }

 private:
  friend class Matcher;
  using State = StackMachine::State;
  std::shared_ptr<const TokenMask> mask(State s);  // under lock_
  State after_token(State s, int32_t token);       // under lock_

  std::mutex lock_;
  std::shared_ptr<const TokenTrie> trie_;
  StackMachine machine_;
  std::unordered_map<State, std::shared_ptr<const TokenMask>> masks_;
  size_t mask_bytes_ = 0;
  std::vector<State> walk_;  // scratch: the state at each depth of the trie walk
  static constexpr size_t kMaxMaskBytes = size_t{64} << 20;  // ~3,400 masks of a 152K vocabulary
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<GrammarIndex> index);

  // The token is taken if the grammar allows it here (false: refused, the
  // state unchanged). An end-of-generation token is allowed where the text
  // is whole, and finishes the matcher.
  bool accept(int32_t token);
  // Whether `token` could be taken now (drafts are checked before verifying).
  bool allows(int32_t token);
  // The allowed tokens now; empty when the grammar is finished.
  std::shared_ptr<const TokenMask> allowed();
  // Sets the logits of tokens the grammar refuses to -infinity (the mask is
  // the last word: -infinity stays so through penalties, biases and
  // temperature). Where the grammar forces tokens (forced_tokens), every
  // logit but the first forced token's. False: it allows none.
  bool apply(std::span<float> logits);

  bool can_end() const;   // the text so far is a whole sentence
  bool finished() const { return finished_; }
  // Jump-forward: where the grammar allows exactly one continuation of
  // bytes, the tokens that write it (at most `max`), longest tokens first,
  // less the last piece, which the model chooses (it may join it with what
  // follows). Deterministic in the state, so that a token decided here is
  // the same whether it is appended ahead (jump-forward) or verified in a
  // draft window: constrained output does not depend on speculation.
  std::vector<int32_t> forced_tokens(size_t max) const;

 private:
  std::shared_ptr<GrammarIndex> index_;
  StackMachine::State state_;
  bool finished_ = false;
};

// A verify window [last token, d1..dk] under a grammar: row i (the logits
// after d1..di) is masked in the state those drafts lead to, so a draft the
// grammar refuses has probability 0 and is never accepted; rows past it are
// never read. Returns how many drafts are worth verifying (a row that allows
// nothing ends them), or -1 when even row 0 allows nothing.
int32_t mask_window(const Matcher& m, std::span<const int32_t> drafts, const std::function<std::span<float>(int32_t)>& row);

}  // namespace troupe::grammar
