// Placement among data-parallel workers (service/placement.h): load, prefix
// affinity, sessions, lost workers, and what one placement costs.
#include <catch2/catch.hpp>

#include <chrono>
#include <numeric>
#include <vector>

#include "service/placement.h"

using namespace troupe::service;

namespace {

std::vector<int32_t> tokens(int32_t n, int32_t first = 1) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

PlacementConfig pages_of(int32_t page_size, int32_t slack = 4) {
  PlacementConfig c;
  c.page_size = page_size;
  c.slack = slack;
  return c;
}

}  // namespace

TEST_CASE("placement: unrelated requests spread by load, ends free their worker") {
  Placement p(2, pages_of(16));
  std::vector<int32_t> counts(2);
  for (int i = 0; i < 32; ++i) ++counts[static_cast<size_t>(p.place(tokens(8, 1000 * i), "").replica)];
  CHECK(counts[0] == 16);
  CHECK(counts[1] == 16);
  for (int i = 0; i < 10; ++i) p.ended(0);
  CHECK(p.live(0) == 6);
  // The next ones go to the emptier worker until they are level.
  for (int i = 0; i < 10; ++i) CHECK(p.place(tokens(8, 99'000 + 100 * i), "").replica == 0);
  CHECK(p.counters().by_load == 42);
}

TEST_CASE("placement: a slower worker (a longer step) takes proportionally fewer") {
  Placement p(2, pages_of(16));
  p.report(0, {1000, 1000, 0, 100.0});
  p.report(1, {1000, 1000, 0, 300.0});
  std::vector<int32_t> counts(2);
  for (int i = 0; i < 40; ++i) ++counts[static_cast<size_t>(p.place(tokens(4, 10 * i), "").replica)];
  CHECK(counts[0] == 30);
  CHECK(counts[1] == 10);
}

TEST_CASE("placement: a worker without room for the prompt is chosen only when none has room") {
  Placement p(2, pages_of(16));
  p.report(0, {2, 100, 0, 0});    // 32 tokens free
  p.report(1, {50, 100, 0, 0});
  for (int i = 0; i < 3; ++i) p.pin(1);  // the roomy one is busier
  CHECK(p.place(tokens(100), "").replica == 1);
  p.report(1, {1, 100, 0, 0});
  CHECK(p.place(tokens(100, 7), "").replica == 0);  // neither has room: by load
}

TEST_CASE("placement: the longest sent prefix wins, whole pages only, until its worker is overloaded") {
  Placement p(2, pages_of(16, 2));
  const std::vector<int32_t> system = tokens(2048);
  auto with_question = [&](int32_t q) {
    auto t = system;
    for (int32_t i = 0; i < 20; ++i) t.push_back(100'000 + q * 20 + i);
    return t;
  };
  const Placement::Choice first = p.place(with_question(0), "");
  CHECK(first.why == Placement::Choice::Why::load);
  CHECK(first.prefix_pages == 0);
  p.ended(first.replica);
  // Sent one after another (each ends before the next), every one follows the prefix.
  for (int32_t q = 1; q < 20; ++q) {
    const auto c = p.place(with_question(q), "");
    CHECK(c.replica == first.replica);
    CHECK(c.why == Placement::Choice::Why::prefix);
    CHECK(c.prefix_pages == 128);  // 2,048 tokens; the question's partial page is not counted
    p.ended(c.replica);
  }
  // A prefix shorter than a page gives no affinity.
  CHECK(p.place(tokens(15), "").why == Placement::Choice::Why::load);
  p.ended(0), p.ended(1);
  // Twenty at once: the prefix's worker takes them until it is `slack` ahead,
  // then the other gets one and, having been sent the prefix, shares them.
  std::vector<int32_t> counts(2);
  for (int32_t q = 20; q < 40; ++q) ++counts[static_cast<size_t>(p.place(with_question(q), "").replica)];
  CHECK(counts[0] >= 9);
  CHECK(counts[1] >= 9);
}

TEST_CASE("placement: a longer match beats a shorter one, the cheaper worker breaks a tie") {
  Placement p(2, pages_of(4, 100));
  p.place(tokens(16), "");      // worker 0: pages 0-3
  p.place(tokens(8), "", 0);    // worker 1 (0 avoided): pages 0-1
  p.pin(0), p.pin(0);           // worker 0 is the busier
  auto c = p.place(tokens(20), "");
  CHECK(c.replica == 0);
  CHECK(c.prefix_pages == 4);
  CHECK(c.why == Placement::Choice::Why::prefix);
  // Both were sent these two pages: the one with fewer live requests.
  c = p.place(tokens(8), "");
  CHECK(c.replica == 1);
  CHECK(c.prefix_pages == 2);
}

TEST_CASE("placement: a session returns to its worker, moves when it is overloaded or lost") {
  Placement p(2, pages_of(16, 2));
  const auto first = p.place(tokens(40), "chat-1");
  p.ended(first.replica);
  const int32_t home = first.replica;
  const int32_t other = 1 - home;
  // Another prompt entirely (a window shift rewrote it): still home.
  auto c = p.place(tokens(40, 7777), "chat-1");
  CHECK(c.replica == home);
  CHECK(c.why == Placement::Choice::Why::session);
  p.ended(home);
  // Home is overloaded: the session moves, and stays where it moved.
  for (int i = 0; i < 3; ++i) p.pin(home);
  c = p.place(tokens(40), "chat-1");
  CHECK(c.replica == other);
  CHECK(c.moved_session);
  p.ended(other);
  for (int i = 0; i < 3; ++i) p.ended(home);
  CHECK(p.place(tokens(40), "chat-1").replica == other);
  p.ended(other);
  // Its worker is lost: the next turn goes elsewhere, and nothing is placed there.
  p.down(other);
  CHECK_FALSE(p.is_up(other));
  c = p.place(tokens(40), "chat-1");
  CHECK(c.replica == home);
  CHECK_FALSE(c.moved_session);  // a lost worker's sessions are forgotten, not moved
  CHECK(p.up_count() == 1);
  // Back, it holds nothing: no prefix of it counts any more.
  p.up(other);
  p.ended(home);
  for (int i = 0; i < 3; ++i) p.pin(home);
  c = p.place(tokens(40), "");
  CHECK(c.replica == other);
  CHECK(c.prefix_pages == 0);
}

TEST_CASE("placement: no worker up, or only the one a request leaves") {
  Placement p(2, pages_of(16));
  p.down(0);
  CHECK(p.place(tokens(10), "", 1).replica == Placement::kNone);
  CHECK(p.place(tokens(10), "").replica == 1);
  p.down(1);
  CHECK(p.place(tokens(10), "").replica == Placement::kNone);
  CHECK(p.up_count() == 0);
  // Out-of-range reports and ends are ignored.
  p.report(7, {});
  p.ended(-1);
  p.up(9);
  CHECK(p.replicas() == 2);
}

TEST_CASE("placement: the prefix record stays bounded, newest kept") {
  PlacementConfig c = pages_of(4);
  c.prefix_pages_per_replica = 64;
  Placement p(1, c);
  for (int i = 0; i < 100; ++i) {
    p.place(tokens(16, 10'000 * (i + 1)), "");  // 4 pages each
    p.ended(0);
  }
  CHECK(p.place(tokens(16, 10'000 * 100), "").prefix_pages == 4);  // the last sent
  p.ended(0);
  CHECK(p.place(tokens(16, 10'000 * 1), "").prefix_pages == 0);   // the first, long forgotten
}

TEST_CASE("placement: what a choice costs, printed for docs/BENCHMARKS.md") {
  Placement p(4, pages_of(16));
  for (int i = 0; i < 64; ++i) p.place(tokens(2048, 1 + (i % 8) * 100'000), "session-" + std::to_string(i % 16));
  const uint64_t before_ns = p.counters().place_ns;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    const auto c = p.place(tokens(2048, 1 + (i % 8) * 100'000), "session-" + std::to_string(i % 16));
    p.ended(c.replica);
  }
  const double us = static_cast<double>(p.counters().place_ns - before_ns) / n / 1000.0;
  WARN("placement of a 2,048-token prompt among 4 workers: " << us << " us");
  CHECK(us < 5000);  // a sanity bound only: the figure that matters is the printed one
}
