// JSON Schema to GBNF, fail closed (json_schema.h, docs/JSON_SCHEMA.md).
//
// A schema is read into "simple" schemas (one per anyOf/oneOf branch once
// allOf is merged in): per JSON type, the constraints on it. Each becomes a
// union over its allowed types; every subschema is a rule, so references
// (recursive ones too) are rule references. Strings are matched as JSON text:
// a character of a pattern, format, key or const is any of its spellings
// (raw, \n-style, \uXXXX, a surrogate pair), so escapes change nothing.
#include "engine/grammar/json_schema.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "engine/grammar/regex_to_gbnf.h"

namespace troupe::grammar {

SchemaError::SchemaError(std::string keyword, std::string pointer, const std::string& why)
    : std::invalid_argument((pointer.empty() ? std::string("/") : pointer) + ": " + keyword + ": " + why),
      keyword_(std::move(keyword)),
      pointer_(std::move(pointer)) {}

namespace {

using namespace detail;
using ojson = nlohmann::ordered_json;  // keeps `properties` in their declared order
using json = nlohmann::json;

constexpr int32_t kMaxRepeat = 10000;  // gbnf.cpp's cap on x{m,n}
constexpr size_t kMaxDisjuncts = 64;   // anyOf/oneOf branches once allOf is distributed
constexpr long double kMaxIntegerBound = 1e18L;

// ---- JSON text pieces -----------------------------------------------------------

CharSet cs(std::u32string_view chars) {
  CharSet s;
  for (char32_t c : chars) s.add(c, c);
  return s;
}

// The escapes JSON has for single characters, by the character.
const std::map<char32_t, std::string>& short_escapes() {
  static const std::map<char32_t, std::string> m{{'"', "\\\""}, {'\\', "\\\\"}, {'/', "\\/"}, {'\b', "\\b"},
                                                 {'\f', "\\f"},  {'\n', "\\n"},  {'\r', "\\r"}, {'\t', "\\t"}};
  return m;
}

// Hex digits with values lo..hi, either case.
Expr hex_digit(int lo, int hi) {
  if (lo == hi && lo < 10) return text(std::string(1, static_cast<char>('0' + lo)));
  CharSet s;
  if (lo <= 9) s.add(static_cast<char32_t>('0' + lo), static_cast<char32_t>('0' + std::min(hi, 9)));
  if (hi >= 10) {
    const int a = std::max(lo, 10) - 10, b = hi - 10;
    s.add(static_cast<char32_t>('a' + a), static_cast<char32_t>('a' + b));
    s.add(static_cast<char32_t>('A' + a), static_cast<char32_t>('A' + b));
  }
  return chars(s);
}

Expr dec_digit(int lo, int hi) {
  if (lo == hi) return text(std::string(1, static_cast<char>('0' + lo)));
  return chars(CharSet(static_cast<char32_t>('0' + lo), static_cast<char32_t>('0' + hi)));
}

uint64_t power(uint64_t base, int exp) {
  uint64_t p = 1;
  for (int i = 0; i < exp; ++i) p *= base;
  return p;
}

// Strings of exactly `width` digits whose value lies in [lo, hi]: one digit
// position at a time, as llama.cpp's _generate_min_max_int does.
Expr digit_range(uint64_t lo, uint64_t hi, int width, uint64_t base, const std::function<Expr(int, int)>& digit) {
  if (width == 0) return empty();
  const uint64_t p = power(base, width - 1);
  const auto lo_d = static_cast<int>(lo / p), hi_d = static_cast<int>(hi / p);
  const uint64_t lo_r = lo % p, hi_r = hi % p;
  if (lo_d == hi_d) return seq({digit(lo_d, lo_d), digit_range(lo_r, hi_r, width - 1, base, digit)});
  std::vector<Expr> alts;
  int mid_lo = lo_d, mid_hi = hi_d;
  if (lo_r != 0) {
    alts.push_back(seq({digit(lo_d, lo_d), digit_range(lo_r, p - 1, width - 1, base, digit)}));
    ++mid_lo;
  }
  const bool hi_partial = hi_r != p - 1;
  if (hi_partial) --mid_hi;
  if (mid_lo <= mid_hi)
    alts.push_back(seq({digit(mid_lo, mid_hi), rep(digit(0, static_cast<int>(base) - 1), width - 1, width - 1)}));
  if (hi_partial) alts.push_back(seq({digit(hi_d, hi_d), digit_range(0, hi_r, width - 1, base, digit)}));
  return alt(std::move(alts));
}

Expr hex4(uint32_t lo, uint32_t hi) { return seq({text("\\u"), digit_range(lo, hi, 4, 16, hex_digit)}); }

// \uXXXX\uXXXX pairs for code points lo..hi past the BMP.
Expr surrogate_pairs(char32_t lo, char32_t hi) {
  auto high = [](char32_t c) { return static_cast<uint32_t>(0xD800 + ((c - 0x10000) >> 10)); };
  auto low = [](char32_t c) { return static_cast<uint32_t>(0xDC00 + ((c - 0x10000) & 0x3FF)); };
  if (high(lo) == high(hi)) return seq({hex4(high(lo), high(lo)), hex4(low(lo), low(hi))});
  std::vector<Expr> alts{seq({hex4(high(lo), high(lo)), hex4(low(lo), 0xDFFF)})};
  if (high(lo) + 1 <= high(hi) - 1) alts.push_back(seq({hex4(high(lo) + 1, high(hi) - 1), hex4(0xDC00, 0xDFFF)}));
  alts.push_back(seq({hex4(high(hi), high(hi)), hex4(0xDC00, low(hi))}));
  return alt(std::move(alts));
}

// Every spelling, inside a JSON string, of a character of `set`.
Expr json_spellings(const CharSet& set) {
  std::vector<Expr> alts{chars(set - cs(U"\"\\").add(0, 0x1F))};
  for (const auto& [c, esc] : short_escapes())
    if (set.contains(c)) alts.push_back(text(esc));
  const CharSet bmp = set & CharSet(0, 0xFFFF), astral = set & CharSet(0x10000, CharSet::kMax);
  for (const auto& r : bmp.ranges()) alts.push_back(hex4(r.lo, r.hi));
  for (const auto& r : astral.ranges()) alts.push_back(surrogate_pairs(r.lo, r.hi));
  return alt(std::move(alts));
}

// The rules every JSON grammar shares.
struct Shared {
  int32_t ws, chr, string, tail, integer, number, boolean, null, value, object, array;
};

Shared add_shared(RuleBuilder& b) {
  Shared s{};
  const Expr hex = chars(CharSet('0', '9').add('a', 'f').add('A', 'F'));
  const Expr digit = chars(CharSet('0', '9'));
  s.ws = b.reserve("ws");
  b.define(s.ws, opt(alt({text(" "), seq({text("\n"), rep(chars(cs(U" \t")), 0, 20)})})));
  // \uXXXX spells a BMP character; a surrogate only as half of a pair.
  const Expr not_surrogate = seq({chars(CharSet('0', '9').add('a', 'c').add('A', 'C').add('e', 'f').add('E', 'F')), rep(hex, 3, 3)});
  const Expr low_surrogate = seq({text("\\u"), chars(cs(U"dD")), chars(CharSet('c', 'f').add('C', 'F')), rep(hex, 2, 2)});
  const Expr pair = seq({chars(cs(U"dD")), chars(cs(U"89abAB")), rep(hex, 2, 2), low_surrogate});
  const Expr bmp_high = seq({chars(cs(U"dD")), chars(CharSet('0', '7')), rep(hex, 2, 2)});
  s.chr = b.reserve("char");
  b.define(s.chr, alt({chars(CharSet::any() - cs(U"\"\\").add(0, 0x1F)),
                       seq({text("\\"), alt({chars(cs(U"\"\\/bfnrt")), seq({text("u"), alt({not_surrogate, bmp_high, pair})})})})}));
  s.tail = b.reserve("string-tail");
  b.define(s.tail, seq({star(ref(s.chr)), text("\"")}));
  s.string = b.reserve("string");
  b.define(s.string, seq({text("\""), ref(s.tail)}));
  const Expr natural = alt({text("0"), seq({chars(CharSet('1', '9')), star(digit)})});
  s.integer = b.reserve("integer");
  b.define(s.integer, seq({opt(text("-")), natural}));
  s.number = b.reserve("number");
  b.define(s.number, seq({opt(text("-")), natural, opt(seq({text("."), rep(digit, 1, -1)})),
                          opt(seq({chars(cs(U"eE")), opt(chars(cs(U"+-"))), rep(digit, 1, -1)}))}));
  s.boolean = b.reserve("boolean");
  b.define(s.boolean, alt({text("true"), text("false")}));
  s.null = b.reserve("null");
  b.define(s.null, text("null"));
  s.value = b.reserve("value");
  s.object = b.reserve("object");
  s.array = b.reserve("array");
  b.define(s.value, alt({ref(s.object), ref(s.array), ref(s.string), ref(s.number), ref(s.boolean), ref(s.null)}));
  const Expr member = seq({ref(s.string), ref(s.ws), text(":"), ref(s.ws), ref(s.value), ref(s.ws)});
  b.define(s.object, seq({text("{"), ref(s.ws), opt(seq({member, star(seq({text(","), ref(s.ws), member}))})), text("}")}));
  const Expr item = seq({ref(s.value), ref(s.ws)});
  b.define(s.array, seq({text("["), ref(s.ws), opt(seq({item, star(seq({text(","), ref(s.ws), item}))})), text("]")}));
  return s;
}

// ---- numbers ----------------------------------------------------------------------

int decimal_width(uint64_t v) {
  int w = 1;
  while (v >= 10) v /= 10, ++w;
  return w;
}

// Decimal naturals without leading zeros in [lo, hi]; no hi: unbounded.
Expr natural_range(uint64_t lo, std::optional<uint64_t> hi) {
  std::vector<Expr> alts;
  const int w_lo = decimal_width(lo), w_hi = hi ? decimal_width(*hi) : w_lo;
  for (int w = w_lo; w <= w_hi; ++w) {
    const uint64_t a = std::max(lo, w == 1 ? uint64_t{0} : power(10, w - 1));
    const uint64_t b = hi ? std::min(*hi, power(10, w) - 1) : power(10, w) - 1;
    if (a <= b) alts.push_back(digit_range(a, b, w, 10, dec_digit));
  }
  if (!hi) alts.push_back(seq({chars(CharSet('1', '9')), rep(chars(CharSet('0', '9')), w_lo, -1)}));
  return alt(std::move(alts));
}

// JSON integers (no fraction, no exponent) in [lo, hi], "-0" included where 0 is.
Expr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) return nothing();
  std::vector<Expr> alts;
  if (!lo || *lo < 0) {
    const int64_t neg_hi = hi ? std::min<int64_t>(*hi, -1) : -1;
    if (!lo || *lo <= neg_hi) {
      const std::optional<uint64_t> abs_hi = lo ? std::optional<uint64_t>(static_cast<uint64_t>(-*lo)) : std::nullopt;
      alts.push_back(seq({text("-"), natural_range(static_cast<uint64_t>(-neg_hi), abs_hi)}));
    }
  }
  if (!hi || *hi >= 0) {
    const uint64_t from = lo ? static_cast<uint64_t>(std::max<int64_t>(*lo, 0)) : 0;
    alts.push_back(natural_range(from, hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt));
  }
  if ((!lo || *lo <= 0) && (!hi || *hi >= 0)) alts.push_back(text("-0"));
  return alt(std::move(alts));
}

// JSON numbers by sign, exactly (the exponent cannot make zero nonzero).
Expr number_by_sign(bool negative, bool zero, bool positive) {
  const Expr digit = chars(CharSet('0', '9'));
  const Expr exp = opt(seq({chars(cs(U"eE")), opt(chars(cs(U"+-"))), rep(digit, 1, -1)}));
  const Expr nonzero =
      seq({alt({seq({chars(CharSet('1', '9')), star(digit), opt(seq({text("."), rep(digit, 1, -1)}))}),
                seq({text("0."), star(text("0")), chars(CharSet('1', '9')), star(digit)})}),
           exp});
  const Expr zeros = seq({text("0"), opt(seq({text("."), rep(text("0"), 1, -1)})), exp});
  std::vector<Expr> alts;
  if (negative) alts.push_back(seq({text("-"), nonzero}));
  if (zero) alts.push_back(seq({opt(text("-")), zeros}));
  if (positive) alts.push_back(nonzero);
  return alt(std::move(alts));
}

// The spelling a const or enum number is accepted in: integral values as
// integers (as the integer type), others as nlohmann writes them.
std::string number_text(const ojson& v) {
  if (v.is_number_integer()) return v.dump();
  const double d = v.get<double>();
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) return std::to_string(static_cast<int64_t>(d));
  return v.dump();
}

// ---- schema reading ------------------------------------------------------------

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

unsigned type_bits(std::string_view name) {
  if (name == "null") return kNull;
  if (name == "boolean") return kBool;
  if (name == "object") return kObject;
  if (name == "array") return kArray;
  if (name == "string") return kString;
  if (name == "integer") return kInteger;
  if (name == "number") return kInteger | kFraction;
  return 0;
}

unsigned value_type(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return kNull;
    case ojson::value_t::boolean: return kBool;
    case ojson::value_t::object: return kObject;
    case ojson::value_t::array: return kArray;
    case ojson::value_t::string: return kString;
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned: return kInteger;
    case ojson::value_t::number_float: {
      const double d = v.get<double>();
      return std::isfinite(d) && d == std::floor(d) ? kInteger : kFraction;
    }
    default: return 0;
  }
}

// JSON Schema equality: objects unordered, 1 == 1.0.
bool same_value(const ojson& a, const ojson& b) { return json(a) == json(b); }

const std::set<std::string, std::less<>>& annotation_keywords() {
  static const std::set<std::string, std::less<>> s{"title",   "description", "default", "examples",  "$schema",    "$id",
                                                    "$comment", "deprecated", "readOnly", "writeOnly", "definitions", "$defs"};
  return s;
}

const std::set<std::string, std::less<>>& supported_keywords() {
  static const std::set<std::string, std::less<>> s{
      "type",      "enum",     "const",     "properties", "required",   "additionalProperties", "items",
      "prefixItems", "additionalItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "nullable",
      "minLength", "maxLength", "pattern",  "format",     "minimum",    "maximum",              "exclusiveMinimum",
      "exclusiveMaximum"};
  return s;
}

std::string refusal_reason(std::string_view kw) {
  static const std::map<std::string, std::string, std::less<>> m{
      {"uniqueItems", "a grammar cannot compare array items with each other"},
      {"multipleOf", "divisibility is not enforced"},
      {"minProperties", "counting properties is not enforced"},
      {"maxProperties", "counting properties is not enforced"},
      {"patternProperties", "property names chosen by regex are not enforced"},
      {"propertyNames", "constraints on property names are not enforced"},
      {"dependencies", "conditional requirements are not enforced"},
      {"dependentRequired", "conditional requirements are not enforced"},
      {"dependentSchemas", "conditional requirements are not enforced"},
      {"if", "conditionals are not enforced"},
      {"then", "conditionals are not enforced"},
      {"else", "conditionals are not enforced"},
      {"not", "a grammar cannot exclude what a schema matches"},
      {"contains", "\"some item matches\" is not enforced"},
      {"minContains", "\"some item matches\" is not enforced"},
      {"maxContains", "\"some item matches\" is not enforced"},
      {"unevaluatedProperties", "annotation-dependent validation is not enforced"},
      {"unevaluatedItems", "annotation-dependent validation is not enforced"},
      {"$anchor", "named anchors are not supported; use #/ JSON Pointer references"},
      {"$dynamicRef", "dynamic references are not supported"},
      {"$dynamicAnchor", "dynamic references are not supported"},
      {"$recursiveRef", "dynamic references are not supported"},
      {"$recursiveAnchor", "dynamic references are not supported"},
  };
  auto it = m.find(kw);
  return it != m.end() ? it->second : "the keyword is not supported (unknown keywords are refused, not ignored)";
}

std::string escape_pointer_token(std::string_view t) {
  std::string out;
  for (char c : t) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

struct Node {
  const ojson* s;
  std::string ptr;
};

const ojson kTrueSchema = true;
const ojson kFalseSchema = false;

bool is_false(const Node& n) { return n.s->is_boolean() && !n.s->get<bool>(); }
bool is_true(const Node& n) {
  if (n.s->is_boolean()) return n.s->get<bool>();
  if (!n.s->is_object()) return false;
  for (const auto& [k, v] : n.s->items())
    if (!annotation_keywords().count(k)) return false;
  return true;
}

struct Bound {
  bool set = false, exclusive = false;
  long double value = 0;
  std::string keyword, ptr;
};

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
  std::vector<std::pair<std::string, Node>> props;
  std::vector<std::string> required;
  std::optional<Node> additional;  // none: any
  std::vector<Node> prefix;
  std::optional<Node> rest;  // none: any
  int64_t min_items = 0, max_items = -1;
};

const Node* find_prop(const Simple& s, std::string_view name) {
  for (const auto& [k, n] : s.props)
    if (k == name) return &n;
  return nullptr;
}

// The schema a property of this name meets.
Node prop_schema(const Simple& s, std::string_view name) {
  if (const Node* n = find_prop(s, name)) return *n;
  return s.additional ? *s.additional : Node{&kTrueSchema, s.ptr};
}

int64_t min_of(int64_t a, int64_t b) { return a < 0 ? b : b < 0 ? a : std::min(a, b); }

int64_t code_point_count(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

// ---- formats -----------------------------------------------------------------------

std::string ipv4_regex() {
  const std::string octet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
  return octet + "(\\." + octet + "){3}";
}

std::string ipv6_regex() {
  const std::string h = "[0-9A-Fa-f]{1,4}", ls32 = "(" + h + ":" + h + "|" + ipv4_regex() + ")";
  auto upto = [&](int n) { return "((" + h + ":){0," + std::to_string(n) + "}" + h + ")?::"; };
  return "((" + h + ":){6}" + ls32 + "|::(" + h + ":){5}" + ls32 + "|(" + h + ")?::(" + h + ":){4}" + ls32 + "|" +
         upto(1) + "(" + h + ":){3}" + ls32 + "|" + upto(2) + "(" + h + ":){2}" + ls32 + "|" + upto(3) + h + ":" +
         ls32 + "|" + upto(4) + ls32 + "|" + upto(5) + h + "|" + upto(6) + ")";
}

std::string date_regex() {
  const std::string y = "\\d{4}";
  const std::string leap = "(\\d\\d([02468][48]|[13579][26]|[2468]0)|([02468][048]|[13579][26])00)";
  return "(" + y + "-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|" + y + "-(0[469]|11)-(0[1-9]|[12]\\d|30)|" + y +
         "-02-(0[1-9]|1\\d|2[0-8])|" + leap + "-02-29)";
}

std::string time_regex() {
  return "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d+)?([zZ]|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
}

std::string uri_regex() {
  const std::string pct = "%[0-9A-Fa-f]{2}";
  const std::string pchar = "([A-Za-z0-9._~!$&'()*+,;=:@-]|" + pct + ")";
  const std::string userinfo = "([A-Za-z0-9._~!$&'()*+,;=:-]|" + pct + ")*";
  const std::string reg_name = "([A-Za-z0-9._~!$&'()*+,;=-]|" + pct + ")*";
  const std::string future = "v[0-9A-Fa-f]+\\.[A-Za-z0-9._~!$&'()*+,;=:-]+";
  const std::string host = "(\\[(" + ipv6_regex() + "|" + future + ")\\]|" + reg_name + ")";
  const std::string authority = "(" + userinfo + "@)?" + host + "(:\\d*)?";
  const std::string segments = "(/" + pchar + "*)*";
  const std::string hier = "(//" + authority + segments + "|/(" + pchar + "+" + segments + ")?|" + pchar + "+" + segments + ")?";
  return "[A-Za-z][A-Za-z0-9+.-]*:" + hier + "(\\?(" + pchar + "|[/?])*)?(#(" + pchar + "|[/?])*)?";
}

const std::map<std::string, std::string, std::less<>>& format_regexes() {
  static const std::map<std::string, std::string, std::less<>> m{
      {"date", date_regex()},
      {"time", time_regex()},
      {"date-time", date_regex() + "[tT]" + time_regex()},
      {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
      {"email",
       "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)+"
       "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"},
      {"uri", uri_regex()},
      {"ipv4", ipv4_regex()},
      {"ipv6", ipv6_regex()},
  };
  return m;
}

// ---- the converter ---------------------------------------------------------------

enum class Draft { unknown, up_to_7, from_2019 };

// Deepest nesting of arrays and objects in JSON text (strings skipped), so a
// hostile schema is refused before anything recurses over it.
size_t json_nesting(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

bool mentions_ref(const ojson& j) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      if ((k == "$ref" && v.is_string()) || mentions_ref(v)) return true;
  } else if (j.is_array()) {
    for (const auto& v : j)
      if (mentions_ref(v)) return true;
  }
  return false;
}

class Converter {
 public:
  Converter(std::string_view text, const SchemaLimits& limits) : limits_(limits), b_(limits.max_grammar_bytes) {
    if (text.size() > limits.max_schema_bytes)
      throw SchemaError("limits", "", "the schema is " + std::to_string(text.size()) + " bytes; the limit is " +
                                          std::to_string(limits.max_schema_bytes));
    if (json_nesting(text) > static_cast<size_t>(4 * limits.max_depth + 16))
      throw SchemaError("limits", "", "the schema nests deeper than max_depth " + std::to_string(limits.max_depth) + " allows");
    try {
      doc_ = ojson::parse(text);
    } catch (const ojson::exception& e) {
      throw SchemaError("schema", "", std::string("not valid JSON: ") + e.what());
    }
    if (doc_.is_object()) {
      if (auto it = doc_.find("$schema"); it != doc_.end() && it->is_string()) {
        const std::string uri = it->get<std::string>();
        for (const char* old : {"draft-03", "draft-04", "draft-06", "draft-07"})
          if (uri.find(old) != std::string::npos) draft_ = Draft::up_to_7;
        if (uri.find("2019-09") != std::string::npos || uri.find("2020-12") != std::string::npos) draft_ = Draft::from_2019;
      }
    }
    has_refs_ = mentions_ref(doc_);
  }

  std::string run() {
    const int32_t root = b_.reserve("root", "");
    sh_ = add_shared(b_);
    if (is_false(Node{&doc_, ""})) throw SchemaError("false", "", "the schema `false` accepts no value");
    memo_[&doc_] = root;
    b_.define(root, lower_body(Node{&doc_, ""}));
    try {
      return b_.emit(root);
    } catch (const BuildError& e) {
      switch (e.reason) {
        case BuildError::Reason::empty_language:
          throw SchemaError("unsatisfiable", e.origin, "no JSON value satisfies the schema");
        case BuildError::Reason::endless_recursion:
        case BuildError::Reason::left_recursion: throw SchemaError("$ref", e.origin, e.why);
        case BuildError::Reason::too_large: throw SchemaError("limits", e.origin, e.why);
      }
      throw;
    }
  }

  std::string object_only() {
    const int32_t root = b_.reserve("root", "");
    sh_ = add_shared(b_);
    b_.define(root, ref(sh_.object));
    return b_.emit(root);
  }

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

  // ---- keywords and references ----

  void check_keywords(const Node& n) const {
    for (const auto& [k, v] : n.s->items()) {
      if (supported_keywords().count(k)) continue;
      if (!annotation_keywords().count(k)) throw SchemaError(k, n.ptr, refusal_reason(k));
      if (k == "$id" && !n.ptr.empty() && has_refs_)
        throw SchemaError("$id", n.ptr, "an embedded $id changes what $ref resolves against; it is not supported");
    }
  }

  // Whether `$ref`'s siblings say nothing (annotations and definitions only).
  static bool ref_alone(const ojson& s) {
    for (const auto& [k, v] : s.items())
      if (k != "$ref" && !annotation_keywords().count(k)) return false;
    return true;
  }

  static bool only_keyword(const ojson& s, std::string_view kw) {
    if (!s.contains(kw)) return false;
    for (const auto& [k, v] : s.items())
      if (k != kw && !annotation_keywords().count(k)) return false;
    return true;
  }

  // Whether this schema's $ref stands for the whole schema (draft 7 ignores
  // its siblings; later drafts apply them too).
  bool ref_replaces(const Node& n) const {
    const ojson& s = *n.s;
    if (!s.contains("$ref")) return false;
    if (ref_alone(s) || draft_ == Draft::up_to_7) return true;
    if (draft_ == Draft::unknown)
      throw SchemaError("$ref", n.ptr,
                        "keywords beside $ref mean different things in draft 7 (ignored) and 2019-09 on (applied); "
                        "say which with $schema");
    return false;
  }

  Node resolve(const Node& n) const {
    const ojson& r = (*n.s)["$ref"];
    const std::string at = n.ptr + "/$ref";
    if (!r.is_string()) throw SchemaError("$ref", at, "must be a string");
    const std::string ref = r.get<std::string>();
    if (ref.empty() || ref[0] != '#')
      throw SchemaError("$ref", at, "'" + ref + "': only references within the schema (#/...) are supported");
    const std::string pointer = percent_decoded(ref.substr(1), ref, at);
    if (!pointer.empty() && pointer[0] != '/')
      throw SchemaError("$ref", at, "'" + ref + "': named anchors are not supported; use a JSON Pointer (#/...)");
    const ojson* cur = &doc_;
    for (size_t pos = 0; pos < pointer.size();) {
      const size_t next = std::min(pointer.find('/', pos + 1), pointer.size());
      const std::string token = pointer_token(pointer.substr(pos + 1, next - pos - 1), ref, at);
      const bool index = cur->is_array() && !token.empty() && token.size() < 10 &&
                         token.find_first_not_of("0123456789") == std::string::npos && std::stoul(token) < cur->size();
      if (cur->is_object() && cur->contains(token)) cur = &(*cur)[token];
      else if (index) cur = &(*cur)[std::stoul(token)];
      else throw SchemaError("$ref", at, "'" + ref + "' points to nothing in the schema");
      pos = next;
    }
    return Node{cur, pointer};
  }

  // A URI fragment is %-encoded ("#/percent%25field").
  static std::string percent_decoded(const std::string& s, const std::string& ref, const std::string& at) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '%') {
        out += s[i];
        continue;
      }
      if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
        throw SchemaError("$ref", at, "'" + ref + "': a malformed %-escape");
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    }
    return out;
  }

  // One JSON Pointer token, ~1 and ~0 decoded.
  static std::string pointer_token(const std::string& raw, const std::string& ref, const std::string& at) {
    std::string token;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '~') {
        token += raw[i];
      } else if (i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) {
        token += raw[++i] == '0' ? '~' : '/';
      } else {
        throw SchemaError("$ref", at, "'" + ref + "': a malformed ~-escape");
      }
    }
    return token;
  }

  // ---- reading one schema object ----

  static int64_t count_value(const ojson& v, const std::string& kw, const std::string& ptr) {
    const bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) ||
                    (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() == std::floor(v.get<double>()));
    if (!ok) throw SchemaError(kw, ptr, "must be a non-negative integer");
    const double d = v.get<double>();
    return d > 1e15 ? int64_t{1} << 50 : v.get<int64_t>();
  }

  static std::vector<std::string> string_list(const ojson& v, const std::string& kw, const std::string& ptr) {
    if (!v.is_array()) throw SchemaError(kw, ptr, "must be an array of strings");
    std::vector<std::string> out;
    for (const auto& x : v) {
      if (!x.is_string()) throw SchemaError(kw, ptr, "must be an array of strings");
      if (std::find(out.begin(), out.end(), x.get<std::string>()) == out.end()) out.push_back(x.get<std::string>());
    }
    return out;
  }

  static void set_bound(Bound& b, const ojson& v, bool exclusive, const std::string& kw, const std::string& ptr,
                        bool lower) {
    if (!v.is_number()) throw SchemaError(kw, ptr, "must be a number");
    Bound nb{true, exclusive, static_cast<long double>(v.get<double>()), kw, ptr};
    if (v.is_number_integer()) nb.value = static_cast<long double>(v.get<int64_t>());
    if (v.is_number_unsigned()) nb.value = static_cast<long double>(v.get<uint64_t>());
    tighten(b, nb, lower);
  }

  static void tighten(Bound& b, const Bound& nb, bool lower) {
    if (!nb.set) return;
    if (!b.set) {
      b = nb;
      return;
    }
    const bool tighter = lower ? nb.value > b.value : nb.value < b.value;
    if (tighter || (nb.value == b.value && nb.exclusive && !b.exclusive)) b = nb;
  }

  Node child(const Node& n, const ojson& v, const std::string& suffix) const { return Node{&v, n.ptr + suffix}; }

  Simple simple_of(const Node& n) const {
    Simple r;
    r.ptr = n.ptr;
    auto at = [&](const std::string& kw) { return n.ptr + "/" + escape_pointer_token(kw); };
    read_types(*n.s, r, at);
    read_values(*n.s, r, at);
    read_strings(*n.s, r, at);
    read_bounds(*n.s, r, at);
    read_object(n, r, at);
    read_array(n, r, at);
    return r;
  }

  template <typename At>
  static void read_types(const ojson& s, Simple& r, At at) {
    if (auto it = s.find("type"); it != s.end()) {
      r.types = 0;
      const std::vector<std::string> names =
          it->is_string() ? std::vector<std::string>{it->get<std::string>()} : string_list(*it, "type", at("type"));
      for (const std::string& t : names) {
        if (!type_bits(t)) throw SchemaError("type", at("type"), "unknown type '" + t + "'");
        r.types |= type_bits(t);
      }
    }
    if (auto it = s.find("nullable"); it != s.end()) {
      if (!it->is_boolean()) throw SchemaError("nullable", at("nullable"), "must be a boolean");
      if (it->get<bool>() && s.contains("type")) r.types |= kNull;
    }
  }

  template <typename At>
  static void read_values(const ojson& s, Simple& r, At at) {
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array()) throw SchemaError("enum", at("enum"), "must be an array");
      r.has_values = true;
      r.values_keyword = "enum";
      r.values.assign(it->begin(), it->end());
    }
    if (auto it = s.find("const"); it != s.end()) {
      std::vector<ojson> kept;
      if (!r.has_values) kept.push_back(*it);
      for (const ojson& v : r.values)
        if (same_value(v, *it)) kept.push_back(v);
      r.has_values = true;
      r.values_keyword = "const";
      r.values = std::move(kept);
    }
  }

  template <typename At>
  static void read_strings(const ojson& s, Simple& r, At at) {
    if (auto it = s.find("minLength"); it != s.end()) {
      r.min_len = count_value(*it, "minLength", at("minLength"));
      r.constraints.push_back("minLength");
    }
    if (auto it = s.find("maxLength"); it != s.end()) {
      r.max_len = count_value(*it, "maxLength", at("maxLength"));
      r.constraints.push_back("maxLength");
    }
    if (auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) throw SchemaError("pattern", at("pattern"), "must be a string");
      r.patterns.emplace_back(it->get<std::string>(), at("pattern"));
      r.constraints.push_back("pattern");
    }
    if (auto it = s.find("format"); it != s.end()) {
      if (!it->is_string()) throw SchemaError("format", at("format"), "must be a string");
      r.format = it->get<std::string>();
      r.format_ptr = at("format");
      if (!format_regexes().count(r.format))
        throw SchemaError("format", r.format_ptr,
                          "unknown format '" + r.format + "' (supported: date, time, date-time, uuid, email, uri, ipv4, ipv6)");
      r.constraints.push_back("format");
    }
  }

  template <typename At>
  void read_bounds(const ojson& s, Simple& r, At at) const {
    // Draft 4 wrote exclusiveMinimum: true beside minimum; later drafts a number.
    auto side = [&](const char* incl, const char* excl, Bound& b, bool lower) {
      bool draft4_exclusive = false;
      if (auto it = s.find(excl); it != s.end()) {
        if (it->is_boolean()) draft4_exclusive = it->get<bool>();
        else set_bound(b, *it, true, excl, at(excl), lower), r.constraints.push_back(excl);
      }
      if (auto it = s.find(incl); it != s.end()) {
        Bound nb;
        set_bound(nb, *it, draft4_exclusive, incl, at(incl), lower);
        tighten(b, nb, lower);
        r.constraints.push_back(incl);
      }
    };
    side("minimum", "exclusiveMinimum", r.lo, true);
    side("maximum", "exclusiveMaximum", r.hi, false);
  }

  template <typename At>
  void read_object(const Node& n, Simple& r, At at) const {
    const ojson& s = *n.s;
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) throw SchemaError("properties", at("properties"), "must be an object");
      for (const auto& [k, v] : it->items()) r.props.emplace_back(k, child(n, v, "/properties/" + escape_pointer_token(k)));
      r.constraints.push_back("properties");
    }
    if (auto it = s.find("required"); it != s.end()) {
      r.required = string_list(*it, "required", at("required"));
      r.constraints.push_back("required");
    }
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      r.additional = child(n, *it, "/additionalProperties");
      r.constraints.push_back("additionalProperties");
    }
  }

  template <typename At>
  void read_array(const Node& n, Simple& r, At at) const {
    const ojson& s = *n.s;
    const auto items = s.find("items"), prefix = s.find("prefixItems"), additional = s.find("additionalItems");
    if (prefix != s.end()) {
      if (!prefix->is_array()) throw SchemaError("prefixItems", at("prefixItems"), "must be an array of schemas");
      if (additional != s.end())
        throw SchemaError("additionalItems", at("additionalItems"),
                          "beside prefixItems (2020-12) it is ambiguous; use items for the rest");
      if (items != s.end() && items->is_array())
        throw SchemaError("items", at("items"), "beside prefixItems, items must be one schema");
      for (size_t i = 0; i < prefix->size(); ++i) r.prefix.push_back(child(n, (*prefix)[i], "/prefixItems/" + std::to_string(i)));
      if (items != s.end()) r.rest = child(n, *items, "/items");
      r.constraints.push_back("prefixItems");
    } else if (items != s.end() && items->is_array()) {
      // Draft 7's tuple form; additionalItems is the rest.
      for (size_t i = 0; i < items->size(); ++i) r.prefix.push_back(child(n, (*items)[i], "/items/" + std::to_string(i)));
      if (additional != s.end()) r.rest = child(n, *additional, "/additionalItems");
      r.constraints.push_back("items");
    } else if (items != s.end()) {
      r.rest = child(n, *items, "/items");  // additionalItems has no effect beside a schema
      r.constraints.push_back("items");
    }
    if (auto it = s.find("minItems"); it != s.end()) r.min_items = count_value(*it, "minItems", at("minItems")), r.constraints.push_back("minItems");
    if (auto it = s.find("maxItems"); it != s.end()) r.max_items = count_value(*it, "maxItems", at("maxItems")), r.constraints.push_back("maxItems");
  }

  // ---- conjunctions ----

  // A schema for "both": the one if the other says nothing, else an allOf.
  Node both(const Node& x, const Node& y) {
    if (is_false(x) || is_true(y)) return x;
    if (is_false(y) || is_true(x)) return y;
    if (x.s == y.s) return x;
    ojson conj = ojson::object();
    conj["allOf"] = ojson::array({*x.s, *y.s});
    std::string key = conj.dump();
    if (auto it = arena_index_.find(key); it != arena_index_.end()) return Node{it->second, x.ptr};
    arena_bytes_ += key.size();
    if (arena_bytes_ > 4 * limits_.max_schema_bytes)
      throw SchemaError("allOf", x.ptr, "merging the schema's conjunctions grows it past 4 times max_schema_bytes");
    arena_.push_back(std::move(conj));
    arena_index_.emplace(std::move(key), &arena_.back());
    return Node{&arena_.back(), x.ptr};
  }

  std::optional<Simple> merge(const Simple& a, const Simple& b) {
    Simple r = a;
    r.types = a.types & b.types;
    if (!r.types) return std::nullopt;
    if (b.has_values) {
      if (!a.has_values) {
        r.values = b.values;
      } else {
        r.values.clear();
        for (const ojson& v : a.values)
          if (std::any_of(b.values.begin(), b.values.end(), [&](const ojson& w) { return same_value(v, w); }))
            r.values.push_back(v);
      }
      r.has_values = true;
      r.values_keyword = b.values_keyword;
    }
    r.constraints.insert(r.constraints.end(), b.constraints.begin(), b.constraints.end());
    r.min_len = std::max(a.min_len, b.min_len);
    r.max_len = min_of(a.max_len, b.max_len);
    for (const auto& p : b.patterns)
      if (std::none_of(r.patterns.begin(), r.patterns.end(), [&](const auto& q) { return q.first == p.first; }))
        r.patterns.push_back(p);
    if (!b.format.empty()) {
      if (!a.format.empty() && a.format != b.format)
        throw SchemaError("format", b.format_ptr, "formats '" + a.format + "' and '" + b.format + "' cannot both be enforced");
      r.format = b.format, r.format_ptr = b.format_ptr;
    }
    tighten(r.lo, b.lo, true);
    tighten(r.hi, b.hi, false);
    merge_objects(a, b, r);
    merge_arrays(a, b, r);
    r.min_items = std::max(a.min_items, b.min_items);
    r.max_items = min_of(a.max_items, b.max_items);
    return r;
  }

  void merge_objects(const Simple& a, const Simple& b, Simple& r) {
    r.props.clear();
    // additionalProperties of one side applies to the other's extra names.
    for (const auto& [k, n] : a.props) r.props.emplace_back(k, both(n, prop_schema(b, k)));
    for (const auto& [k, n] : b.props)
      if (!find_prop(a, k)) r.props.emplace_back(k, both(prop_schema(a, k), n));
    for (const std::string& k : b.required)
      if (std::find(r.required.begin(), r.required.end(), k) == r.required.end()) r.required.push_back(k);
    if (a.additional && b.additional) r.additional = both(*a.additional, *b.additional);
    else r.additional = a.additional ? a.additional : b.additional;
  }

  void merge_arrays(const Simple& a, const Simple& b, Simple& r) {
    const Node any{&kTrueSchema, a.ptr};
    auto at = [&](const Simple& s, size_t i) { return i < s.prefix.size() ? s.prefix[i] : s.rest ? *s.rest : any; };
    r.prefix.clear();
    for (size_t i = 0; i < std::max(a.prefix.size(), b.prefix.size()); ++i) r.prefix.push_back(both(at(a, i), at(b, i)));
    if (a.rest && b.rest) r.rest = both(*a.rest, *b.rest);
    else r.rest = a.rest ? a.rest : b.rest;
  }

  std::vector<Simple> conjoin(const std::vector<Simple>& xs, const std::vector<Simple>& ys, const std::string& kw,
                              const std::string& ptr) {
    std::vector<Simple> out;
    for (const Simple& x : xs)
      for (const Simple& y : ys)
        if (auto m = merge(x, y)) {
          out.push_back(std::move(*m));
          if (out.size() > kMaxDisjuncts)
            throw SchemaError(kw, ptr, "more than " + std::to_string(kMaxDisjuncts) + " branches once allOf is distributed over anyOf/oneOf");
        }
    return out;
  }

  // The schema as a union of simple schemas. `nested`: a step deeper than
  // the caller (false where lower() has counted this node already).
  std::vector<Simple> expand(const Node& n, bool nested = true) {
    if (n.s->is_boolean()) {
      if (!n.s->get<bool>()) return {};
      Simple any;
      any.ptr = n.ptr;
      return {any};
    }
    if (!n.s->is_object()) throw SchemaError("schema", n.ptr, "a schema must be an object or a boolean");
    std::optional<Deeper> guard;
    if (nested) guard.emplace(*this, n.ptr);
    if (std::find(expanding_.begin(), expanding_.end(), n.s) != expanding_.end())
      throw SchemaError("$ref", n.ptr, "refers back to itself without nesting (through $ref, allOf, anyOf or oneOf)");
    expanding_.push_back(n.s);
    struct Pop {
      std::vector<const ojson*>& v;
      ~Pop() { v.pop_back(); }
    } pop{expanding_};
    check_keywords(n);
    const ojson& s = *n.s;
    if (ref_replaces(n)) return expand(resolve(n));
    std::vector<Simple> out{simple_of(n)};
    if (s.contains("$ref")) out = conjoin(out, expand(resolve(n)), "$ref", n.ptr);
    if (s.contains("allOf"))
      for (const Node& sub : subschemas(n, "allOf")) out = conjoin(out, expand(sub), "allOf", n.ptr);
    if (s.contains("anyOf")) {
      std::vector<Simple> options;
      for (const Node& sub : subschemas(n, "anyOf"))
        for (Simple& x : expand(sub)) options.push_back(std::move(x));
      out = conjoin(out, options, "anyOf", n.ptr);
    }
    if (s.contains("oneOf")) {
      std::vector<std::vector<Simple>> branches;
      for (const Node& sub : subschemas(n, "oneOf")) branches.push_back(conjoin(out, expand(sub), "oneOf", n.ptr));
      require_exclusive(branches, n.ptr);
      out.clear();
      for (auto& br : branches)
        for (Simple& x : br) out.push_back(std::move(x));
    }
    return out;
  }

  std::vector<Node> subschemas(const Node& n, const std::string& kw) const {
    const ojson& v = (*n.s)[kw];
    if (!v.is_array() || v.empty()) throw SchemaError(kw, n.ptr + "/" + kw, "must be a non-empty array of schemas");
    std::vector<Node> out;
    for (size_t i = 0; i < v.size(); ++i) out.push_back(child(n, v[i], "/" + kw + "/" + std::to_string(i)));
    return out;
  }

  // ---- oneOf: exclusive only where provably so ----

  void require_exclusive(const std::vector<std::vector<Simple>>& branches, const std::string& ptr) {
    for (size_t i = 0; i < branches.size(); ++i)
      for (size_t j = i + 1; j < branches.size(); ++j)
        for (const Simple& a : branches[i])
          for (const Simple& b : branches[j])
            if (!disjoint(a, b, 0))
              throw SchemaError("oneOf", ptr,
                                "branches " + std::to_string(i) + " and " + std::to_string(j) +
                                    " may both match, and a grammar cannot enforce that only one does");
  }

  static unsigned effective_types(const Simple& s) {
    if (!s.has_values) return s.types;
    unsigned t = 0;
    for (const ojson& v : s.values) t |= value_type(v);
    return t & s.types;
  }

  static bool ranges_apart(const Bound& lo1, const Bound& hi1, const Bound& lo2, const Bound& hi2) {
    auto below = [](const Bound& hi, const Bound& lo) {
      return hi.set && lo.set && (hi.value < lo.value || (hi.value == lo.value && (hi.exclusive || lo.exclusive)));
    };
    return below(hi1, lo2) || below(hi2, lo1);
  }

  static bool counts_apart(int64_t min1, int64_t max1, int64_t min2, int64_t max2) {
    return (max1 >= 0 && max1 < min2) || (max2 >= 0 && max2 < min1);
  }

  bool disjoint(const Simple& a, const Simple& b, int depth) {
    const unsigned common = effective_types(a) & effective_types(b);
    if (!common) return true;
    if (a.has_values || b.has_values) {
      const Simple& finite = a.has_values ? a : b;
      const Simple& other = a.has_values ? b : a;
      for (const ojson& v : finite.values)
        if ((value_type(v) & finite.types) && !fails(v, other, depth)) return false;
      return true;
    }
    for (unsigned t = 1; t < kAllTypes; t <<= 1) {
      if (!(common & t)) continue;
      bool apart = false;
      if (t == kInteger || t == kFraction) apart = ranges_apart(a.lo, a.hi, b.lo, b.hi);
      else if (t == kString) apart = counts_apart(a.min_len, a.max_len, b.min_len, b.max_len);
      else if (t == kArray) apart = counts_apart(a.min_items, a.max_items, b.min_items, b.max_items);
      else if (t == kObject) apart = objects_apart(a, b, depth);
      if (!apart) return false;
    }
    return true;
  }

  bool forbids(const Simple& s, const std::string& name) { return is_false(prop_schema(s, name)); }

  bool objects_apart(const Simple& a, const Simple& b, int depth) {
    for (const std::string& k : a.required)
      if (forbids(b, k)) return true;
    for (const std::string& k : b.required)
      if (forbids(a, k)) return true;
    for (const std::string& k : a.required)
      if (std::find(b.required.begin(), b.required.end(), k) != b.required.end() &&
          nodes_apart(prop_schema(a, k), prop_schema(b, k), depth + 1))
        return true;
    return false;
  }

  bool nodes_apart(const Node& x, const Node& y, int depth) {
    if (depth > 8) return false;
    std::vector<Simple> xs, ys;
    try {
      xs = expand(x);
      ys = expand(y);
    } catch (const SchemaError&) {
      return false;  // lowering will name the problem
    }
    for (const Simple& a : xs)
      for (const Simple& b : ys)
        if (!disjoint(a, b, depth)) return false;
    return true;
  }

  // Whether `v` certainly fails `s` (false: it may pass).
  bool fails(const ojson& v, const Simple& s, int depth) {
    const unsigned t = value_type(v);
    if (!(t & s.types)) return true;
    if (s.has_values)
      return std::none_of(s.values.begin(), s.values.end(), [&](const ojson& w) { return same_value(v, w); });
    if (t == kString) {
      const int64_t len = code_point_count(v.get<std::string>());
      return len < s.min_len || (s.max_len >= 0 && len > s.max_len);
    }
    if (t == kArray)
      return static_cast<int64_t>(v.size()) < s.min_items || (s.max_items >= 0 && static_cast<int64_t>(v.size()) > s.max_items);
    if (t == kInteger || t == kFraction) {
      const long double x = v.get<double>();
      const bool low = s.lo.set && (x < s.lo.value || (x == s.lo.value && s.lo.exclusive));
      const bool high = s.hi.set && (x > s.hi.value || (x == s.hi.value && s.hi.exclusive));
      return low || high;
    }
    if (t == kObject) {
      for (const std::string& k : s.required)
        if (!v.contains(k)) return true;
      if (depth > 8) return false;
      for (const auto& [k, x] : v.items()) {
        std::vector<Simple> options;
        try {
          options = expand(prop_schema(s, k));
        } catch (const SchemaError&) {
          return false;
        }
        const ojson& value = x;  // clang 14 cannot capture a structured binding
        if (std::all_of(options.begin(), options.end(), [&](const Simple& o) { return fails(value, o, depth + 1); }))
          return true;
      }
    }
    return false;
  }

  // ---- lowering ----

  static std::string hint(const std::string& ptr) {
    if (ptr.empty()) return "root";
    const size_t slash = ptr.rfind('/');
    std::string last = ptr.substr(slash + 1);
    if (!last.empty() && last.find_first_not_of("0123456789") == std::string::npos && slash > 0) {
      const size_t before = ptr.rfind('/', slash - 1);
      last = ptr.substr(before + 1, slash - before - 1) + "-" + last;
    }
    return last;
  }

  Expr lower(const Node& n) {
    if (n.s->is_boolean()) return n.s->get<bool>() ? ref(sh_.value) : nothing();
    if (auto it = memo_.find(n.s); it != memo_.end()) return ref(it->second);
    const int32_t id = b_.reserve(hint(n.ptr), n.ptr);
    memo_[n.s] = id;
    Deeper guard(*this, n.ptr);
    b_.define(id, lower_body(n));
    return ref(id);
  }

  Expr lower_body(const Node& n) {
    if (n.s->is_boolean()) return n.s->get<bool>() ? ref(sh_.value) : nothing();
    if (!n.s->is_object()) throw SchemaError("schema", n.ptr, "a schema must be an object or a boolean");
    check_keywords(n);
    if (ref_replaces(n)) return lower(resolve(n));
    // A bare anyOf/oneOf keeps its branches as rules of their own.
    for (const char* kw : {"anyOf", "oneOf"}) {
      if (!only_keyword(*n.s, kw)) continue;
      const std::vector<Node> subs = subschemas(n, kw);
      if (std::string_view(kw) == "oneOf") {
        std::vector<std::vector<Simple>> branches;
        for (const Node& sub : subs) branches.push_back(expand(sub));
        require_exclusive(branches, n.ptr);
      }
      std::vector<Expr> alts;
      for (const Node& sub : subs) alts.push_back(lower(sub));
      return alt(std::move(alts));
    }
    std::vector<Expr> alts;
    for (const Simple& s : expand(n, false)) alts.push_back(lower_simple(s));
    return alt(std::move(alts));
  }

  Expr lower_simple(const Simple& s) {
    if (s.has_values) {
      if (!s.constraints.empty())
        throw SchemaError(s.values_keyword, s.ptr,
                          "beside '" + s.constraints.front() + "': only type and nullable may narrow enum and const");
      std::vector<Expr> alts;
      for (const ojson& v : s.values)
        if (value_type(v) & s.types) alts.push_back(literal(v));
      return alt(std::move(alts));
    }
    std::vector<Expr> alts;
    if (s.types & kNull) alts.push_back(ref(sh_.null));
    if (s.types & kBool) alts.push_back(ref(sh_.boolean));
    if (s.types & (kInteger | kFraction)) alts.push_back(lower_number(s));
    if (s.types & kString) alts.push_back(lower_string(s));
    if (s.types & kArray) alts.push_back(lower_array(s));
    if (s.types & kObject) alts.push_back(lower_object(s));
    return alt(std::move(alts));
  }

  Expr lower_number(const Simple& s) {
    const bool fractions = s.types & kFraction;
    if (!s.lo.set && !s.hi.set) return ref(fractions ? sh_.number : sh_.integer);
    if (fractions) {
      // Past 0, a bound on decimal text with exponents is no regular language.
      for (const Bound* b : {&s.lo, &s.hi})
        if (b->set && b->value != 0)
          throw SchemaError(b->keyword, b->ptr,
                            "bounds on non-integer numbers are enforced only at 0 (use type integer for other bounds)");
      const bool negative = !s.lo.set, positive = !s.hi.set;
      const bool zero = !(s.lo.set && s.lo.exclusive) && !(s.hi.set && s.hi.exclusive);
      return number_by_sign(negative, zero, positive);
    }
    std::optional<int64_t> lo, hi;
    for (const Bound* b : {&s.lo, &s.hi}) {
      if (b->set && std::fabs(b->value) > kMaxIntegerBound)
        throw SchemaError(b->keyword, b->ptr, "integer bounds beyond ±10^18 are not supported");
    }
    if (s.lo.set) lo = static_cast<int64_t>(s.lo.exclusive ? std::floor(s.lo.value) + 1 : std::ceil(s.lo.value));
    if (s.hi.set) hi = static_cast<int64_t>(s.hi.exclusive ? std::ceil(s.hi.value) - 1 : std::floor(s.hi.value));
    return integer_range(lo, hi);
  }

  const std::string& pattern_of(const Simple& s) {
    if (s.patterns.size() > 1)
      throw SchemaError("pattern", s.patterns[1].second, "two patterns on one string cannot be intersected");
    return s.patterns.front().first;
  }

  Expr lower_string(const Simple& s) {
    if (s.max_len >= 0 && s.min_len > s.max_len) return nothing();
    const Expr quote = text("\"");
    if (s.patterns.empty() && s.format.empty()) {
      if (s.min_len == 0 && s.max_len < 0) return ref(sh_.string);
      if (s.min_len > kMaxRepeat) throw SchemaError("minLength", s.ptr, "above " + std::to_string(kMaxRepeat));
      if (s.max_len > kMaxRepeat) throw SchemaError("maxLength", s.ptr, "above " + std::to_string(kMaxRepeat));
      return seq({quote, rep(ref(sh_.chr), static_cast<int32_t>(s.min_len), static_cast<int32_t>(s.max_len)), quote});
    }
    if (!s.patterns.empty() && !s.format.empty())
      throw SchemaError("format", s.format_ptr, "a format and a pattern on one string cannot be intersected");
    Expr c = s.patterns.empty() ? format_content(s.format) : pattern_content(pattern_of(s), s.patterns.front().second);
    c = bound_length(std::move(c), s);
    return seq({quote, json_content(c), quote});
  }

  // A pattern matches anywhere in the string unless anchored.
  Expr pattern_content(const std::string& pattern, const std::string& ptr) {
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

  Expr format_content(const std::string& format) {
    std::vector<Expr> alts;
    for (RegexBranch& b : parse_regex(format_regexes().find(format)->second, "")) alts.push_back(std::move(b.body));
    return alt(std::move(alts));
  }

  // minLength/maxLength beside a pattern or format: kept where the regex
  // already implies them or is one repeated class, refused elsewhere.
  Expr bound_length(Expr c, const Simple& s) {
    if (s.min_len == 0 && s.max_len < 0) return c;
    const auto [lo, hi] = length_range(c);
    if (lo >= s.min_len && (s.max_len < 0 || (hi >= 0 && hi <= s.max_len))) return c;
    if (c.kind == Expr::Kind::rep && c.items[0].kind == Expr::Kind::chars) {
      if (s.min_len > kMaxRepeat || s.max_len > kMaxRepeat)
        throw SchemaError(s.max_len > kMaxRepeat ? "maxLength" : "minLength", s.ptr, "above " + std::to_string(kMaxRepeat));
      const auto min = static_cast<int32_t>(std::max<int64_t>(c.min, s.min_len));
      const auto max = static_cast<int32_t>(min_of(c.max, s.max_len));
      return rep(std::move(c.items[0]), min, max);
    }
    throw SchemaError(s.max_len >= 0 ? "maxLength" : "minLength", s.ptr,
                      "beside a pattern or format, string lengths are enforced only where the regex implies them or is "
                      "one repeated character class");
  }

  // Code points → their spellings inside a JSON string.
  Expr json_content(const Expr& e) {
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

  Expr spell(char32_t c) { return json_spellings(CharSet(c, c)); }

  Expr spell_set(const CharSet& set) {
    if (set == CharSet::any()) return ref(sh_.chr);
    if (set.single()) return spell(set.ranges()[0].lo);
    return ref(b_.intern("chars", json_spellings(set)));
  }

  Expr quoted(const std::string& s) { return seq({text("\""), json_content(text(s)), text("\"")}); }

  Expr literal(const ojson& v) {
    const Expr ws = ref(sh_.ws);
    switch (v.type()) {
      case ojson::value_t::null: return text("null");
      case ojson::value_t::boolean: return text(v.get<bool>() ? "true" : "false");
      case ojson::value_t::string: return quoted(v.get<std::string>());
      case ojson::value_t::array: {
        std::vector<Expr> parts{text("["), ws};
        for (size_t i = 0; i < v.size(); ++i) {
          if (i) parts.push_back(text(",")), parts.push_back(ws);
          parts.push_back(literal(v[i]));
          parts.push_back(ws);
        }
        parts.push_back(text("]"));
        return seq(std::move(parts));
      }
      case ojson::value_t::object: {
        std::vector<Expr> parts{text("{"), ws};
        bool first = true;
        for (const auto& [k, x] : v.items()) {
          if (!first) parts.push_back(text(",")), parts.push_back(ws);
          first = false;
          for (Expr p : {quoted(k), ws, text(":"), ws, literal(x), ws}) parts.push_back(std::move(p));
        }
        parts.push_back(text("}"));
        return seq(std::move(parts));
      }
      default: return text(number_text(v));
    }
  }

  Expr lower_array(const Simple& s) {
    if (s.min_items > kMaxRepeat) throw SchemaError("minItems", s.ptr, "above " + std::to_string(kMaxRepeat));
    if (s.max_items > kMaxRepeat) throw SchemaError("maxItems", s.ptr, "above " + std::to_string(kMaxRepeat));
    if (s.max_items >= 0 && s.min_items > s.max_items) return nothing();
    if (s.prefix.empty() && !s.rest && s.min_items == 0 && s.max_items < 0) return ref(sh_.array);
    std::vector<Node> prefix = s.prefix;
    if (s.max_items >= 0 && static_cast<int64_t>(prefix.size()) > s.max_items) prefix.resize(static_cast<size_t>(s.max_items));
    if (prefix.size() > static_cast<size_t>(kMaxRepeat)) throw SchemaError("items", s.ptr, "a tuple of more than 10000 items");
    const auto k = static_cast<int64_t>(prefix.size());
    const Expr ws = ref(sh_.ws), sep = seq({text(","), ref(sh_.ws)});
    const Expr rest = s.rest ? lower(*s.rest) : ref(sh_.value);
    const auto upto = [&](int64_t used) { return s.max_items < 0 ? -1 : static_cast<int32_t>(s.max_items - used); };
    Expr body;
    if (k == 0) {
      const Expr more = rep(seq({sep, rest, ws}), static_cast<int32_t>(std::max<int64_t>(s.min_items - 1, 0)), upto(1));
      const Expr some = seq({rest, ws, more});
      body = s.max_items == 0 ? empty() : s.min_items == 0 ? opt(some) : some;
    } else {
      // The rest after the tuple, then the tuple's items from the last:
      // each present (required below minItems) or the array ends there.
      body = rep(seq({sep, rest, ws}), static_cast<int32_t>(std::max<int64_t>(s.min_items - k, 0)), upto(k));
      for (int64_t i = k - 1; i >= 0; --i) {
        Expr present = seq({i == 0 ? empty() : sep, lower(prefix[static_cast<size_t>(i)]), ws, std::move(body)});
        body = i < s.min_items ? std::move(present) : alt({std::move(present), empty()});
        if (i % 8 == 7) body = ref(b_.intern("tuple", std::move(body)));
      }
    }
    return seq({text("["), ws, std::move(body), text("]")});
  }

  // Keys (as JSON strings, closing quote included) that decode to none of `names`.
  Expr key_not_in(const std::vector<std::string>& names) {
    if (names.empty()) return ref(sh_.string);
    struct TrieNode {
      std::map<char32_t, size_t> next;
      bool terminal = false;
    };
    std::vector<TrieNode> trie(1);
    for (const std::string& name : names) {
      size_t at = 0;
      for (uint32_t c : decode_utf8(name)) {
        auto it = trie[at].next.find(c);
        if (it == trie[at].next.end()) {
          it = trie[at].next.emplace(c, trie.size()).first;
          trie.emplace_back();
        }
        at = it->second;
      }
      trie[at].terminal = true;
    }
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

  Expr lower_object(const Simple& s) {
    std::vector<std::pair<std::string, Node>> members = s.props;
    for (const std::string& r : s.required)
      if (!find_prop(s, r)) members.emplace_back(r, prop_schema(s, r));
    if (members.empty() && !s.additional) return ref(sh_.object);
    std::vector<std::string> names;
    for (const auto& m : members) names.push_back(m.first);
    const Expr ws = ref(sh_.ws), sep = seq({text(","), ref(sh_.ws)});
    const Node extra_schema = s.additional ? *s.additional : Node{&kTrueSchema, s.ptr};
    const Expr extra = is_false(extra_schema) ? nothing()
                                              : ref(b_.intern("other-property", seq({key_not_in(names), ws, text(":"), ws,
                                                                                     lower(extra_schema), ws})));
    const Expr extras = extra.kind == Expr::Kind::nothing ? empty() : ref(b_.intern("other-properties", star(seq({sep, extra}))));
    // after[i]: members i.. each after a comma; first[i]: the same, no comma
    // before the first. Declared members keep their order; others may come
    // anywhere.
    Expr after = empty(), first = empty();
    for (size_t i = members.size(); i-- > 0;) {
      const bool required = std::find(s.required.begin(), s.required.end(), members[i].first) != s.required.end();
      const Expr member = seq({quoted(members[i].first), ws, text(":"), ws, lower(members[i].second), ws});
      const Expr next = after.kind == Expr::Kind::empty ? empty() : ref(b_.intern("props", after));
      Expr with_comma = seq({sep, member, extras, next});
      Expr leading = seq({member, extras, next});
      after = required ? std::move(with_comma) : alt({std::move(with_comma), next});
      first = required ? std::move(leading) : alt({std::move(leading), std::move(first)});
      if (i % 8 == 7) first = ref(b_.intern("props-first", std::move(first)));
    }
    Expr body = alt({std::move(first), seq({extra, extras, std::move(after)})});
    return seq({text("{"), ws, std::move(body), text("}")});
  }

  const SchemaLimits& limits_;
  ojson doc_;
  Draft draft_ = Draft::unknown;
  bool has_refs_ = false;
  RuleBuilder b_;
  Shared sh_{};
  std::map<const ojson*, int32_t> memo_;
  std::deque<ojson> arena_;
  std::map<std::string, const ojson*> arena_index_;
  size_t arena_bytes_ = 0;
  int depth_ = 0;
  std::vector<const ojson*> expanding_;
};

}  // namespace

std::string json_schema_to_gbnf(std::string_view schema_json, const SchemaLimits& limits) {
  return Converter(schema_json, limits).run();
}

std::string json_object_gbnf() {
  static const std::string gbnf = Converter("{}", SchemaLimits{}).object_only();
  return gbnf;
}

std::string choice_to_gbnf(const std::vector<std::string>& choices) {
  if (choices.empty()) throw std::invalid_argument("choice: at least one string is needed");
  std::vector<Expr> alts;
  for (const std::string& c : choices) {
    try {
      decode_utf8(c);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument("choice: a string that is not valid UTF-8");
    }
    alts.push_back(text(c));
  }
  RuleBuilder b(size_t{64} << 20);
  const int32_t root = b.reserve("root");
  b.define(root, alt(std::move(alts)));
  try {
    return b.emit(root);
  } catch (const BuildError& e) {
    throw std::invalid_argument("choice: " + e.why);
  }
}

}  // namespace troupe::grammar
