// Objects lowered: declared properties in their order, other names by
// patternProperties, additionalProperties and propertyNames, and property
// counts, as machines over the members (json_schema_converter.h).
#include <algorithm>
#include <map>
#include <tuple>

#include "engine/grammar/json_schema_converter.h"

namespace troupe::grammar::schema {

// An object's members as a machine over (next declared member, members so
// far, whether any came yet); every state a rule.
struct Converter::ObjectPlan {
  std::vector<Expr> members;  // `"name": value`
  std::vector<char> required;
  Expr extra = nothing();  // one property of another name, or nothing
  int64_t min = 0, max = -1;
  std::string ptr;
};

class Converter::ObjectStates {
 public:
  ObjectStates(Converter& c, const ObjectPlan& p) : c_(c), p_(p), n_(p.members.size()) {
    has_extra_ = p.extra.kind != Expr::Kind::nothing;
    if (has_extra_) extras_ = c_.b_.intern("other-properties", star(seq({c_.layout_.comma(), p.extra})));
  }

  Expr start() { return next(0, 0, 0, true, false); }

 private:
  Expr sep(bool first) const { return first ? empty() : c_.layout_.comma(); }
  Expr extras() const { return has_extra_ ? ref(extras_) : empty(); }

  // At declared member i, after `distinct` members that are certainly
  // distinct (declared ones, and the first of other names: later ones may
  // repeat it, so they do not count towards minProperties) and `total`
  // members (for maxProperties: a repeated name only makes fewer).
  Expr next(size_t i, int64_t distinct, int64_t total, bool first, bool other) {
    distinct = std::min(distinct, p_.min);
    if (p_.max < 0) total = 0;
    if (p_.max >= 0 && total > p_.max) return nothing();
    if (p_.max < 0 && distinct >= p_.min) return c_.exact_ ? exact_free(i, first) : free(i, first);
    if (i == n_) return tail(distinct, total, first, other);
    return rule({2, i, distinct, total, first, other}, [&] {
      std::vector<Expr> alts{seq({sep(first), p_.members[i], next(i + 1, distinct + 1, total + 1, false, other)})};
      if (!p_.required[i]) alts.push_back(next(i + 1, distinct, total, first, other));
      if (has_extra_ && c_.exact_)
        alts.push_back(seq({sep(first), p_.extra, next(i, distinct + (other ? 0 : 1), total + 1, false, true)}));
      return alt(std::move(alts));
    });
  }

  // Only other names left.
  Expr tail(int64_t distinct, int64_t total, bool first, bool other) {
    const bool one_needed = distinct < p_.min;
    if (one_needed && (other || distinct + 1 < p_.min || !has_extra_)) return nothing();
    const int64_t hi = p_.max < 0 ? -1 : p_.max - total;
    if (!has_extra_ || hi == 0) return one_needed ? nothing() : empty();
    const Expr more = c_.counted(seq({c_.layout_.comma(), p_.extra}), 0, hi < 0 ? -1 : hi - 1, "maxProperties", p_.ptr);
    const Expr some = seq({sep(first), p_.extra, more});
    return one_needed ? some : opt(some);
  }

  // Generation, no count left to keep: declared members in order, then
  // other names.
  Expr free(size_t i, bool first) {
    if (i == n_) return tail(p_.min, 0, first, false);
    return rule({0, i, 0, 0, first, false}, [&] {
      std::vector<Expr> alts{seq({sep(first), p_.members[i], free(i + 1, false)})};
      if (!p_.required[i]) alts.push_back(free(i + 1, first));
      return alt(std::move(alts));
    });
  }

  // Exact, no count left to keep: other names anywhere among the declared.
  Expr exact_free(size_t i, bool first) {
    if (!has_extra_) return declared(i, first);
    return rule({1, i, 0, 0, first, false}, [&] {
      if (!first) return seq({extras(), declared(i, false)});
      return alt({declared(i, true), seq({p_.extra, extras(), declared(i, false)})});
    });
  }

  Expr declared(size_t i, bool first) {
    if (i == n_) return empty();
    return rule({3, i, 0, 0, first, false}, [&] {
      std::vector<Expr> alts{seq({sep(first), p_.members[i], exact_free(i + 1, false)})};
      if (!p_.required[i]) alts.push_back(declared(i + 1, first));
      return alt(std::move(alts));
    });
  }

  using Key = std::tuple<int, size_t, int64_t, int64_t, bool, bool>;
  template <typename F>
  Expr rule(const Key& key, F body) {
    if (auto it = memo_.find(key); it != memo_.end()) return ref(it->second);
    const int32_t id = c_.b_.reserve("props");
    memo_.emplace(key, id);
    c_.b_.define(id, body());
    return ref(id);
  }

  Converter& c_;
  const ObjectPlan& p_;
  size_t n_;
  bool has_extra_ = false;
  int32_t extras_ = -1;
  std::map<Key, int32_t> memo_;
};

Expr Converter::lower_object(const Simple& s) {
  // Declared names (and required ones), each with all it must meet.
  std::vector<std::pair<std::string, Node>> members;
  for (const auto& [k, n] : s.props) members.emplace_back(k, prop_schema(s, k));
  for (const std::string& r : s.required)
    if (!find_prop(s, r)) members.emplace_back(r, prop_schema(s, r));
  if (exact_ && members.empty() && !s.additional && s.min_props == 0 && s.max_props < 0 && s.pattern_props.empty() &&
      s.property_names.empty())
    return ref(sh_.object);
  ObjectPlan plan;
  plan.min = s.min_props;
  plan.max = s.max_props;
  plan.ptr = s.ptr;
  std::vector<std::string> names;
  for (const auto& m : members) names.push_back(m.first);
  for (const auto& [name, node] : members) {
    plan.members.push_back(seq({quoted(name), layout_.colon(), lower(node), layout_.ws()}));
    plan.required.push_back(std::find(s.required.begin(), s.required.end(), name) != s.required.end());
  }
  std::vector<Expr> extras = other_properties(s, names);
  if (!extras.empty()) plan.extra = ref(b_.intern("other-property", alt(std::move(extras))));
  // Only declared properties and one of other names count towards
  // minProperties (another name may repeat); exact must not need more.
  const auto required = std::count(plan.required.begin(), plan.required.end(), 1);
  if (exact_ && plan.extra.kind != Expr::Kind::nothing && plan.min > std::max<int64_t>(required, 1))
    throw SchemaError("minProperties", s.ptr,
                      "counting properties of other names is not enforced (a grammar cannot keep a name from repeating)");
  const int64_t states = static_cast<int64_t>(members.size() + 1) * (std::min<int64_t>(plan.min, static_cast<int64_t>(members.size())) + 1) *
                         (plan.max >= 0 ? plan.max + 1 : 1);
  if ((plan.min > 0 || plan.max >= 0) && states > 100000)
    throw SchemaError(plan.max >= 0 ? "maxProperties" : "minProperties", s.ptr,
                      "counting properties past 100000 states (declared properties times the counts)");
  return seq({text("{"), layout_.ws(), ObjectStates(*this, plan).start(), text("}")});
}

// Properties of names not declared: by patternProperties, then by
// additionalProperties. Exact: other names are allowed unless
// additionalProperties says no; generation: only where it says yes (and
// no pattern is given: their complement is not held).
std::vector<Expr> Converter::other_properties(const Simple& s, const std::vector<std::string>& names) {
  std::vector<Expr> out;
  const bool closed = s.additional && is_false(*s.additional);
  bool open = exact_ ? !closed : s.additional && !closed;
  const bool vacuous = std::all_of(s.pattern_props.begin(), s.pattern_props.end(), [](const auto& pp) { return is_true(pp.schema); }) &&
                       (!s.additional || is_true(*s.additional));
  if (!s.pattern_props.empty() && !(exact_ && vacuous)) {
    const auto& first = s.pattern_props.front();
    if (exact_ && open)
      throw SchemaError("patternProperties", first.ptr,
                        "beside additionalProperties other than false, names matching no pattern are not enforced");
    open = false;
    // Exact: a name two patterns match meets both schemas, which one
    // alternative per pattern holds only where they are the same.
    // Generation: each pattern's names meet every pattern's schema.
    std::optional<Node> all;
    for (const auto& pp : s.pattern_props) {
      if (exact_ && !same_value(*pp.schema.s, *first.schema.s))
        throw SchemaError("patternProperties", pp.ptr, "patterns with different schemas, which a name may match both of");
      all = all ? both(*all, pp.schema) : pp.schema;
    }
    for (const auto& pp : s.pattern_props) {
      if (!s.property_names.empty())
        throw SchemaError("propertyNames", s.property_names.front().ptr, "beside patternProperties: not enforced");
      // Names the pattern matches, but for the declared ones.
      const std::vector<RegexBranch>& re = regex(pp.regex, pp.ptr);
      std::vector<std::string> matched;
      for (const std::string& name : names)
        if (regex_search(re, decode_utf8(name))) matched.push_back(name);
      const Expr key = seq({text("\""), json_content(without(pattern_content(pp.regex, pp.ptr), matched)), text("\"")});
      out.push_back(seq({key, layout_.colon(), lower(*all), layout_.ws()}));
    }
  }
  if (open) {
    const Node extra_schema = s.additional ? *s.additional : Node{&kTrueSchema, s.ptr};
    for (const Expr& key : other_keys(s, names)) out.push_back(seq({key, layout_.colon(), lower(extra_schema), layout_.ws()}));
  }
  return out;
}

// Keys (JSON strings) of none of `names` that meet propertyNames.
std::vector<Expr> Converter::other_keys(const Simple& s, const std::vector<std::string>& names) {
  if (s.property_names.empty()) return {key_not_in(names)};
  if (s.property_names.size() > 1)
    throw SchemaError("propertyNames", s.property_names[1].ptr, "two propertyNames schemas cannot be intersected");
  const Node& pn = s.property_names.front();
  std::vector<Expr> out;
  for (const Simple& k : expand(pn)) {
    if (!(k.types & kString)) continue;
    if (k.has_values) {
      for (const ojson& v : k.values)
        if (v.is_string() && std::find(names.begin(), names.end(), v.get<std::string>()) == names.end() &&
            satisfies(v, pn))
          out.push_back(quoted(v.get<std::string>()));
      continue;
    }
    Simple str = k;
    str.types = kString;
    if (str.min_len == 0 && str.max_len < 0 && str.patterns.empty() && str.format.empty()) {
      out.push_back(key_not_in(names));
      continue;
    }
    for (const std::string& name : names)
      if (satisfies_simple(ojson(name), str, 0))
        throw SchemaError("propertyNames", pn.ptr, "the declared property '" + name + "' meets it: other names are not enforced");
    out.push_back(lower_string(str));
  }
  return out;
}

}  // namespace troupe::grammar::schema
