#pragma once
// JSON Schema, OpenAI's json_object and choice lists as GBNF (grammar.h).
//
// Fail closed: a schema is enforced exactly or refused. Whatever keyword,
// pattern or combination a grammar cannot hold exactly (uniqueItems,
// multipleOf, number bounds other than 0, overlapping oneOf branches, remote
// references, ...) throws SchemaError naming it, rather than yielding a
// grammar that lets through instances the schema rejects. What is supported,
// the regex subset, the formats and the test-suite results: docs/JSON_SCHEMA.md.
#include <cstddef>
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
  size_t max_schema_bytes = 1 << 20;
  size_t max_grammar_bytes = 4 << 20;
  int max_depth = 64;  // nesting of subschemas, and of $ref and allOf/anyOf chains
};

// GBNF text whose rule `root` is the instance: exactly the JSON texts that
// validate, objects' declared properties in their declared order, with the
// whitespace between tokens bounded (docs/JSON_SCHEMA.md).
std::string json_schema_to_gbnf(std::string_view schema_json, const SchemaLimits& limits = {});
// Any JSON object (OpenAI's response_format json_object).
std::string json_object_gbnf();
// root = one of the strings, exactly. Throws std::invalid_argument for an
// empty list or a string that is not UTF-8.
std::string choice_to_gbnf(const std::vector<std::string>& choices);

}  // namespace troupe::grammar
