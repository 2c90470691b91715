#include "service/suffix_history.h"

#include <algorithm>

#include "engine/tokenizer.h"

namespace troupe::service {

std::vector<std::vector<int32_t>> seed_from_texts(const Tokenizer& tok, std::span<const std::string_view> newest_first,
                                                  int64_t max_tokens) {
  std::vector<std::vector<int32_t>> out;
  int64_t total = 0;
  for (auto text = newest_first.begin(); text != newest_first.end() && total < max_tokens; ++text) {
    if (text->empty()) continue;
    auto tokens = tok.encode(*text, false, false);
    if (static_cast<int64_t>(tokens.size()) > max_tokens - total) tokens.resize(static_cast<size_t>(max_tokens - total));
    total += static_cast<int64_t>(tokens.size());
    out.push_back(std::move(tokens));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string suffix_scope(const std::string& session_id, const std::string& job_id) {
  if (!session_id.empty()) return "session:" + session_id;
  if (!job_id.empty()) return "job:" + job_id;
  return {};
}

const SuffixTree* SuffixHistory::scope(const std::string& scope) const {
  if (scope.empty()) return nullptr;
  const auto it = scopes_.find(scope);
  return it == scopes_.end() ? nullptr : &it->second.tree;
}

void SuffixHistory::record(const std::string& scope, std::span<const int32_t> output) {
  if (output.empty() || limits_.max_bytes <= 0) return;
  server_.add(output);
  if (!scope.empty()) scope_tree(scope).add(output);
  trim();
}

bool SuffixHistory::seed(const std::string& scope, std::span<const std::vector<int32_t>> outputs) {
  if (scope.empty() || outputs.empty() || limits_.max_bytes <= 0 || scopes_.contains(scope)) return false;
  SuffixTree& tree = scope_tree(scope);
  for (const auto& o : outputs)
    if (!o.empty()) tree.add(o);
  trim();
  return true;
}

// The scope's tree, made if new, and now the most recently used.
SuffixTree& SuffixHistory::scope_tree(const std::string& scope) {
  auto it = scopes_.find(scope);
  if (it == scopes_.end()) {
    recent_.push_front(scope);
    it = scopes_.emplace(scope, Scope{SuffixTree(SuffixTree::kDefaultDepth, limits_.scope_tokens), recent_.begin()}).first;
  } else {
    recent_.splice(recent_.begin(), recent_, it->second.recent);
  }
  return it->second.tree;
}

int64_t SuffixHistory::bytes() const {
  int64_t total = server_.bytes();
  for (const auto& [name, s] : scopes_) total += s.tree.bytes() + static_cast<int64_t>(name.size());
  return total;
}

int64_t SuffixHistory::tokens() const {
  int64_t total = server_.tokens();
  for (const auto& [name, s] : scopes_) total += s.tree.tokens();
  return total;
}

// Over the budget, the least recently recorded scopes go; then, if the
// server's tree alone is over, its oldest outputs.
void SuffixHistory::trim() {
  int64_t total = bytes();
  while (total > limits_.max_bytes && !recent_.empty()) {
    const auto it = scopes_.find(recent_.back());
    total -= it->second.tree.bytes() + static_cast<int64_t>(it->first.size());
    scopes_.erase(it);
    recent_.pop_back();
  }
  if (total > limits_.max_bytes) server_.clear();
}

}  // namespace troupe::service
