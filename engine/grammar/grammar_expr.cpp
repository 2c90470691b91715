// The grammar IR's expressions (regex_to_gbnf.h): constructors that keep
// them small, and what can be read off one (nullable, lengths, size, key).
#include <algorithm>
#include <functional>

#include "engine/grammar/regex_to_gbnf.h"

namespace troupe::grammar::detail {

Expr nothing() {
  Expr e;
  e.kind = Expr::Kind::nothing;
  return e;
}

Expr empty() { return Expr{}; }

Expr text(std::string utf8) {
  if (utf8.empty()) return empty();
  Expr e;
  e.kind = Expr::Kind::text;
  e.text = std::move(utf8);
  return e;
}

Expr chars(CharSet set) {
  if (set.empty()) return nothing();
  Expr e;
  e.kind = Expr::Kind::chars;
  e.chars = std::move(set);
  return e;
}

Expr ref(int32_t rule) {
  Expr e;
  e.kind = Expr::Kind::rule;
  e.rule = rule;
  return e;
}

namespace {

void push_part(std::vector<Expr>& out, Expr&& p) {
  if (p.kind == Expr::Kind::text && !out.empty() && out.back().kind == Expr::Kind::text) out.back().text += p.text;
  else out.push_back(std::move(p));
}

}  // namespace

Expr seq(std::vector<Expr> parts) {
  std::vector<Expr> out;
  for (Expr& p : parts) {
    if (p.kind == Expr::Kind::nothing) return nothing();
    if (p.kind == Expr::Kind::empty) continue;
    if (p.kind == Expr::Kind::seq) {
      for (Expr& q : p.items) push_part(out, std::move(q));
    } else {
      push_part(out, std::move(p));
    }
  }
  if (out.empty()) return empty();
  if (out.size() == 1) return std::move(out[0]);
  Expr e;
  e.kind = Expr::Kind::seq;
  e.items = std::move(out);
  return e;
}

Expr alt(std::vector<Expr> parts) {
  std::vector<Expr> out;
  bool has_empty = false;
  auto take = [&](Expr&& p) {
    if (p.kind == Expr::Kind::nothing) return;
    if (p.kind == Expr::Kind::empty) has_empty = true;
    else out.push_back(std::move(p));
  };
  for (Expr& p : parts) {
    if (p.kind == Expr::Kind::alt) {
      for (Expr& q : p.items) take(std::move(q));
    } else {
      take(std::move(p));
    }
  }
  if (has_empty) out.push_back(empty());
  if (out.empty()) return nothing();
  if (out.size() == 1) return std::move(out[0]);
  Expr e;
  e.kind = Expr::Kind::alt;
  e.items = std::move(out);
  return e;
}

Expr rep(Expr e, int32_t min, int32_t max) {
  if (max >= 0 && max < min) return nothing();
  if (max == 0) return empty();
  if (e.kind == Expr::Kind::nothing) return min == 0 ? empty() : nothing();
  if (e.kind == Expr::Kind::empty) return empty();
  if (min == 1 && max == 1) return e;
  Expr r;
  r.kind = Expr::Kind::rep;
  r.min = min;
  r.max = max;
  r.items.push_back(std::move(e));
  return r;
}

bool nullable(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::empty: return true;
    case Expr::Kind::nothing:
    case Expr::Kind::text:
    case Expr::Kind::chars:
    case Expr::Kind::rule: return false;
    case Expr::Kind::seq: return std::all_of(e.items.begin(), e.items.end(), [](const Expr& x) { return nullable(x); });
    case Expr::Kind::alt: return std::any_of(e.items.begin(), e.items.end(), [](const Expr& x) { return nullable(x); });
    case Expr::Kind::rep: return e.min == 0 || nullable(e.items[0]);
  }
  return false;
}

namespace {

constexpr int64_t kSaturate = int64_t{1} << 40;
int64_t sat_add(int64_t a, int64_t b) { return std::min(a + b, kSaturate); }
int64_t sat_mul(int64_t a, int64_t b) { return a == 0 || b == 0 ? 0 : (a > kSaturate / b ? kSaturate : std::min(a * b, kSaturate)); }

int64_t code_points(std::string_view s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace

std::pair<int64_t, int64_t> length_range(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::nothing:
    case Expr::Kind::empty: return {0, 0};
    case Expr::Kind::text: return {code_points(e.text), code_points(e.text)};
    case Expr::Kind::chars:
    case Expr::Kind::rule: return {1, 1};
    case Expr::Kind::seq: {
      int64_t lo = 0, hi = 0;
      for (const Expr& x : e.items) {
        const auto [a, b] = length_range(x);
        lo = sat_add(lo, a);
        hi = (hi < 0 || b < 0) ? -1 : sat_add(hi, b);
      }
      return {lo, hi};
    }
    case Expr::Kind::alt: {
      int64_t lo = kSaturate, hi = 0;
      for (const Expr& x : e.items) {
        const auto [a, b] = length_range(x);
        lo = std::min(lo, a);
        hi = (hi < 0 || b < 0) ? -1 : std::max(hi, b);
      }
      return {lo, hi};
    }
    case Expr::Kind::rep: {
      const auto [a, b] = length_range(e.items[0]);
      const int64_t hi = b == 0 ? 0 : (e.max < 0 || b < 0) ? -1 : sat_mul(b, e.max);
      return {sat_mul(a, e.min), hi};
    }
  }
  return {0, 0};
}

int64_t expanded_size(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::nothing:
    case Expr::Kind::empty: return 1;
    case Expr::Kind::text: return static_cast<int64_t>(e.text.size());
    case Expr::Kind::chars: return 2;  // one element (a rule where it is not ASCII), however many ranges
    case Expr::Kind::rule: return 1;
    case Expr::Kind::seq:
    case Expr::Kind::alt: {
      int64_t n = 1;
      for (const Expr& x : e.items) n = sat_add(n, expanded_size(x));
      return n;
    }
    case Expr::Kind::rep: {
      // gbnf.cpp writes min copies and then max - min nested optional rules.
      const int64_t copies = e.max < 0 ? e.min + 1 : e.max;
      return sat_add(sat_mul(copies, expanded_size(e.items[0]) + 4), 4);
    }
  }
  return 1;
}

std::string expr_key(const Expr& e) {
  std::string k;
  std::function<void(const Expr&)> walk = [&](const Expr& x) {
    switch (x.kind) {
      case Expr::Kind::nothing: k += "!"; break;
      case Expr::Kind::empty: k += "e"; break;
      // Appended piece by piece: GCC 12 at -O3 sees a false overlap
      // (-Wrestrict) in `"t" + std::to_string(n) + ...` once this is inlined.
      case Expr::Kind::text:
        k.append("t").append(std::to_string(x.text.size())).append(":").append(x.text);
        break;
      case Expr::Kind::chars:
        k += 'c';
        for (const auto& r : x.chars.ranges())
          k.append(std::to_string(r.lo)).append("-").append(std::to_string(r.hi)).append(",");
        break;
      case Expr::Kind::rule: k.append("r").append(std::to_string(x.rule)); break;
      case Expr::Kind::seq:
      case Expr::Kind::alt:
      case Expr::Kind::rep:
        if (x.kind == Expr::Kind::seq) k += '(';
        else if (x.kind == Expr::Kind::alt) k += '[';
        else k.append("{").append(std::to_string(x.min)).append(",").append(std::to_string(x.max)).append(":");
        for (const Expr& y : x.items) walk(y), k += " ";
        k += ")";
        break;
    }
  };
  walk(e);
  return k;
}

}  // namespace troupe::grammar::detail
