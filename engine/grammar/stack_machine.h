#pragma once
// A grammar run as a lazily built automaton over bytes. Its states are sets
// of parse stacks (a graph-structured stack: nodes shared and interned, so
// equal stacks are one node), and each state's transitions are memoized as
// they are first taken. A grammar that repeats itself (JSON's string
// characters, an object's fields) returns to states it has seen, so after
// the first few tokens almost every step is a table lookup.
//
// Right recursion does not deepen the stack (a rule reference that ends its
// alternative is a tail call), so `x*` runs in constant space.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/grammar/grammar.h"

namespace troupe::grammar {

class StackMachine {
 public:
  using State = int32_t;
  static constexpr State kDead = -1;

  explicit StackMachine(std::shared_ptr<const Grammar> g);

  State start() const { return start_; }
  State step(State s, uint8_t byte) {
    const std::unique_ptr<std::array<State, 256>>& t = states_[static_cast<size_t>(s)].next;
    if (t && (*t)[byte] != kUnknown) return (*t)[byte];
    return step_slow(s, byte);
  }
  State walk(State s, std::string_view bytes) {
    for (char c : bytes) {
      if (s == kDead) break;
      s = step(s, static_cast<uint8_t>(c));
    }
    return s;
  }
  bool accepts(State s) const { return states_[static_cast<size_t>(s)].accept; }  // the text so far is whole
  const ByteSet& next_bytes(State s) const { return states_[static_cast<size_t>(s)].bytes; }
  const Grammar& grammar() const { return *g_; }
  size_t states() const { return states_.size(); }

  // Past these a hostile grammar (ever deeper nesting) stops growing the
  // machine: step() throws GrammarError.
  static constexpr size_t kMaxNodes = size_t{4} << 20;
  static constexpr size_t kMaxStates = size_t{1} << 20;
  static constexpr size_t kMaxTables = size_t{1} << 16;  // memoized rows (1 KiB each)
  // Parse stacks one state may hold. Grammars people write hold tens to
  // thousands; nested repetitions of one item ((((x)+)+)+...) double them at
  // each level, and would take seconds to reach the node limit.
  static constexpr size_t kMaxStacksPerState = size_t{1} << 16;

 private:
  static constexpr State kUnknown = -2;
  struct Node {
    int32_t pos, parent;  // element to match next; the stack below (-1: the bottom)
  };
  struct StateData {
    std::vector<int32_t> tops;  // stacks, by node; each top is a `bytes` element
    bool accept = false;
    ByteSet bytes;  // the bytes some stack can take next
    std::unique_ptr<std::array<State, 256>> next;
  };

  State step_slow(State s, uint8_t byte);
  int32_t node(int32_t pos, int32_t parent);
  void expand(int32_t pos, int32_t parent, std::vector<int32_t>& tops, bool& accept);
  State intern(std::vector<int32_t> tops, bool accept);

  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<StateData> states_;
  std::map<std::pair<bool, std::vector<int32_t>>, State> state_ids_;
  size_t tables_ = 0;
  State start_ = kDead;
  // Scratch for expand(), kept to spare allocations.
  std::vector<std::pair<int32_t, int32_t>> work_;
  std::unordered_set<uint64_t> seen_;
};

}  // namespace troupe::grammar
