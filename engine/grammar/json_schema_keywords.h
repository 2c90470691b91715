#pragma once
// A schema as the JSON Schema converter (json_schema_converter.h) reads it:
// the JSON types as bits, the keywords it enforces, refuses or takes for
// annotations, a subschema where it stands (Node), and one conjunction of
// constraints per type (Simple).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/grammar/json_schema_numbers.h"

namespace troupe::grammar::schema {

using ojson = nlohmann::ordered_json;  // keeps `properties` in their declared order

enum TypeBits : unsigned {
  kNull = 1,
  kBool = 2,
  kObject = 4,
  kArray = 8,
  kString = 16,
  kInteger = 32,
  kFraction = 64,  // numbers that are not integers
  kAllTypes = 127,
};

// The bits of a type's name (0: no type of JSON Schema's).
unsigned type_bits(std::string_view name);
// The type of a value (integral floats are integers).
unsigned value_type(const ojson& v);
// JSON Schema equality: objects unordered, 1 == 1.0.
bool same_value(const ojson& a, const ojson& b);

// The keywords enforced (and those negations write).
const std::set<std::string, std::less<>>& supported_keywords();
// The types the keywords constrain (0: some keyword is about none).
unsigned keyword_types(const std::vector<std::string>& keywords);
// Keywords of some draft that constrain instances and are not enforced here,
// and why.
const std::map<std::string, std::string, std::less<>>& refused_keywords();
// The validation keyword an unknown keyword is probably a misspelling of
// ("" for none).
std::string misspelt(std::string_view k);
// Unknown keywords are annotations (validators ignore them), but for
// likely misspellings of validation keywords.
bool is_annotation(std::string_view k);
// A JSON Pointer token: ~ and / escaped.
std::string escape_pointer_token(std::string_view t);

// A subschema and its JSON Pointer.
struct Node {
  const ojson* s;
  std::string ptr;
};

// The schemas `true` and `false` (for properties and items that have none).
inline const ojson kTrueSchema = true;
inline const ojson kFalseSchema = false;

bool is_false(const Node& n);
// `true`, or an object of annotations only.
bool is_true(const Node& n);

// The pointer of a keyword of the schema at `base`.
struct KeywordAt {
  const std::string& base;
  std::string operator()(const std::string& kw) const { return base + "/" + escape_pointer_token(kw); }
};

// A lower or upper bound on numbers.
struct Bound {
  bool set = false, exclusive = false;
  Decimal value;
  std::string keyword, ptr;
  bool integer_literal = false;  // written as a JSON integer (a validator compares it exactly)
};

// b made the tighter of b and nb (lower bounds: the higher).
void tighten(Bound& b, const Bound& nb, bool lower);

// One conjunction of constraints, per type (no anyOf/oneOf/allOf/$ref left).
struct Simple {
  std::string ptr;
  unsigned types = kAllTypes;
  bool has_values = false;
  std::vector<ojson> values;
  std::string values_keyword;
  std::vector<std::string> constraints;  // keywords besides type/enum/const: refused beside enum
  int64_t min_len = 0, max_len = -1;
  std::vector<std::pair<std::string, std::string>> patterns;  // pattern, pointer
  std::string format, format_ptr;
  Bound lo, hi;
  std::vector<std::pair<Decimal, std::string>> multiples;  // multipleOf, pointer
  std::vector<std::pair<std::string, Node>> props;
  std::vector<std::string> required;
  std::optional<Node> additional;  // none: any
  struct PatternProp {
    std::string regex, ptr;
    Node schema;
  };
  std::vector<PatternProp> pattern_props;
  std::vector<Node> property_names;  // schemas every name must meet
  std::vector<std::string> not_in;  // strings other than these
  std::vector<Node> contains;       // schemas some item must meet, each
  bool unique = false;              // uniqueItems
  std::vector<Node> prefix;
  std::optional<Node> rest;  // none: any
  int64_t min_items = 0, max_items = -1;
  int64_t min_props = 0, max_props = -1;
};

// The property of this name the schema declares, or null.
const Node* find_prop(const Simple& s, std::string_view name);
// The smaller of two upper counts (-1: none).
int64_t min_of(int64_t a, int64_t b);

}  // namespace troupe::grammar::schema
