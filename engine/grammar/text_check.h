#pragma once
// A check of a finished text (a batch job's `check`, docs/CASCADE.md,
// "Checked jobs"): does it match a regex, contain a string, or validate
// against a JSON Schema? The regex runs as the grammar a regex constraint
// compiles to; the schema is one the exact profile converts, and the text
// is validated whole, members in any order (SchemaValidator). A check is
// exact or refused when it is built, never half-applied.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace troupe::grammar {

class StackMachine;
class SchemaValidator;

enum class TextCheckKind : uint8_t { none = 0, regex = 1, contains = 2, json_schema = 3 };
const char* check_kind_name(TextCheckKind kind);

class TextCheck {
 public:
  // Throws SchemaError or GrammarError (both std::invalid_argument) for a
  // pattern or schema that cannot be checked exactly, std::invalid_argument
  // for an empty one.
  TextCheck(TextCheckKind kind, std::string text);
  ~TextCheck();
  TextCheck(TextCheck&&) noexcept;
  TextCheck& operator=(TextCheck&&) noexcept;

  // regex: the whole text matches; contains: it holds the string; json_schema:
  // the text, less surrounding whitespace, is one instance of the schema.
  // Not thread-safe (the automaton grows as it reads).
  bool passes(std::string_view text);
  TextCheckKind kind() const { return kind_; }

 private:
  TextCheckKind kind_;
  std::string text_;
  std::unique_ptr<StackMachine> machine_;      // regex
  std::unique_ptr<SchemaValidator> validator_;  // json_schema
};

}  // namespace troupe::grammar
