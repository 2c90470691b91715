// Rules under construction (RuleBuilder, regex_to_gbnf.h): what can never
// finish dropped, aliases skipped, left recursion and size refused, then
// printed as GBNF.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <stdexcept>

#include "engine/grammar/regex_to_gbnf.h"

namespace troupe::grammar::detail {

namespace {

std::string sanitize(std::string_view hint) {
  std::string s;
  for (char c : hint) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) s += c;
    else if (!s.empty() && s.back() != '-') s += '-';
    if (s.size() >= 32) break;
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "r" : s;
}

void hex_escape(std::string& out, char32_t c) {
  char buf[12];
  if (c < 0x80) std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(c));
  else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(c));
  else std::snprintf(buf, sizeof buf, "\\U%08X", static_cast<unsigned>(c));
  out += buf;
}

void literal_char(std::string& out, char32_t c) {
  if (c == '"') out += "\\\"";
  else if (c == '\\') out += "\\\\";
  else if (c == '\n') out += "\\n";
  else if (c == '\r') out += "\\r";
  else if (c == '\t') out += "\\t";
  else if (c >= 0x20 && c < 0x7F) out += static_cast<char>(c);
  else hex_escape(out, c);
}

void class_char(std::string& out, char32_t c) {
  const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  if (plain) out += static_cast<char>(c);
  else hex_escape(out, c);
}

class Printer {
 public:
  explicit Printer(const std::vector<std::string>& names) : names_(names) {}

  // ctx 0: a rule body (alternatives bare); 1: a part of a sequence; 2: what
  // a repetition repeats.
  void print(const Expr& e, std::string& out, int ctx) const {
    const bool compound = e.kind == Expr::Kind::seq || e.kind == Expr::Kind::alt || e.kind == Expr::Kind::rep;
    if ((ctx == 2 && compound) || (ctx == 1 && e.kind == Expr::Kind::alt)) {
      out += "(";
      print(e, out, 0);
      out += ")";
      return;
    }
    switch (e.kind) {
      case Expr::Kind::nothing: throw std::logic_error("grammar printer: an expression that matches nothing");
      case Expr::Kind::empty: out += "\"\""; return;
      case Expr::Kind::text: return print_text(e, out);
      case Expr::Kind::chars: return print_chars(e, out);
      case Expr::Kind::rule: out += names_[static_cast<size_t>(e.rule)]; return;
      case Expr::Kind::seq: return print_seq(e, out);
      case Expr::Kind::alt: return print_alt(e, out, ctx);
      case Expr::Kind::rep: return print_rep(e, out);
    }
  }

 private:
  static void print_text(const Expr& e, std::string& out) {
    out += '"';
    for (uint32_t c : decode_utf8(e.text)) literal_char(out, c);
    out += '"';
  }

  static void print_chars(const Expr& e, std::string& out) {
    if (e.chars.single()) {
      out += '"';
      literal_char(out, e.chars.ranges()[0].lo);
      out += '"';
      return;
    }
    out += '[';
    for (const auto& r : e.chars.ranges()) {
      class_char(out, r.lo);
      if (r.hi > r.lo) {
        if (r.hi > r.lo + 1) out += '-';
        class_char(out, r.hi);
      }
    }
    out += ']';
  }

  void print_seq(const Expr& e, std::string& out) const {
    for (size_t i = 0; i < e.items.size(); ++i) {
      if (i) out += ' ';
      print(e.items[i], out, 1);
    }
  }

  void print_alt(const Expr& e, std::string& out, int ctx) const {
    if (e.items.back().kind == Expr::Kind::empty) {  // alt() keeps the empty one last
      std::vector<Expr> rest(e.items.begin(), e.items.end() - 1);
      print(rep(alt(std::move(rest)), 0, 1), out, ctx);
      return;
    }
    for (size_t i = 0; i < e.items.size(); ++i) {
      if (i) out += " | ";
      print(e.items[i], out, 1);
    }
  }

  void print_rep(const Expr& e, std::string& out) const {
    print(e.items[0], out, 2);
    if (e.min == 0 && e.max == 1) out += '?';
    else if (e.min == 0 && e.max < 0) out += '*';
    else if (e.min == 1 && e.max < 0) out += '+';
    else if (e.min == e.max) out += "{" + std::to_string(e.min) + "}";
    else if (e.max < 0) out += "{" + std::to_string(e.min) + ",}";
    else out += "{" + std::to_string(e.min) + "," + std::to_string(e.max) + "}";
  }

  const std::vector<std::string>& names_;
};

void for_each_rule(const Expr& e, const std::function<void(int32_t)>& f) {
  if (e.kind == Expr::Kind::rule) f(e.rule);
  for (const Expr& x : e.items) for_each_rule(x, f);
}

Expr substitute(const Expr& e, const std::function<Expr(int32_t)>& f) {
  switch (e.kind) {
    case Expr::Kind::rule: return f(e.rule);
    case Expr::Kind::seq:
    case Expr::Kind::alt: {
      std::vector<Expr> parts;
      parts.reserve(e.items.size());
      for (const Expr& x : e.items) parts.push_back(substitute(x, f));
      return e.kind == Expr::Kind::seq ? seq(std::move(parts)) : alt(std::move(parts));
    }
    case Expr::Kind::rep: return rep(substitute(e.items[0], f), e.min, e.max);
    default: return e;
  }
}

bool derives(const Expr& e, const std::vector<char>& yes, bool nullable_mode) {
  switch (e.kind) {
    case Expr::Kind::nothing: return false;
    case Expr::Kind::empty: return true;
    case Expr::Kind::text:
    case Expr::Kind::chars: return !nullable_mode;
    case Expr::Kind::rule: return yes[static_cast<size_t>(e.rule)];
    case Expr::Kind::seq:
      return std::all_of(e.items.begin(), e.items.end(), [&](const Expr& x) { return derives(x, yes, nullable_mode); });
    case Expr::Kind::alt:
      return std::any_of(e.items.begin(), e.items.end(), [&](const Expr& x) { return derives(x, yes, nullable_mode); });
    case Expr::Kind::rep: return e.min == 0 || derives(e.items[0], yes, nullable_mode);
  }
  return false;
}

// Rules that derive some finite text (nullable_mode false) or the empty
// text (true): a fixed point.
std::vector<char> fixed_point(const std::vector<Expr>& bodies, const std::vector<char>& live, bool nullable_mode) {
  std::vector<char> yes(bodies.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < bodies.size(); ++r)
      if (live[r] && !yes[r] && derives(bodies[r], yes, nullable_mode)) yes[r] = 1, changed = true;
  }
  return yes;
}

std::vector<char> reachable(const std::vector<Expr>& bodies, int32_t root) {
  std::vector<char> seen(bodies.size(), 0);
  std::vector<int32_t> todo{root};
  seen[static_cast<size_t>(root)] = 1;
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    for_each_rule(bodies[static_cast<size_t>(r)], [&](int32_t s) {
      if (!seen[static_cast<size_t>(s)]) seen[static_cast<size_t>(s)] = 1, todo.push_back(s);
    });
  }
  return seen;
}

// A rule on a cycle of `edges` among `live` rules, or -1.
int32_t find_cycle(const std::vector<std::vector<int32_t>>& edges, const std::vector<char>& live) {
  std::vector<int> state(edges.size(), 0);  // 0 new, 1 on the path, 2 done
  for (size_t start = 0; start < edges.size(); ++start) {
    if (!live[start] || state[start]) continue;
    std::vector<std::pair<int32_t, size_t>> stack{{static_cast<int32_t>(start), 0}};
    state[start] = 1;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == edges[static_cast<size_t>(r)].size()) {
        state[static_cast<size_t>(r)] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t s = edges[static_cast<size_t>(r)][next++];
      if (state[static_cast<size_t>(s)] == 1) return s;
      if (state[static_cast<size_t>(s)] == 0) state[static_cast<size_t>(s)] = 1, stack.emplace_back(s, 0);
    }
  }
  return -1;
}

void first_rules(const Expr& e, const std::vector<char>& nullable_rules, std::vector<int32_t>& out) {
  switch (e.kind) {
    case Expr::Kind::rule: out.push_back(e.rule); return;
    case Expr::Kind::seq:
      for (const Expr& x : e.items) {
        first_rules(x, nullable_rules, out);
        if (!derives(x, nullable_rules, true)) return;
      }
      return;
    case Expr::Kind::alt:
      for (const Expr& x : e.items) first_rules(x, nullable_rules, out);
      return;
    case Expr::Kind::rep: first_rules(e.items[0], nullable_rules, out); return;
    default: return;
  }
}

bool repeats_past(const Expr& e, int32_t limit) {
  if (e.kind == Expr::Kind::rep && (e.min > limit || e.max > limit)) return true;
  return std::any_of(e.items.begin(), e.items.end(), [&](const Expr& x) { return repeats_past(x, limit); });
}

}  // namespace

int32_t RuleBuilder::reserve(std::string_view name_hint, std::string origin) {
  std::string base = name_hint == "root" && rules_.empty() ? "root" : sanitize(name_hint);
  if (base == "root" && !rules_.empty()) base = "root-r";
  // The next free suffix per base name (probing from 2 each time is
  // quadratic in the rules of one name).
  std::string name = base;
  int& k = next_suffix_[base];
  if (k < 2) k = 2;
  while (names_.count(name)) name = base + "-" + std::to_string(k++);
  const auto id = static_cast<int32_t>(rules_.size());
  names_.emplace(name, id);
  rules_.push_back({std::move(name), std::move(origin), nothing(), false});
  return id;
}

void RuleBuilder::define(int32_t id, Expr body) {
  Rule& r = rules_[static_cast<size_t>(id)];
  r.body = std::move(body);
  r.defined = true;
}

int32_t RuleBuilder::intern(std::string_view name_hint, Expr body) {
  std::string key = expr_key(body);
  if (auto it = interned_.find(key); it != interned_.end()) return it->second;
  const int32_t id = reserve(name_hint);
  define(id, std::move(body));
  interned_.emplace(std::move(key), id);
  return id;
}

std::string RuleBuilder::emit(int32_t root) const {
  std::vector<Expr> bodies(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) bodies[r] = rules_[r].body;
  const std::vector<char> live = reachable(bodies, root);
  for (size_t r = 0; r < rules_.size(); ++r)
    if (live[r] && !rules_[r].defined) throw std::logic_error("grammar builder: rule '" + rules_[r].name + "' never defined");
  drop_unfinishable(bodies, live, root);
  skip_aliases(bodies, live, root);
  const std::vector<char> used = reachable(bodies, root);
  check_left_recursion(bodies, used);
  check_size(bodies, used);
  return print(bodies, used, root);
}

// What can never finish is refused where it recurses and dropped where it is
// only an alternative (a `false` schema, a property that cannot be given):
// a matcher must never enter a branch it cannot leave.
void RuleBuilder::drop_unfinishable(std::vector<Expr>& bodies, const std::vector<char>& live, int32_t root) const {
  const size_t n = bodies.size();
  const std::vector<char> finite = fixed_point(bodies, live, false);
  std::vector<std::vector<int32_t>> endless(n);
  std::vector<char> dead(n, 0);
  for (size_t r = 0; r < n; ++r) {
    if (!live[r] || finite[r]) continue;
    dead[r] = 1;
    for_each_rule(bodies[r], [&](int32_t s) {
      if (!finite[static_cast<size_t>(s)]) endless[r].push_back(s);
    });
  }
  if (const int32_t r = find_cycle(endless, dead); r >= 0)
    throw BuildError{BuildError::Reason::endless_recursion, rules_[static_cast<size_t>(r)].origin,
                     "a recursion with no way to end (every alternative recurses)"};
  if (!finite[static_cast<size_t>(root)])
    throw BuildError{BuildError::Reason::empty_language, rules_[static_cast<size_t>(root)].origin, "no text matches"};
  for (size_t r = 0; r < n; ++r)
    if (live[r]) bodies[r] = substitute(bodies[r], [&](int32_t s) { return finite[static_cast<size_t>(s)] ? ref(s) : nothing(); });
}

// A rule that only names another is skipped (every referenced schema gets a
// rule, and most are one reference).
void RuleBuilder::skip_aliases(std::vector<Expr>& bodies, const std::vector<char>& live, int32_t root) const {
  const size_t n = bodies.size();
  std::vector<int32_t> target(n);
  for (size_t r = 0; r < n; ++r) {
    auto t = static_cast<int32_t>(r);
    for (size_t hops = 0; hops < n && bodies[static_cast<size_t>(t)].kind == Expr::Kind::rule &&
                          bodies[static_cast<size_t>(t)].rule != t;
         ++hops)
      t = bodies[static_cast<size_t>(t)].rule;
    target[r] = t;
  }
  for (size_t r = 0; r < n; ++r)
    if (live[r])
      bodies[r] = substitute(bodies[r], [&](int32_t s) { return ref(s == root ? root : target[static_cast<size_t>(s)]); });
}

// gbnf.cpp refuses left recursion too; here it is named by the schema
// location that made it.
void RuleBuilder::check_left_recursion(const std::vector<Expr>& bodies, const std::vector<char>& used) const {
  const std::vector<char> empties = fixed_point(bodies, used, true);
  std::vector<std::vector<int32_t>> firsts(bodies.size());
  for (size_t r = 0; r < bodies.size(); ++r)
    if (used[r]) first_rules(bodies[r], empties, firsts[r]);
  if (const int32_t r = find_cycle(firsts, used); r >= 0)
    throw BuildError{BuildError::Reason::left_recursion, rules_[static_cast<size_t>(r)].origin,
                     "a reference that reaches itself before any text (left recursion)"};
}

void RuleBuilder::check_size(const std::vector<Expr>& bodies, const std::vector<char>& used) const {
  constexpr int64_t kMaxElements = int64_t{1} << 19;  // half of gbnf.cpp's default, after expansion
  int64_t elements = 0;
  for (size_t r = 0; r < bodies.size(); ++r) {
    if (!used[r]) continue;
    if (repeats_past(bodies[r], kMaxRepeat))
      throw BuildError{BuildError::Reason::too_large, rules_[r].origin, "a repetition count above " + std::to_string(kMaxRepeat)};
    elements += expanded_size(bodies[r]);
  }
  if (elements > kMaxElements)
    throw BuildError{BuildError::Reason::too_large, "",
                     "the grammar would grow past " + std::to_string(kMaxElements) + " elements"};
}

std::string RuleBuilder::print(const std::vector<Expr>& bodies, const std::vector<char>& used, int32_t root) const {
  std::vector<std::string> names(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) names[r] = rules_[r].name;
  const Printer printer(names);
  std::string out;
  auto line = [&](size_t r) {
    out += names[r] + " ::= ";
    printer.print(bodies[r], out, 0);
    out += '\n';
    if (out.size() > max_text_bytes_)
      throw BuildError{BuildError::Reason::too_large, "",
                       "the grammar is longer than " + std::to_string(max_text_bytes_) + " bytes"};
  };
  line(static_cast<size_t>(root));
  for (size_t r = 0; r < bodies.size(); ++r)
    if (used[r] && r != static_cast<size_t>(root)) line(r);
  return out;
}

}  // namespace troupe::grammar::detail
