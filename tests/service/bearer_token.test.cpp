#include <catch2/catch.hpp>

#include "service/bearer_token.h"

using troupe::service::bearer_token;

TEST_CASE("the bearer scheme is matched in any case, with any spaces before the token", "[http]") {
  CHECK(bearer_token("Bearer abc") == "abc");
  CHECK(bearer_token("bearer abc") == "abc");
  CHECK(bearer_token("BEARER abc") == "abc");
  CHECK(bearer_token("bEaReR   abc  ") == "abc");
  CHECK(bearer_token("Bearer\tabc") == "abc");
}

TEST_CASE("another scheme, no token or a token with blanks inside gives no token", "[http]") {
  CHECK(bearer_token("").empty());
  CHECK(bearer_token("Bearer").empty());
  CHECK(bearer_token("Bearer ").empty());
  CHECK(bearer_token("Basic YWxhZGRpbjpvcGVuc2VzYW1l").empty());
  CHECK(bearer_token("Bearerabc").empty());
  CHECK(bearer_token("Bearer a b").empty());
  CHECK(bearer_token("Bearez abc").empty());
}
