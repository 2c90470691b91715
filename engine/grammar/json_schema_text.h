#pragma once
// JSON text as the JSON Schema converter (json_schema_converter.h) writes
// it: the spellings of characters inside strings, the separators of the two
// layouts, and the rules every JSON grammar shares.
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/grammar/regex_to_gbnf.h"

namespace troupe::grammar::schema {

// The grammar IR (regex_to_gbnf.h) is what the converter writes grammars in.
using namespace detail;

// The set of the listed characters.
CharSet set_of(std::u32string_view chars);

// The one spelling the generation profile writes for a character that
// cannot be written raw: `\"`, `\\`, a short escape, else \u00XX (lower case).
std::string canonical_escape(char32_t c);

// Every spelling, inside a JSON string, of a character of `set` (exact), or
// its one canonical spelling (generation: raw where JSON allows it).
Expr json_spellings(const CharSet& set, bool exact);

// The rules every JSON grammar shares.
struct Shared {
  int32_t ws, chr, string, tail, integer, number, boolean, null, value, object, array;
};

// The separators of the two layouts: exact allows bounded whitespace around
// every token; generation writes `{"a": 1, "b": [1, 2]}` and nothing else.
struct Layout {
  bool exact = false;
  int32_t ws_rule = -1;
  Expr ws() const { return exact ? ref(ws_rule) : empty(); }
  Expr comma() const { return exact ? seq({text(","), ref(ws_rule)}) : text(", "); }
  Expr colon() const { return exact ? seq({ref(ws_rule), text(":"), ref(ws_rule)}) : text(": "); }
};

// Defines the shared rules in `b`, and the whitespace rule `layout` uses.
Shared add_shared(RuleBuilder& b, Layout& layout);

}  // namespace troupe::grammar::schema
