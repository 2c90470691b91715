#pragma once
// What the JSON Schema, regex and choice tests (grammar_*.test.cpp) share: a
// constraint's grammar compiled and matched against texts, in either profile,
// and a schema's refusal caught.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex_to_gbnf.h"

namespace troupe::grammar::testing {

struct Compiled {
  std::shared_ptr<const Grammar> g;
  bool operator()(std::string_view text) const { return matches(*g, text); }
};

inline const SchemaOptions kExact{true}, kGeneration{false};

// The exact profile (every valid instance, any spelling) unless said otherwise.
inline Compiled schema(std::string_view s, const SchemaOptions& o = kExact) {
  return {compile_gbnf(json_schema_to_gbnf(s, {}, o))};
}
// The generation profile (the default).
inline Compiled gen(std::string_view s) { return {compile_gbnf(json_schema_to_gbnf(s))}; }
inline Compiled regex(std::string_view p) { return {compile_gbnf(regex_to_gbnf(p))}; }

inline SchemaError refusal(std::string_view s, const SchemaLimits& limits = {}, const SchemaOptions& o = kExact) {
  try {
    const std::string g = json_schema_to_gbnf(s, limits, o);
    FAIL("not refused: " << s << "\n" << g);
  } catch (const SchemaError& e) {
    return e;
  }
  throw std::logic_error("unreachable");
}

// A JSON string literal of `s` (quotes and backslashes escaped).
inline std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

inline std::string repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace troupe::grammar::testing
