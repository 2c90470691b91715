// Requests remembered for a while (service/recent_requests.h): fresh ones
// found once, stale ones forgotten, the count bounded.
#include <catch2/catch.hpp>

#include <string>

#include "service/recent_requests.h"

using troupe::service::RecentRequests;

TEST_CASE("recent requests: a remembered request is found once, and only while fresh") {
  RecentRequests r;
  r.remember({"a", 1}, 0);
  r.remember({"a", 2}, 0);
  CHECK(r.contains({"a", 1}));
  CHECK_FALSE(r.contains({"b", 1}));
  CHECK(r.take_fresh({"a", 1}, RecentRequests::kMaxAgeNs));
  CHECK_FALSE(r.take_fresh({"a", 1}, RecentRequests::kMaxAgeNs));  // taken
  CHECK_FALSE(r.take_fresh({"a", 2}, RecentRequests::kMaxAgeNs + 1));  // stale: forgotten all the same
  CHECK(r.size() == 0);
}

TEST_CASE("recent requests: a flood of requests that never come is bounded, and makes room as it ages") {
  RecentRequests r;
  for (uint64_t i = 0; i < RecentRequests::kMaxEntries + 100; ++i) r.remember({"flood", i}, 0);
  CHECK(r.size() == RecentRequests::kMaxEntries);
  CHECK_FALSE(r.contains({"flood", RecentRequests::kMaxEntries}));
  r.remember({"late", 1}, RecentRequests::kMaxAgeNs + 1);  // the old ones are stale now
  CHECK(r.size() == 1);
  CHECK(r.contains({"late", 1}));
}
