// Expressions as languages over code points (regex_to_gbnf.h): matching a
// text, derivatives, strings left out, repetitions capped to a length.
#include <algorithm>
#include <stdexcept>

#include "engine/grammar/regex_to_gbnf.h"

namespace troupe::grammar::detail {

namespace {

using Positions = std::vector<char>;  // positions[i]: the match may stand at i

Positions ends(const Expr& e, const std::vector<uint32_t>& s, const Positions& from);

Positions text_ends(const Expr& e, const std::vector<uint32_t>& s, const Positions& from) {
  const size_t n = s.size();
  Positions out(n + 1, 0);
  const std::vector<uint32_t> t = decode_utf8(e.text);
  for (size_t p = 0; p + t.size() <= n; ++p)
    if (from[p] && std::equal(t.begin(), t.end(), s.begin() + static_cast<std::ptrdiff_t>(p))) out[p + t.size()] = 1;
  return out;
}

Positions chars_ends(const Expr& e, const std::vector<uint32_t>& s, const Positions& from) {
  const size_t n = s.size();
  Positions out(n + 1, 0);
  for (size_t p = 0; p < n; ++p)
    if (from[p] && e.chars.contains(s[p])) out[p + 1] = 1;
  return out;
}

Positions alt_ends(const Expr& e, const std::vector<uint32_t>& s, const Positions& from) {
  const size_t n = s.size();
  Positions out(n + 1, 0);
  for (const Expr& x : e.items) {
    const Positions p = ends(x, s, from);
    for (size_t i = 0; i <= n; ++i) out[i] |= p[i];
  }
  return out;
}

Positions rep_ends(const Expr& e, const std::vector<uint32_t>& s, const Positions& from) {
  const size_t n = s.size();
  Positions out(n + 1, 0);
  Positions cur = from, seen(n + 1, 0);
  if (e.min == 0) out = from, seen = from;
  for (int64_t k = 1; e.max < 0 || k <= e.max; ++k) {
    cur = ends(e.items[0], s, cur);
    bool fresh = false, any = false;
    for (size_t i = 0; i <= n; ++i) {
      any |= cur[i] != 0;
      if (cur[i] && !seen[i]) fresh = true;
    }
    if (!any) break;
    if (k >= e.min) {
      for (size_t i = 0; i <= n; ++i)
        if (cur[i]) out[i] = 1, seen[i] = 1;
      if (!fresh) break;  // nothing new: later copies reach nothing new either
    }
  }
  return out;
}

// Where a match of `e` may end, given where it may start (`from`).
Positions ends(const Expr& e, const std::vector<uint32_t>& s, const Positions& from) {
  switch (e.kind) {
    case Expr::Kind::nothing: return Positions(s.size() + 1, 0);
    case Expr::Kind::empty: return from;
    case Expr::Kind::text: return text_ends(e, s, from);
    case Expr::Kind::chars: return chars_ends(e, s, from);
    case Expr::Kind::rule: throw std::logic_error("expr_matches: a rule reference");
    case Expr::Kind::seq: {
      Positions cur = from;
      for (const Expr& x : e.items) cur = ends(x, s, cur);
      return cur;
    }
    case Expr::Kind::alt: return alt_ends(e, s, from);
    case Expr::Kind::rep: return rep_ends(e, s, from);
  }
  return Positions(s.size() + 1, 0);
}

}  // namespace

bool expr_matches(const Expr& e, const std::vector<uint32_t>& text) {
  Positions start(text.size() + 1, 0);
  start[0] = 1;
  return ends(e, text, start)[text.size()] != 0;
}

bool regex_search(const std::vector<RegexBranch>& regex, const std::vector<uint32_t>& text) {
  for (const RegexBranch& b : regex) {
    Positions start(text.size() + 1, b.anchored_start ? 0 : 1);
    start[0] = 1;
    const Positions end = ends(b.body, text, start);
    if (b.anchored_end ? end[text.size()] != 0 : std::find(end.begin(), end.end(), 1) != end.end()) return true;
  }
  return false;
}

// ---- derivatives ------------------------------------------------------------------

namespace {

// A sequence, alternation or repetition with `at` (what becomes of an
// expression's strings once their first character is read or checked)
// applied where its first character can come from: a sequence's first part,
// or (where it may be empty) a later one; each alternative; one copy.
template <typename At>
Expr at_first(const Expr& e, At at) {
  switch (e.kind) {
    case Expr::Kind::seq: {
      std::vector<Expr> alts;
      for (size_t i = 0; i < e.items.size(); ++i) {
        std::vector<Expr> parts{at(e.items[i])};
        parts.insert(parts.end(), e.items.begin() + static_cast<std::ptrdiff_t>(i) + 1, e.items.end());
        alts.push_back(seq(std::move(parts)));
        if (!nullable(e.items[i])) break;
      }
      return alt(std::move(alts));
    }
    case Expr::Kind::alt: {
      std::vector<Expr> alts;
      for (const Expr& x : e.items) alts.push_back(at(x));
      return alt(std::move(alts));
    }
    case Expr::Kind::rep:
      if (e.max == 0) return nothing();
      return seq({at(e.items[0]), rep(e.items[0], std::max(e.min - 1, 0), e.max < 0 ? -1 : e.max - 1)});
    default: throw std::logic_error("at_first: not a sequence, alternation or repetition");
  }
}

}  // namespace

Expr derivative(const Expr& e, char32_t c) {
  switch (e.kind) {
    case Expr::Kind::nothing:
    case Expr::Kind::empty: return nothing();
    case Expr::Kind::text: {
      const std::vector<uint32_t> t = decode_utf8(e.text);
      if (t[0] != c) return nothing();
      std::string rest;
      for (size_t i = 1; i < t.size(); ++i) put_utf8(rest, t[i]);
      return text(std::move(rest));
    }
    case Expr::Kind::chars: return e.chars.contains(c) ? empty() : nothing();
    case Expr::Kind::rule: throw std::logic_error("derivative: a rule reference");
    case Expr::Kind::seq:
    case Expr::Kind::alt:
    case Expr::Kind::rep: return at_first(e, [c](const Expr& x) { return derivative(x, c); });
  }
  return nothing();
}

namespace {

// The non-empty strings of e whose first character is not in `set`.
Expr first_not_in(const Expr& e, const CharSet& set) {
  switch (e.kind) {
    case Expr::Kind::nothing:
    case Expr::Kind::empty: return nothing();
    case Expr::Kind::text: return set.contains(decode_utf8(e.text)[0]) ? nothing() : e;
    case Expr::Kind::chars: return chars(e.chars - set);
    case Expr::Kind::rule: throw std::logic_error("without: a rule reference");
    case Expr::Kind::seq:
    case Expr::Kind::alt:
    case Expr::Kind::rep: return at_first(e, [&set](const Expr& x) { return first_not_in(x, set); });
  }
  return nothing();
}

Expr without_at(const Expr& e, const std::vector<CodePointTrie>& trie, size_t at, int depth) {
  if (e.kind == Expr::Kind::nothing) return e;
  if (depth > 256) throw std::invalid_argument("without: names too long");
  std::vector<Expr> alts;
  if (!trie[at].terminal && nullable(e)) alts.push_back(empty());
  CharSet kids;
  for (const auto& [c, next] : trie[at].next) kids.add(c, c);
  alts.push_back(first_not_in(e, kids));
  for (const auto& [c, next] : trie[at].next) {
    std::string one;
    put_utf8(one, c);
    alts.push_back(seq({text(one), without_at(derivative(e, c), trie, next, depth + 1)}));
  }
  return alt(std::move(alts));
}

}  // namespace

std::vector<CodePointTrie> code_point_trie(const std::vector<std::string>& strings) {
  std::vector<CodePointTrie> trie(1);
  for (const std::string& s : strings) {
    size_t at = 0;
    for (uint32_t c : decode_utf8(s)) {
      auto it = trie[at].next.find(c);
      if (it == trie[at].next.end()) {
        it = trie[at].next.emplace(c, trie.size()).first;
        trie.emplace_back();
      }
      at = it->second;
    }
    trie[at].terminal = true;
  }
  return trie;
}

Expr without(const Expr& e, const std::vector<std::string>& strings) {
  return without_at(e, code_point_trie(strings), 0, 0);
}

namespace {

void collect_reps(const Expr& e, std::vector<std::pair<int32_t, int32_t>>& reps) {
  if (e.kind == Expr::Kind::rep) reps.emplace_back(e.min, e.max);
  for (const Expr& x : e.items) collect_reps(x, reps);
}

// e with the repetitions' upper counts replaced, in pre-order.
Expr with_caps(const Expr& e, const std::vector<int32_t>& caps, size_t& at) {
  switch (e.kind) {
    case Expr::Kind::seq:
    case Expr::Kind::alt: {
      std::vector<Expr> parts;
      for (const Expr& x : e.items) parts.push_back(with_caps(x, caps, at));
      return e.kind == Expr::Kind::seq ? seq(std::move(parts)) : alt(std::move(parts));
    }
    case Expr::Kind::rep: {
      const int32_t cap = caps[at++];
      return rep(with_caps(e.items[0], caps, at), e.min, cap);
    }
    default: return e;
  }
}

}  // namespace

Expr capped(const Expr& e, int64_t max_len) {
  std::vector<std::pair<int32_t, int32_t>> reps;
  collect_reps(e, reps);
  std::vector<int32_t> caps;
  for (const auto& [min, max] : reps) caps.push_back(min);
  auto build = [&] {
    size_t at = 0;
    return with_caps(e, caps, at);
  };
  auto fits = [&] {
    const int64_t hi = length_range(build()).second;
    return hi >= 0 && hi <= max_len;
  };
  if (!fits()) return nothing();
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < caps.size(); ++i) {
      if (reps[i].second >= 0 && caps[i] >= reps[i].second) continue;
      ++caps[i];
      if (fits()) grew = true;
      else --caps[i];
    }
  }
  return build();
}

}  // namespace troupe::grammar::detail
