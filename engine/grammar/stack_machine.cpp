#include "engine/grammar/stack_machine.h"

#include <algorithm>

namespace troupe::grammar {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

StackMachine::StackMachine(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  std::vector<int32_t> tops;
  bool accept = false;
  seen_.clear();
  for (int32_t alt : g_->rules[static_cast<size_t>(g_->root)]) expand(alt, -1, tops, accept);
  start_ = intern(std::move(tops), accept);
}

int32_t StackMachine::node(int32_t pos, int32_t parent) {
  auto [it, fresh] = node_ids_.emplace(pair_key(pos, parent), static_cast<int32_t>(nodes_.size()));
  if (fresh) {
    if (nodes_.size() >= kMaxNodes)
      throw GrammarError("the grammar's parse stacks grew past " + std::to_string(kMaxNodes) + " nodes");
    nodes_.push_back({pos, parent});
  }
  return it->second;
}

// Every stack reachable from "match element `pos`, then return to `parent`"
// without reading a byte: rule references push, ends of alternatives pop.
void StackMachine::expand(int32_t pos, int32_t parent, std::vector<int32_t>& tops, bool& accept) {
  const std::vector<Element>& el = g_->elements;
  work_.clear();
  work_.emplace_back(pos, parent);
  while (!work_.empty()) {
    const auto [p, q] = work_.back();
    work_.pop_back();
    if (!seen_.insert(pair_key(p, q)).second) continue;
    const Element& e = el[static_cast<size_t>(p)];
    switch (e.kind) {
      case Element::Kind::bytes:
        tops.push_back(node(p, q));
        break;
      case Element::Kind::end:
        if (q < 0) accept = true;
        else work_.emplace_back(nodes_[static_cast<size_t>(q)].pos, nodes_[static_cast<size_t>(q)].parent);
        break;
      case Element::Kind::rule: {
        // A reference that ends its alternative returns straight to `q`.
        const int32_t cont = el[static_cast<size_t>(p) + 1].kind == Element::Kind::end ? q : node(p + 1, q);
        for (int32_t alt : g_->rules[static_cast<size_t>(e.value)]) work_.emplace_back(alt, cont);
        break;
      }
    }
  }
}

StackMachine::State StackMachine::intern(std::vector<int32_t> tops, bool accept) {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  if (tops.size() > kMaxStacksPerState)
    throw GrammarError("a state of the grammar holds more than " + std::to_string(kMaxStacksPerState) +
                       " parse stacks (repetitions nested too deep?)");
  if (tops.empty() && !accept) return kDead;
  auto key = std::make_pair(accept, tops);
  if (auto it = state_ids_.find(key); it != state_ids_.end()) return it->second;
  if (states_.size() >= kMaxStates)
    throw GrammarError("the grammar's automaton grew past " + std::to_string(kMaxStates) + " states");
  StateData d;
  for (int32_t t : tops) {
    const ByteSet& b = g_->byte_sets[static_cast<size_t>(g_->elements[static_cast<size_t>(nodes_[static_cast<size_t>(t)].pos)].value)];
    for (int w = 0; w < 4; ++w) d.bytes.bits[w] |= b.bits[w];
  }
  d.tops = std::move(tops);
  d.accept = accept;
  const auto id = static_cast<State>(states_.size());
  states_.push_back(std::move(d));
  state_ids_.emplace(std::move(key), id);
  return id;
}

StackMachine::State StackMachine::step_slow(State s, uint8_t byte) {
  State result = kDead;
  if (states_[static_cast<size_t>(s)].bytes.has(byte)) {
    std::vector<int32_t> tops;
    bool accept = false;
    seen_.clear();
    const std::vector<int32_t> from = states_[static_cast<size_t>(s)].tops;  // intern() may grow states_
    for (int32_t t : from) {
      const Node n = nodes_[static_cast<size_t>(t)];
      const ByteSet& b = g_->byte_sets[static_cast<size_t>(g_->elements[static_cast<size_t>(n.pos)].value)];
      if (b.has(byte)) expand(n.pos + 1, n.parent, tops, accept);
    }
    result = intern(std::move(tops), accept);
  }
  StateData& d = states_[static_cast<size_t>(s)];
  if (!d.next && tables_ < kMaxTables) {
    d.next = std::make_unique<std::array<State, 256>>();
    d.next->fill(kUnknown);
    ++tables_;
  }
  if (d.next) (*d.next)[byte] = result;
  return result;
}

bool matches(const Grammar& g, std::string_view text) {
  // A copy the machine can own; tests and tools only.
  StackMachine m(std::make_shared<Grammar>(g));
  const StackMachine::State s = m.walk(m.start(), text);
  return s != StackMachine::kDead && m.accepts(s);
}

}  // namespace troupe::grammar
