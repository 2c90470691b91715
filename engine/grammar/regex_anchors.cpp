// Anchors inside groups lifted to the top-level alternatives they open or
// close (regex_anchors.h), by the pattern's text, before it is parsed.
#include "engine/grammar/regex_anchors.h"

namespace troupe::grammar::detail {

namespace {

// The end of the group opening at `open` (its ')'), skipping escapes and
// classes; npos if unclosed.
size_t group_end(std::string_view p, size_t open) {
  int depth = 0;
  bool in_class = false;
  for (size_t i = open; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      if (c == ']') in_class = false;
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')' && --depth == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

// The ']' that closes the class opening at `open`, skipping escapes; the
// end of p if unclosed.
size_t class_end(std::string_view p, size_t open) {
  size_t i = open;
  for (++i; i < p.size() && p[i] != ']'; ++i)
    if (p[i] == '\\') ++i;
  return i;
}

// The top-level alternatives of p.
std::vector<std::string> top_alternatives(std::string_view p) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (c == '[') {
      i = class_end(p, i);
    } else if (c == '(') {
      const size_t end = group_end(p, i);
      if (end == std::string_view::npos) return {std::string(p)};
      i = end;
    } else if (c == '|') {
      out.emplace_back(p.substr(start, i - start));
      start = i + 1;
    }
  }
  out.emplace_back(p.substr(start));
  return out;
}

// Where a group opens ("(", "(?:", "(?<name>"), the length of its opener.
size_t opener(std::string_view p, size_t i) {
  if (p.substr(i, 3) == "(?:") return 3;
  if (p.substr(i, 2) == "(?" && p.substr(i, 3) != "(?<") return 0;  // lookaround: left alone
  if (p.substr(i, 3) == "(?<" && p.size() > i + 3 && (p[i + 3] == '=' || p[i + 3] == '!')) return 0;
  if (p.substr(i, 3) == "(?<") {
    const size_t close = p.find('>', i);
    return close == std::string_view::npos ? 0 : close - i + 1;
  }
  return 1;
}

bool has_anchor(std::string_view p) {
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\') ++i;
    else if (p[i] == '^' || p[i] == '$') return true;
  }
  return false;
}

void lift(std::string_view p, std::vector<std::string>& out, int budget);

// Where the group that closes `b` opens (its '('), or npos.
size_t closing_group(std::string_view b) {
  size_t open = std::string_view::npos;
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] == '\\') {
      ++i;
    } else if (b[i] == '[') {
      i = class_end(b, i);
    } else if (b[i] == '(') {
      const size_t end = group_end(b, i);
      if (end == std::string_view::npos) break;
      if (end == b.size() - 1) open = i;
      i = end;
    }
  }
  return open;
}

// A group that opens the alternative `b` and holds an anchor: each of its
// alternatives, followed by what follows the group, lifted in turn. False
// where `b` opens with no such group.
bool lift_leading_group(std::string_view b, std::vector<std::string>& out, int budget) {
  if (b.empty() || b[0] != '(') return false;
  const size_t n = opener(b, 0), end = group_end(b, 0);
  const bool quantified = end != std::string_view::npos && end + 1 < b.size() && std::string_view("*+?{").find(b[end + 1]) != std::string_view::npos;
  if (!(n > 0 && end != std::string_view::npos && !quantified && has_anchor(b.substr(n, end - n)))) return false;
  for (const std::string& a : top_alternatives(b.substr(n, end - n))) lift(a + std::string(b.substr(end + 1)), out, budget - 1);
  return true;
}

// A group that closes the alternative `b` and holds an anchor: what
// precedes the group, followed by each of its alternatives, lifted in turn.
bool lift_trailing_group(std::string_view b, std::vector<std::string>& out, int budget) {
  if (b.empty() || b.back() != ')') return false;
  const size_t open = closing_group(b);
  if (open == std::string_view::npos || open == 0) return false;
  const size_t n = opener(b, open);
  const std::string_view inner = b.substr(open + n, b.size() - 1 - open - n);
  if (!(n > 0 && has_anchor(inner))) return false;
  for (const std::string& a : top_alternatives(inner)) lift(std::string(b.substr(0, open)) + a, out, budget - 1);
  return true;
}

// Alternatives with anchors inside groups, lifted to the top where the
// group opens or closes its alternative: "(^a$)|(^b$)" is "^a$|^b$",
// "^([^,]|$)" is "^[^,]|^$". Groups without quantifiers only; others are
// left for the parser to refuse.
void lift(std::string_view p, std::vector<std::string>& out, int budget) {
  for (const std::string& branch : top_alternatives(p)) {
    const std::string_view b = branch;
    const bool lifted = budget > 0 && out.size() <= 64 && has_anchor(b) &&
                        (lift_leading_group(b, out, budget) || lift_trailing_group(b, out, budget));
    if (!lifted) out.push_back(branch);
  }
}

}  // namespace

std::vector<std::string> lift_anchors(std::string_view pattern) {
  std::vector<std::string> lifted;
  lift(pattern, lifted, 8);
  return lifted;
}

}  // namespace troupe::grammar::detail
