// Strings lowered: lengths, patterns and formats over code points, then
// each code point as its JSON spellings (json_schema_converter.h).
#include <algorithm>
#include <functional>

#include "engine/grammar/json_schema_converter.h"
#include "engine/grammar/json_schema_formats.h"

namespace troupe::grammar::schema {

const std::string& Converter::pattern_of(const Simple& s) {
  if (s.patterns.size() > 1)
    throw SchemaError("pattern", s.patterns[1].second, "two patterns on one string cannot be intersected");
  return s.patterns.front().first;
}

Expr Converter::lower_string(const Simple& s) {
  if (s.max_len >= 0 && s.min_len > s.max_len) return nothing();
  const Expr quote = text("\"");
  if (!s.not_in.empty()) {
    if (s.min_len > 0 || s.max_len >= 0 || !s.patterns.empty() || !s.format.empty())
      throw SchemaError("not", s.ptr, "strings other than some, beside other string keywords, are not enforced");
    return key_not_in(s.not_in);
  }
  if (s.patterns.empty() && s.format.empty()) {
    if (s.min_len == 0 && s.max_len < 0) return ref(sh_.string);
    return seq({quote, counted(ref(sh_.chr), s.min_len, s.max_len, s.max_len > s.min_len ? "maxLength" : "minLength", s.ptr),
                quote});
  }
  if (!s.patterns.empty() && !s.format.empty())
    throw SchemaError("format", s.format_ptr, "a format and a pattern on one string cannot be intersected");
  Expr c = s.patterns.empty() ? format_content(s.format) : pattern_content(pattern_of(s), s.patterns.front().second);
  c = bound_length(std::move(c), s);
  return seq({quote, json_content(c), quote});
}

// A pattern matches anywhere in the string unless anchored.
Expr Converter::pattern_content(const std::string& pattern, const std::string& ptr) {
  std::vector<Expr> alts;
  const Expr anything = star(chars(CharSet::any()));
  for (RegexBranch& b : parse_regex(pattern, ptr)) {
    if (nullable(b.body) && !(b.anchored_start && b.anchored_end)) {
      alts.push_back(anything);
      continue;
    }
    alts.push_back(seq({b.anchored_start ? empty() : anything, std::move(b.body), b.anchored_end ? empty() : anything}));
  }
  return alt(std::move(alts));
}

Expr Converter::exact_format_content(const std::string& format) {
  std::vector<Expr> alts;
  for (RegexBranch& b : parse_regex(format_regexes().find(format)->second, "")) alts.push_back(std::move(b.body));
  return alt(std::move(alts));
}

Expr Converter::format_content(const std::string& format) {
  std::vector<Expr> alts;
  auto it = generation_format_regexes().find(format);
  const std::string& regex = !exact_ && it != generation_format_regexes().end() ? it->second : format_regexes().find(format)->second;
  for (RegexBranch& b : parse_regex(regex, "")) alts.push_back(std::move(b.body));
  return alt(std::move(alts));
}

// minLength/maxLength beside a pattern or format: kept where the regex
// already implies them or is one repeated class, refused elsewhere.
Expr Converter::bound_length(Expr c, const Simple& s) {
  if (s.min_len == 0 && s.max_len < 0) return c;
  const auto [lo, hi] = length_range(c);
  if (lo >= s.min_len && (s.max_len < 0 || (hi >= 0 && hi <= s.max_len))) return c;
  if (c.kind == Expr::Kind::rep && c.items[0].kind == Expr::Kind::chars) {
    const int64_t min = std::max<int64_t>(c.min, s.min_len), max = min_of(c.max, s.max_len);
    return counted(c.items[0], min, max, s.max_len >= 0 ? "maxLength" : "minLength", s.ptr);
  }
  // Generation: the regex with its repetitions capped at the largest count
  // that keeps every match within maxLength (a subset), where its
  // shortest match is long enough.
  if (!exact_ && lo >= s.min_len && s.max_len >= 0) {
    Expr shorter = capped(c, s.max_len);
    if (shorter.kind != Expr::Kind::nothing && length_range(shorter).first >= s.min_len) return shorter;
  }
  throw SchemaError(s.max_len >= 0 ? "maxLength" : "minLength", s.ptr,
                    "beside a pattern or format, string lengths are enforced only where the regex implies them, is one "
                    "repeated character class, or (generation) holds a match within maxLength once its repetitions are "
                    "capped");
}

// Code points → their spellings inside a JSON string.
Expr Converter::json_content(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::text: {
      std::vector<Expr> parts;
      for (uint32_t c : decode_utf8(e.text)) parts.push_back(spell(c));
      return seq(std::move(parts));
    }
    case Expr::Kind::chars: return spell_set(e.chars);
    case Expr::Kind::seq:
    case Expr::Kind::alt: {
      std::vector<Expr> parts;
      for (const Expr& x : e.items) parts.push_back(json_content(x));
      return e.kind == Expr::Kind::seq ? seq(std::move(parts)) : alt(std::move(parts));
    }
    case Expr::Kind::rep: return rep(json_content(e.items[0]), e.min, e.max);
    default: return e;
  }
}

Expr Converter::spell(char32_t c) {
  if (exact_) return json_spellings(CharSet(c, c), true);
  std::string one;
  if (c == '"' || c == '\\' || c < 0x20) one = canonical_escape(c);
  else put_utf8(one, c);
  return text(one);
}

Expr Converter::spell_set(const CharSet& set) {
  if (set == CharSet::any()) return ref(sh_.chr);
  if (set.single()) return spell(set.ranges()[0].lo);
  return ref(b_.intern("chars", json_spellings(set, exact_)));
}

Expr Converter::quoted(const std::string& s) { return seq({text("\""), json_content(text(s)), text("\"")}); }

// Keys (as JSON strings, closing quote included) that decode to none of `names`.
Expr Converter::key_not_in(const std::vector<std::string>& names) {
  if (names.empty()) return ref(sh_.string);
  const std::vector<CodePointTrie> trie = code_point_trie(names);
  std::function<Expr(size_t, int)> rest = [&](size_t at, int depth) {
    std::vector<Expr> alts;
    if (!trie[at].terminal) alts.push_back(text("\""));
    CharSet kids;
    for (const auto& [c, next] : trie[at].next) kids.add(c, c);
    alts.push_back(seq({spell_set(kids.complement()), ref(sh_.tail)}));
    for (const auto& [c, next] : trie[at].next) alts.push_back(seq({spell(c), rest(next, depth + 1)}));
    Expr e = alt(std::move(alts));
    return depth % 8 == 7 ? ref(b_.intern("key", std::move(e))) : e;
  };
  return seq({text("\""), rest(0, 0)});
}

}  // namespace troupe::grammar::schema
