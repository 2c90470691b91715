#pragma once
// The string formats the JSON Schema converter (json_schema_converter.h)
// enforces, as patterns of the regex dialect (regex_to_gbnf.h), and the
// formats it refuses or reads as number ranges.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace troupe::grammar::schema {

// Each format's pattern, as the exact profile accepts it.
const std::map<std::string, std::string, std::less<>>& format_regexes();
// The generation profile's dates: no year 0000, upper-case T and Z.
const std::map<std::string, std::string, std::less<>>& generation_format_regexes();
// Formats of JSON Schema's own that are not enforced: refused. Other
// formats no standard defines (OpenAPI's float, double, binary, password;
// "url", "path", ...) are annotations, as validators treat them.
const std::set<std::string, std::less<>>& refused_formats();
// OpenAPI's integer formats: their ranges.
const std::map<std::string, std::pair<int64_t, int64_t>, std::less<>>& integer_formats();

}  // namespace troupe::grammar::schema
