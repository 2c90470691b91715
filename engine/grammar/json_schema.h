#pragma once
// JSON Schema, OpenAI's json_object and choice lists as GBNF (grammar.h).
//
// Fail closed: a grammar never lets through an instance its schema rejects.
// Whatever keyword, pattern or combination cannot be held (uniqueItems over
// an open item language, overlapping oneOf branches without a negatable
// form, remote references, ...) throws SchemaError naming it. What is
// supported, the two profiles, the regex subset, the formats and the
// test-suite results: docs/JSON_SCHEMA.md.
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::grammar {

// A schema keyword or pattern the engine cannot enforce, or a malformed
// schema: refused, never half-enforced. `keyword` e.g. "uniqueItems";
// `pointer` a JSON Pointer ("/properties/tags"; "" is the whole schema).
class SchemaError : public std::invalid_argument {
 public:
  SchemaError(std::string keyword, std::string pointer, const std::string& why);
  const std::string& keyword() const { return keyword_; }
  const std::string& pointer() const { return pointer_; }

 private:
  std::string keyword_, pointer_;
};  // what() = "<pointer or '/'>: <keyword>: <why>"

struct SchemaLimits {
  size_t max_schema_bytes = 4 << 20;
  size_t max_grammar_bytes = 1 << 20;  // compile_gbnf's own default (GrammarLimits)
  int max_depth = 64;  // nesting of subschemas, and of $ref and allOf/anyOf chains
};

// Which JSON texts a schema's grammar accepts (docs/JSON_SCHEMA.md, "Profiles").
struct SchemaOptions {
  // false, the generation profile (the default; what the server decodes with):
  // a canonical subset of the valid instances, as OpenAI's structured outputs
  // and xgrammar's strict mode write them: no properties the schema does not
  // name unless additionalProperties says so, declared properties first and in
  // their declared order, one spelling per string, `{"a": 1, "b": [1, 2]}`
  // layout (", " and ": ", no other whitespace), integers as integers,
  // bounded numbers in plain decimal. Every text it accepts validates.
  // true, the exact profile: every valid instance, in any JSON spelling and
  // with bounded whitespace, under the conventions the docs list (declared
  // order, integers as integers, bounded numbers in plain decimal).
  bool exact = false;
};

// GBNF text whose rule `root` is the instance, per `options`; throws
// SchemaError for what cannot be enforced (docs/JSON_SCHEMA.md).
std::string json_schema_to_gbnf(std::string_view schema_json, const SchemaLimits& limits = {},
                                const SchemaOptions& options = {});
// Any JSON object (OpenAI's response_format json_object), laid out per `options`.
std::string json_object_gbnf(const SchemaOptions& options = {});
// root = one of the strings, exactly. Throws std::invalid_argument for an
// empty list or a string that is not UTF-8.
std::string choice_to_gbnf(const std::vector<std::string>& choices);

// Whether JSON texts are instances of a schema, with members in any order:
// what a batch job's check validates (text_check.h). It takes what a grammar
// cannot enforce (uniqueItems of any items, several patterns on a string)
// and refuses, when built, any schema with a keyword or pattern it cannot
// check (the same SchemaError), so none is half-checked.
class SchemaValidator {
 public:
  explicit SchemaValidator(std::string_view schema_json, const SchemaLimits& limits = {});
  ~SchemaValidator();
  SchemaValidator(SchemaValidator&&) noexcept;
  SchemaValidator& operator=(SchemaValidator&&) noexcept;
  bool validates(std::string_view instance_json);  // false for text that is not one JSON value

 private:
  struct Impl;  // the converter, whose header stays out of this one
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::grammar
