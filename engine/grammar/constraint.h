#pragma once
// What a request constrains its output to, and the grammar that enforces it.
// Every kind lowers to GBNF text (the one form the matcher runs), so the
// worker needs only the text, and a compiled grammar is cached by it.
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar.h"

namespace troupe::grammar {

enum class ConstraintKind : uint8_t { none = 0, grammar = 1, json_schema = 2, regex = 3, choice = 4, json_object = 5 };

struct Constraint {
  ConstraintKind kind = ConstraintKind::none;
  std::string text;                  // grammar: GBNF; json_schema: the schema; regex: the pattern
  std::vector<std::string> choices;  // choice
  bool operator==(const Constraint&) const = default;
};

const char* kind_name(ConstraintKind kind);

// The GBNF that enforces `c` (empty for none). Throws GrammarError or
// SchemaError (json_schema.h) for what cannot be enforced exactly.
std::string constraint_gbnf(const Constraint& c);

// Compiled grammars by their text, least recently used dropped past
// `capacity`: a batch job's thousand items compile once.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 64) : capacity_(capacity) {}
  std::shared_ptr<const Grammar> get(const std::string& gbnf);  // throws GrammarError
  size_t compiled() const { return compiled_; }                  // compilations so far (misses)

 private:
  std::mutex lock_;
  size_t capacity_;
  size_t compiled_ = 0;
  std::list<std::pair<std::string, std::shared_ptr<const Grammar>>> order_;  // most recent first
  std::unordered_map<std::string, decltype(order_)::iterator> by_hash_;
};

}  // namespace troupe::grammar
