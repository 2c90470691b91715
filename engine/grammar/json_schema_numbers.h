#pragma once
// Numbers for the JSON Schema converter (json_schema_converter.h): the exact
// decimals a schema's bounds, multipleOf and values stand for, and the
// languages of JSON number texts in a range or of a sign.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "engine/grammar/regex_to_gbnf.h"

namespace troupe::grammar::schema {

// The grammar IR (regex_to_gbnf.h) is what the converter writes grammars in.
using namespace detail;
using ojson = nlohmann::ordered_json;  // keeps `properties` in their declared order

// An exact decimal: the digits of the whole part (no leading zeros, "0" for
// none) and of the fraction (no trailing zeros).
struct Decimal {
  bool negative = false;
  std::string whole = "0", frac;
  bool zero() const { return whole == "0" && frac.empty(); }
  int sign() const { return zero() ? 0 : negative ? -1 : 1; }
  Decimal abs() const {
    Decimal d = *this;
    d.negative = false;
    return d;
  }
};

int compare_magnitude(const Decimal& a, const Decimal& b);
int compare(const Decimal& a, const Decimal& b);
// The decimal a JSON number of the schema stands for: an integer exactly,
// a float as the shortest decimal that reads back as the same double.
Decimal decimal_of(const ojson& v);
// d moved by 10^exp10 up (or down), exactly.
Decimal step(const Decimal& d, int64_t exp10, bool up);
// The power of ten of d's 16th significant digit (d nonzero): a step there
// is more than two units in the last place of the double nearest d.
int64_t sixteenth_digit(const Decimal& d);
// Whether x is an integer multiple of m (> 0), exactly; throws SchemaError
// where m, scaled to an integer beside x, passes 18 digits.
bool multiple_of(const Decimal& x, const Decimal& m, const std::string& ptr);
// The spelling a const or enum number is accepted in: integral values as
// integers (as the integer type), others as nlohmann writes them.
std::string number_text(const ojson& v);

// Decimal digits with values lo..hi.
Expr dec_digit(int lo, int hi);

// What a number text may be: an integer, anything, or no integer (a
// fraction with a digit other than 0).
enum class Numbers { integers, all, non_integers };

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};

// JSON numbers without an exponent, of the kind, in the range; "-0" and
// "-0.0" count as 0.
Expr number_range(const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi, Numbers kind);
// JSON numbers by sign, exactly (the exponent cannot make zero nonzero).
Expr number_by_sign(bool negative, bool zero, bool positive);

}  // namespace troupe::grammar::schema
