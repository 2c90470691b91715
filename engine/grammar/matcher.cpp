#include "engine/grammar/matcher.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace troupe::grammar {

size_t TokenMask::count() const {
  size_t n = 0;
  for (uint64_t w : bits) n += static_cast<size_t>(std::popcount(w));
  return n;
}

GrammarIndex::GrammarIndex(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie)
    : trie_(std::move(trie)), machine_(std::move(g)) {
  walk_.resize(trie_->max_depth() + 1);
}

std::shared_ptr<const TokenMask> GrammarIndex::mask(State s) {
  if (auto it = masks_.find(s); it != masks_.end()) return it->second;
  auto m = std::make_shared<TokenMask>();
  m->bits.assign((static_cast<size_t>(trie_->vocabulary_size()) + 63) / 64, 0);
  const std::vector<TokenTrie::Node>& nodes = trie_->nodes();
  const std::vector<int32_t>& ids = trie_->token_ids();
  walk_[0] = s;
  const auto n = static_cast<int32_t>(nodes.size());
  for (int32_t i = 1; i < n;) {
    const TokenTrie::Node& node = nodes[static_cast<size_t>(i)];
    const State from = walk_[node.depth - 1u];
    // The common refusal is decided by the state's byte set alone.
    if (!machine_.next_bytes(from).has(node.byte)) {
      i = node.subtree_end;
      continue;
    }
    const State to = machine_.step(from, node.byte);
    if (to == StackMachine::kDead) {
      i = node.subtree_end;
      continue;
    }
    walk_[node.depth] = to;
    for (int32_t t = node.first_token; t < node.end_token; ++t) {
      const int32_t id = ids[static_cast<size_t>(t)];
      m->bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    ++i;
  }
  if (machine_.accepts(s))
    for (int32_t id : trie_->end_of_generation()) m->bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  const size_t bytes = m->bits.size() * sizeof(uint64_t);
  if (mask_bytes_ + bytes <= kMaxMaskBytes) {
    masks_.emplace(s, m);
    mask_bytes_ += bytes;
  }
  return m;
}

GrammarIndex::State GrammarIndex::after_token(State s, int32_t token) {
  if (token < 0 || token >= trie_->vocabulary_size()) return StackMachine::kDead;
  const std::string& b = trie_->bytes(token);
  if (b.empty()) return StackMachine::kDead;
  return machine_.walk(s, b);
}

Matcher::Matcher(std::shared_ptr<GrammarIndex> index) : index_(std::move(index)) {
  std::lock_guard lock(index_->lock_);
  state_ = index_->machine_.start();
}

bool Matcher::can_end() const {
  std::lock_guard lock(index_->lock_);
  return !finished_ && index_->machine_.accepts(state_);
}

bool Matcher::allows(int32_t token) {
  if (finished_) return false;
  std::lock_guard lock(index_->lock_);
  const std::vector<int32_t>& eog = index_->trie_->end_of_generation();
  if (std::binary_search(eog.begin(), eog.end(), token)) return index_->machine_.accepts(state_);
  return index_->after_token(state_, token) != StackMachine::kDead;
}

bool Matcher::accept(int32_t token) {
  if (finished_) return false;
  std::lock_guard lock(index_->lock_);
  const std::vector<int32_t>& eog = index_->trie_->end_of_generation();
  if (std::binary_search(eog.begin(), eog.end(), token)) {
    if (!index_->machine_.accepts(state_)) return false;
    finished_ = true;
    return true;
  }
  const StackMachine::State next = index_->after_token(state_, token);
  if (next == StackMachine::kDead) return false;
  state_ = next;
  return true;
}

std::shared_ptr<const TokenMask> Matcher::allowed() {
  std::lock_guard lock(index_->lock_);
  if (finished_) {
    auto none = std::make_shared<TokenMask>();
    none->bits.assign((static_cast<size_t>(index_->trie_->vocabulary_size()) + 63) / 64, 0);
    return none;
  }
  return index_->mask(state_);
}

bool Matcher::apply(std::span<float> logits) {
  const std::vector<int32_t> forced = forced_tokens(1);
  if (!forced.empty()) {
    for (size_t i = 0; i < logits.size(); ++i)
      if (static_cast<int32_t>(i) != forced[0]) logits[i] = -std::numeric_limits<float>::infinity();
    return static_cast<size_t>(forced[0]) < logits.size();
  }
  const std::shared_ptr<const TokenMask> m = allowed();
  const size_t n = std::min(logits.size(), static_cast<size_t>(index_->trie_->vocabulary_size()));
  bool any = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const bool ok = i < n && ((m->bits[i >> 6] >> (i & 63)) & 1);
    if (!ok) logits[i] = -std::numeric_limits<float>::infinity();
    any = any || ok;
  }
  return any;
}

std::vector<int32_t> Matcher::forced_tokens(size_t max) const {
  std::vector<int32_t> out;
  if (finished_ || max == 0) return out;
  std::lock_guard lock(index_->lock_);
  StackMachine& m = index_->machine_;
  // The bytes every continuation starts with: states that cannot end here
  // and can take exactly one byte.
  std::string forced;
  StackMachine::State s = state_;
  while (forced.size() < 1024 && !m.accepts(s)) {
    const ByteSet& next = m.next_bytes(s);
    int count = 0, only = 0;
    for (int w = 0; w < 4 && count < 2; ++w) {
      count += std::popcount(next.bits[w]);
      if (next.bits[w]) only = w * 64 + std::countr_zero(next.bits[w]);
    }
    if (count != 1) break;
    forced += static_cast<char>(only);
    s = m.step(s, static_cast<uint8_t>(only));
  }
  std::vector<int32_t> pieces;
  for (size_t at = 0; at < forced.size();) {
    const auto [token, len] = index_->trie_->longest_prefix(std::string_view(forced).substr(at));
    if (token < 0) break;
    pieces.push_back(token);
    at += len;
  }
  if (!pieces.empty()) pieces.pop_back();  // the model chooses how the run ends
  if (pieces.size() > max) pieces.resize(max);
  return pieces;
}

int32_t mask_window(const Matcher& m, std::span<const int32_t> drafts, const std::function<std::span<float>(int32_t)>& row) {
  Matcher probe = m;
  const auto k = static_cast<int32_t>(drafts.size());
  for (int32_t i = 0; i <= k; ++i) {
    if (!probe.apply(row(i))) return i - 1;
    if (i < k && !probe.accept(drafts[static_cast<size_t>(i)])) return i;
  }
  return k;
}

}  // namespace troupe::grammar
