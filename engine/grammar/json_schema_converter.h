#pragma once
// The converter behind json_schema_to_gbnf (json_schema.h), declared for the
// files that define its parts (json_schema_*.cpp; engine/grammar/README.md).
//
// A schema is read into "simple" schemas (one per anyOf/oneOf/dependency
// branch once allOf, not, if/then/else and dependencies are merged in): per
// JSON type, the constraints on it. Each becomes a union over its allowed
// types; every subschema is a rule, so references (recursive ones too) are
// rule references. Negations are written as schemas without `not`. Strings
// are matched as JSON text: in the exact profile a character of a pattern,
// format, key or const is any of its spellings (raw, \n-style, \uXXXX, a
// surrogate pair), so escapes change nothing; in the generation profile it
// has one spelling, and the layout is fixed.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/json_schema_keywords.h"
#include "engine/grammar/json_schema_numbers.h"
#include "engine/grammar/json_schema_text.h"

namespace troupe::grammar::schema {

inline constexpr size_t kMaxDisjuncts = 64;  // anyOf/oneOf branches once allOf is distributed

enum class Draft { unknown, up_to_7, from_2019 };

class Converter {
 public:
  // Reads the schema; throws SchemaError for one past the limits or not JSON.
  Converter(std::string_view text, const SchemaLimits& limits, const SchemaOptions& options);
  std::string run();          // the schema's grammar
  std::string object_only();  // any JSON object's grammar
  // Whether `v` is an instance of the schema, in any member order (formats in
  // their exact form), once read_whole() took the schema.
  bool validates(const ojson& v);
  // Reads every subschema the schema can reach (refs once), as validating
  // would: throws SchemaError for what the validator cannot check.
  void read_whole();

 private:
  // Counts nesting against max_depth for as long as it lives.
  class Deeper {
   public:
    Deeper(Converter& c, const std::string& ptr) : c_(c) {
      if (c_.depth_ >= c_.limits_.max_depth)  // checked before counting: a throw runs no destructor
        throw SchemaError("limits", ptr, "subschemas, $ref chains or allOf/anyOf/oneOf nest deeper than max_depth " +
                                             std::to_string(c_.limits_.max_depth));
      ++c_.depth_;
    }
    ~Deeper() { --c_.depth_; }
    Deeper(const Deeper&) = delete;
    Deeper& operator=(const Deeper&) = delete;

   private:
    Converter& c_;
  };
  struct Negation;      // json_schema_negate.cpp
  struct ObjectPlan;    // json_schema_lower_objects.cpp
  class ObjectStates;   // json_schema_lower_objects.cpp

  // ---- keywords and references (json_schema_refs.cpp) ----
  void check_keywords(const Node& n) const;
  bool ref_replaces(const Node& n) const;
  Node resolve(const Node& n) const;

  // ---- reading one schema object (json_schema_reading.cpp) ----
  static int64_t count_value(const ojson& v, const std::string& kw, const std::string& ptr);
  static std::vector<std::string> string_list(const ojson& v, const std::string& kw, const std::string& ptr);
  Node child(const Node& n, const ojson& v, const std::string& suffix) const { return Node{&v, n.ptr + suffix}; }
  Simple simple_of(const Node& n) const;
  static void read_types(const ojson& s, Simple& r, const KeywordAt& at);
  static void read_values(const ojson& s, Simple& r, const KeywordAt& at);
  void read_strings(const ojson& s, Simple& r, const KeywordAt& at) const;
  void read_bounds(const ojson& s, Simple& r, const KeywordAt& at) const;
  void read_object(const Node& n, Simple& r, const KeywordAt& at) const;
  void read_array(const Node& n, Simple& r, const KeywordAt& at) const;

  // ---- conjunctions (json_schema_merge.cpp) ----
  Node both(const Node& x, const Node& y);
  std::optional<Simple> merge(const Simple& a, const Simple& b);
  void merge_objects(const Simple& a, const Simple& b, Simple& r);
  void merge_arrays(const Simple& a, const Simple& b, Simple& r);
  std::vector<Simple> conjoin(const std::vector<Simple>& xs, const std::vector<Simple>& ys, const std::string& kw,
                              const std::string& ptr);
  Node synthetic(ojson schema, const std::string& ptr);

  // ---- a schema as a union of simple ones (json_schema_expand.cpp) ----
  std::vector<Simple> expand(const Node& n, bool nested = true);
  std::vector<Simple> expand_applicators(const Node& n, std::vector<Simple> out);
  std::vector<Simple> expand_not_and_if(const Node& n, std::vector<Simple> out);
  std::vector<Simple> expand_dependencies(const Node& n, std::vector<Simple> out);
  std::vector<Simple> dependency_branches(const std::string& kw, const std::string& name, const ojson& dep,
                                          const std::string& ptr);
  std::vector<Node> subschemas(const Node& n, const std::string& kw) const;

  // ---- oneOf (json_schema_one_of.cpp) ----
  std::vector<Simple> one_of(const std::vector<Simple>& base, const Node& n);
  void require_exclusive(const std::vector<std::vector<Simple>>& branches, const std::string& ptr);
  unsigned written_types(const Simple& s) const;
  std::optional<std::vector<std::string>> written_names(const Simple& a);
  bool disjoint(const Simple& a, const Simple& b, int depth);
  bool forbids(const Simple& s, const std::string& name);
  bool names_apart(const Simple& a, const Simple& b);
  bool objects_apart(const Simple& a, const Simple& b, int depth);
  bool objects_apart_or_throw(const Simple& a, const Simple& b, int depth);
  bool nodes_apart(const Node& x, const Node& y, int depth);
  bool fails(const ojson& v, const Simple& s, int depth);

  // ---- negation (json_schema_negate.cpp) ----
  ojson negate(const Node& n, int depth = 0);

  // ---- values against schemas (json_schema_validate.cpp) ----
  const std::vector<RegexBranch>& regex(const std::string& pattern, const std::string& ptr);
  Node prop_schema(const Simple& s, std::string_view name);
  bool satisfies(const ojson& v, const Node& n, int depth = 0);
  bool satisfies_simple(const ojson& v, const Simple& s, int depth);
  std::vector<ojson> allowed_values(const Simple& s);
  bool satisfies_string(const ojson& v, const Simple& s);
  bool satisfies_number(const ojson& v, const Simple& s);
  bool satisfies_array(const ojson& v, const Simple& s, int depth);
  bool satisfies_object(const ojson& v, const Simple& s, int depth);

  // ---- lowering to grammar expressions (json_schema_lower.cpp) ----
  Expr lower(const Node& n);
  Expr lower_body(const Node& n);
  Expr lower_simple(const Simple& s);
  Expr literal(const ojson& v);
  Expr counted(const Expr& x, int64_t lo, int64_t hi, const std::string& kw, const std::string& ptr);

  // ---- numbers (json_schema_lower_numbers.cpp) ----
  Expr lower_number(const Simple& s);
  Expr lower_multiples(const Simple& s);
  Expr enumerated_multiples(const Simple& s, int mod, const std::string& ptr);
  NumberBound generation_safe(const Bound& b, bool lower, bool fractions) const;

  // ---- strings (json_schema_lower_strings.cpp) ----
  const std::string& pattern_of(const Simple& s);
  Expr lower_string(const Simple& s);
  Expr pattern_content(const std::string& pattern, const std::string& ptr);
  Expr exact_format_content(const std::string& format);
  Expr format_content(const std::string& format);
  Expr bound_length(Expr c, const Simple& s);
  Expr json_content(const Expr& e);
  Expr spell(char32_t c);
  Expr spell_set(const CharSet& set);
  Expr quoted(const std::string& s);
  Expr key_not_in(const std::vector<std::string>& names);

  // ---- arrays (json_schema_lower_arrays.cpp) ----
  Expr lower_array(const Simple& s);
  Expr array_items(const Simple& s, const std::vector<Node>& prefix);
  Expr unique_items(const Simple& s);
  std::vector<ojson> finite_values(const Node& items, const std::string& ptr);
  Expr contains_items(const Simple& s);

  // ---- objects (json_schema_lower_objects.cpp) ----
  Expr lower_object(const Simple& s);
  std::vector<Expr> other_properties(const Simple& s, const std::vector<std::string>& names);
  std::vector<Expr> other_keys(const Simple& s, const std::vector<std::string>& names);

  const SchemaLimits& limits_;
  const bool exact_;
  Layout layout_;
  ojson doc_;
  Draft draft_ = Draft::unknown;
  bool legacy_id_ = true;  // `id` is draft 4's $id (no $schema, or draft 3 or 4)
  bool has_refs_ = false;
  RuleBuilder b_;
  Shared sh_{};
  std::map<const ojson*, int32_t> memo_;
  std::map<std::string, std::vector<RegexBranch>> regexes_;
  bool possible_ = false;  // satisfies(): whether a validator may accept (true) or the grammar writes (false)
  std::deque<ojson> arena_;
  std::map<std::string, const ojson*> arena_index_;
  size_t arena_bytes_ = 0;
  int depth_ = 0;
  std::vector<const ojson*> expanding_;
};

}  // namespace troupe::grammar::schema
