// The KV-page allocator's state: host-tier pages until their sequence runs
// again, and idle sessions whose pages go back to the pool.
#include <catch2/catch.hpp>

#include "service/kv_tiers.h"

using namespace troupe::service;

TEST_CASE("a swapped-out sequence's pages are kept until taken back or dropped, and their bytes are counted") {
  KvTiers tiers(1000);
  tiers.keep({1, {1, 2, 3, 4}, {"aaaa", "bbbb"}});
  tiers.keep({2, {5, 6, 7, 8}, {"cccc"}});
  CHECK(tiers.host_bytes() == 12);
  SwappedPages back = tiers.take(1);
  CHECK(back.data == std::vector<std::string>{"aaaa", "bbbb"});
  CHECK(tiers.take(1).data.empty());  // taken once
  tiers.drop(2);
  CHECK(tiers.host_bytes() == 0);
}

TEST_CASE("a session idle past the limit is expired once, and one that began a new turn is not") {
  KvTiers tiers(1000);
  tiers.session_idle({"a", {1, 2}}, 0);
  tiers.session_idle({"b", {3, 4}}, 0);
  tiers.session_active("b");
  CHECK(tiers.expire(999).empty());
  const auto idle = tiers.expire(1000);
  REQUIRE(idle.size() == 1);
  CHECK(idle[0].session_id == "a");
  CHECK(idle[0].tokens == std::vector<int32_t>{1, 2});
  CHECK(tiers.expire(5000).empty());
}
