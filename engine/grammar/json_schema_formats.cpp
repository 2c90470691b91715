// Formats as patterns (json_schema_formats.h): RFC 3339 dates and times,
// RFC 3986 URIs, IP addresses, durations, and the like.
#include "engine/grammar/json_schema_formats.h"

#include <climits>

namespace troupe::grammar::schema {

namespace {

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

// RFC 3339 full-date; `year_zero`: whether 0000 is a year (RFC 3339 says
// so; Python's datetime, and so its validators, does not).
std::string date_regex(bool year_zero = true) {
  const std::string y = year_zero ? "\\d{4}" : "(000[1-9]|00[1-9]\\d|0[1-9]\\d\\d|[1-9]\\d{3})";
  const std::string leap = std::string("(\\d\\d([02468][48]|[13579][26]|[2468]0)|(") +
                           (year_zero ? "[02468][048]" : "0[48]|[2468][048]") + "|[13579][26])00)";
  return "(" + y + "-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|" + y + "-(0[469]|11)-(0[1-9]|[12]\\d|30)|" + y +
         "-02-(0[1-9]|1\\d|2[0-8])|" + leap + "-02-29)";
}

std::string time_regex(bool lower_case = true) {
  return std::string("([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d+)?(") + (lower_case ? "[zZ]" : "Z") +
         "|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
}

// RFC 3986's URI (relative: false) or relative-ref (true).
std::string uri_regex(bool relative = false) {
  const std::string pct = "%[0-9A-Fa-f]{2}";
  const std::string pchar = "([A-Za-z0-9._~!$&'()*+,;=:@-]|" + pct + ")";
  const std::string userinfo = "([A-Za-z0-9._~!$&'()*+,;=:-]|" + pct + ")*";
  const std::string reg_name = "([A-Za-z0-9._~!$&'()*+,;=-]|" + pct + ")*";
  const std::string future = "v[0-9A-Fa-f]+\\.[A-Za-z0-9._~!$&'()*+,;=:-]+";
  const std::string host = "(\\[(" + ipv6_regex() + "|" + future + ")\\]|" + reg_name + ")";
  const std::string authority = "(" + userinfo + "@)?" + host + "(:\\d*)?";
  const std::string segments = "(/" + pchar + "*)*";
  const std::string tail = "(\\?(" + pchar + "|[/?])*)?(#(" + pchar + "|[/?])*)?";
  if (relative) {
    // The first segment of a relative path holds no ':' (it would read as a scheme).
    const std::string nc = "([A-Za-z0-9._~!$&'()*+,;=@-]|" + pct + ")";
    return "(//" + authority + segments + "|/(" + pchar + "+" + segments + ")?|" + nc + "+" + segments + ")?" + tail;
  }
  const std::string hier = "(//" + authority + segments + "|/(" + pchar + "+" + segments + ")?|" + pchar + "+" + segments + ")?";
  return "[A-Za-z][A-Za-z0-9+.-]*:" + hier + tail;
}

// RFC 3339 appendix A's ISO 8601 durations.
std::string duration_regex() {
  const std::string s = "\\d+S", m = "\\d+M(" + s + ")?", h = "\\d+H(" + m + ")?";
  const std::string time = "T(" + h + "|" + m + "|" + s + ")";
  const std::string d = "\\d+D", mo = "\\d+M(" + d + ")?", y = "\\d+Y(" + mo + ")?";
  return "P((" + d + "|" + mo + "|" + y + ")(" + time + ")?|" + time + "|\\d+W)";
}

// RFC 1123 host names as the generation profile writes them: up to 8
// labels of up to 30 letters, digits and inner hyphens, so that no name
// passes the 253 characters a host name may have.
std::string hostname_regex() {
  const std::string label = "[A-Za-z0-9]([A-Za-z0-9-]{0,28}[A-Za-z0-9])?";
  return label + "(\\." + label + "){0,7}";
}

}  // namespace

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
      {"uri-reference", "(" + uri_regex() + "|" + uri_regex(true) + ")"},
      {"ipv4", ipv4_regex()},
      {"ipv6", ipv6_regex()},
      {"duration", duration_regex()},
      {"json-pointer", "(/([^~/]|~[01])*)*"},
      {"relative-json-pointer", "(0|[1-9]\\d*)(#|(/([^~/]|~[01])*)*)"},
      {"byte", "([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"},  // OpenAPI: base64
      {"hostname", hostname_regex()},  // generation only
  };
  return m;
}

const std::map<std::string, std::string, std::less<>>& generation_format_regexes() {
  static const std::map<std::string, std::string, std::less<>> m{
      {"date", date_regex(false)},
      {"time", time_regex(false)},
      {"date-time", date_regex(false) + "T" + time_regex(false)},
  };
  return m;
}

const std::set<std::string, std::less<>>& refused_formats() {
  static const std::set<std::string, std::less<>> s{"iri",          "iri-reference", "idn-email",
                                                    "idn-hostname", "uri-template",  "regex"};
  return s;
}

const std::map<std::string, std::pair<int64_t, int64_t>, std::less<>>& integer_formats() {
  static const std::map<std::string, std::pair<int64_t, int64_t>, std::less<>> m{
      {"int32", {INT32_MIN, INT32_MAX}}, {"int64", {INT64_MIN, INT64_MAX}}};
  return m;
}

}  // namespace troupe::grammar::schema
