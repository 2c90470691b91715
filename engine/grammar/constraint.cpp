#include "engine/grammar/constraint.h"

#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex_to_gbnf.h"
#include "engine/grammar/utf8_ranges.h"

namespace troupe::grammar {

const char* kind_name(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::none: return "none";
    case ConstraintKind::grammar: return "grammar";
    case ConstraintKind::json_schema: return "json_schema";
    case ConstraintKind::regex: return "regex";
    case ConstraintKind::choice: return "choice";
    case ConstraintKind::json_object: return "json_object";
  }
  return "unknown";
}

std::string constraint_gbnf(const Constraint& c) {
  switch (c.kind) {
    case ConstraintKind::none: return "";
    case ConstraintKind::grammar: return c.text;
    case ConstraintKind::json_schema: return json_schema_to_gbnf(c.text);
    case ConstraintKind::regex: return regex_to_gbnf(c.text);
    case ConstraintKind::choice:
      if (c.choices.empty()) throw GrammarError("a choice needs at least one string");
      return choice_to_gbnf(c.choices);
    case ConstraintKind::json_object: return json_object_gbnf();
  }
  throw GrammarError("unknown constraint kind " + std::to_string(static_cast<int>(c.kind)));
}

std::shared_ptr<const Grammar> GrammarCache::get(const std::string& gbnf) {
  const std::string key = text_hash(gbnf);
  {
    std::lock_guard lock(lock_);
    if (auto it = by_hash_.find(key); it != by_hash_.end()) {
      // The text itself decides: a hash is only where to look.
      const std::shared_ptr<const Grammar> g = it->second->second;
      if (g->source == gbnf) {
        order_.splice(order_.begin(), order_, it->second);
        return g;
      }
    }
  }
  auto compiled = compile_gbnf(gbnf);  // outside the lock: compiling may take a while
  std::lock_guard lock(lock_);
  ++compiled_;
  if (auto it = by_hash_.find(key); it != by_hash_.end()) {
    order_.erase(it->second);
    by_hash_.erase(it);
  }
  order_.emplace_front(key, compiled);
  by_hash_[key] = order_.begin();
  while (order_.size() > capacity_) {
    by_hash_.erase(order_.back().first);
    order_.pop_back();
  }
  return compiled;
}

}  // namespace troupe::grammar
