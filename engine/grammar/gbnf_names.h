#pragma once
// The characters of a GBNF rule name (llama.cpp's): the parser (gbnf.cpp)
// and prefix_rule_names (gbnf_prefix.cpp) must agree on where a name ends.

namespace troupe::grammar {

inline bool gbnf_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

}  // namespace troupe::grammar
