#pragma once
// Anchors inside groups, lifted to the top where the group opens or closes
// its alternative: "(^a$)|(^b$)" is "^a$|^b$", "^([^,]|$)" is "^[^,]|^$".
// The regex parser (regex_to_gbnf.h) takes anchors only at the ends of a
// top-level alternative; this rewrites the pattern's text so that more
// patterns have them there.
#include <string>
#include <string_view>
#include <vector>

namespace troupe::grammar::detail {

// The pattern's top-level alternatives once anchors in unquantified groups
// are lifted (at most 8 groups deep); [pattern] itself where none is.
std::vector<std::string> lift_anchors(std::string_view pattern);

}  // namespace troupe::grammar::detail
