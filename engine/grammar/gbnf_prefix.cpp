// Rule names prefixed in GBNF text (prefix_rule_names, grammar.h), so two
// grammars can share one text.
#include <algorithm>

#include "engine/grammar/gbnf_names.h"
#include "engine/grammar/grammar.h"

namespace troupe::grammar {

std::string prefix_rule_names(std::string_view text, std::string_view prefix) {
  std::string out;
  out.reserve(text.size() * 5 / 4);
  const size_t n = text.size();
  // Copies text[i, up to and including `close`), skipping escaped characters.
  auto quoted = [&](size_t i, char close) {
    size_t j = i + 1;
    while (j < n && text[j] != close) j += text[j] == '\\' ? 2 : 1;
    j = std::min(j + 1, n);
    out.append(text.substr(i, j - i));
    return j;
  };
  for (size_t i = 0; i < n;) {
    const char c = text[i];
    if (c == '"') {
      i = quoted(i, '"');
    } else if (c == '[') {
      i = quoted(i, ']');
    } else if (c == '{') {  // a repetition's counts
      i = quoted(i, '}');
    } else if (c == '#') {
      const size_t end = std::min(text.find('\n', i), n);
      out.append(text.substr(i, end - i));
      i = end;
    } else if (gbnf_name_char(c)) {
      size_t j = i;
      while (j < n && gbnf_name_char(text[j])) ++j;
      out.append(prefix).append(text.substr(i, j - i));
      i = j;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

}  // namespace troupe::grammar
