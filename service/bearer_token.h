#pragma once
// The token of an `Authorization: Bearer TOKEN` header (RFC 6750; the scheme
// is case-insensitive, RFC 9110 section 11.1, and may be followed by more
// than one space). Empty when the header names another scheme or no token.
#include <string_view>

namespace troupe::service {

std::string_view bearer_token(std::string_view authorization);

}  // namespace troupe::service
