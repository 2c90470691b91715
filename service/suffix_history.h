#pragma once
// What the server has written before, for suffix drafting
// (engine/speculation/suffix_tree.h): a tree per scope (a session's turns,
// a job's items) and one server-wide tree of recent outputs, each of a
// bounded number of tokens, all of them together under a byte budget (the
// least recently used scopes go first). A request drafts from its own
// tree, its scope's and the server's; when it ends its output joins its
// scope's tree and the server's, so item 500 of a job drafts from items
// 1-499 and a session's next turn from its earlier answers.
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/speculation/suffix_tree.h"

namespace troupe {
class Tokenizer;
}

namespace troupe::service {

struct SuffixLimits {
  // Up to SuffixTree::kDefaultDepth nodes of 16 bytes a token (fewer where
  // outputs repeat); measured on prose (docs/BENCHMARKS.md) ~520 bytes a
  // token with the vectors' slack: ~8 MiB for a full scope, ~33 MiB for the
  // server's tree.
  int64_t scope_tokens = int64_t{1} << 14;   // a session's or job's tree
  int64_t server_tokens = int64_t{1} << 16;  // the server's tree of recent outputs
  int64_t max_bytes = int64_t{256} << 20;    // every tree together (--suffix-memory); 0: no history kept
};

// A seed for SuffixHistory::seed from stored texts (a session's answers, a
// job's results), given newest first: each tokenized until `max_tokens` are
// taken (the last one cut there), returned oldest first.
std::vector<std::vector<int32_t>> seed_from_texts(const Tokenizer& tokenizer, std::span<const std::string_view> newest_first,
                                                  int64_t max_tokens);

// The scope of a request: "session:<id>", "job:<id>" or "" (none).
std::string suffix_scope(const std::string& session_id, const std::string& job_id);

class SuffixHistory {
 public:
  explicit SuffixHistory(SuffixLimits limits = {}) : limits_(limits), server_(SuffixTree::kDefaultDepth, limits.server_tokens) {}

  // The scope's tree (null: none yet, or no scope) and the server's.
  const SuffixTree* scope(const std::string& scope) const;
  const SuffixTree& server() const { return server_; }
  // A finished output: into its scope's tree (made if new) and the server's.
  void record(const std::string& scope, std::span<const int32_t> output);
  // A scope this server holds no tree for (after a restart, a session's
  // hand-off, or once its tree was trimmed): its tree rebuilt from earlier
  // outputs, oldest first (a session's stored answers, a resumed job's
  // finished items). False, and nothing done, where the tree is held.
  bool seed(const std::string& scope, std::span<const std::vector<int32_t>> outputs);

  int64_t bytes() const;
  int64_t tokens() const;  // in every tree
  size_t scopes() const { return scopes_.size(); }
  const SuffixLimits& limits() const { return limits_; }

 private:
  void trim();
  SuffixTree& scope_tree(const std::string& scope);

  SuffixLimits limits_;
  SuffixTree server_;
  std::list<std::string> recent_;  // scopes, most recently recorded first
  struct Scope {
    SuffixTree tree;
    std::list<std::string>::iterator recent;
  };
  std::unordered_map<std::string, Scope> scopes_;
};

}  // namespace troupe::service
