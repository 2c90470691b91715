// The KV pages that ride an engine step (service/kv_transfers.h): spills,
// restores, swaps and context shifts queued for the next step, confirmed by
// its result or named as unwritten when it fails; and the ledger of
// sequences swapped out to host memory within a byte budget.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "messages/step_frames.h"
#include "service/kv_transfers.h"

using namespace troupe;
using namespace troupe::service;

namespace {

// A step's result with these pages exported and swapped out.
struct Result {
  std::string bytes;
  const wire::step::StepResult& operator*() const { return *messages::check_step_result(bytes); }
};

Result result(std::vector<messages::PageBytes> exported, std::vector<messages::PageBytes> swapped = {}) {
  Result r{messages::step_result(1, {}, "", 1.0, {}, exported, swapped)};
  REQUIRE(messages::check_step_result(r.bytes));
  return r;
}

messages::PageBytes page(int32_t id, std::string data) { return {id, std::move(data)}; }

PreemptedPages preempted(uint64_t id, std::vector<int32_t> tokens, std::vector<int32_t> pages) {
  PreemptedPages p;
  p.id = id;
  p.tokens = std::move(tokens);
  p.pages = std::move(pages);
  return p;
}

}  // namespace

TEST_CASE("kv transfers: with nothing queued nothing is pending, and a step takes and confirms nothing") {
  KvTransfers t;
  CHECK_FALSE(t.pending());
  CHECK_FALSE(t.spills_pending());
  const StepPages p = t.take({});
  CHECK(p.exports.empty());
  CHECK(p.imports.empty());
  CHECK(p.swap_outs.empty());
  CHECK(p.shifts.empty());
  const Result r = result({page(3, "x")}, {page(4, "y")});
  CHECK(t.exported(*r).empty());  // pages no spill asked for are not spills
  CHECK(t.swapped(*r).empty());
  CHECK(t.unwritten().empty());
  CHECK(t.step_done().empty());
}

TEST_CASE("kv transfers: a spill rides the next step and is confirmed by its result") {
  KvTransfers t;
  t.spill("chat-1", {1, 2, 3, 4, 5, 6, 7, 8}, 1, {5, 6});
  CHECK(t.pending());
  CHECK(t.spills_pending());
  const StepPages p = t.take({});
  CHECK(p.exports == std::vector<int32_t>{5, 6});
  CHECK_FALSE(t.pending());  // taken: the next step carries no more
  const auto spills = t.exported(*result({page(5, "five"), page(6, "six")}));
  REQUIRE(spills.size() == 1);
  CHECK(spills[0].session_id == "chat-1");
  CHECK(spills[0].tokens == std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(spills[0].first == 1);
  CHECK(spills[0].data == std::vector<std::string>{"five", "six"});
  CHECK(t.unwritten().empty());  // a spill writes nothing into the cache
  t.step_done();
  CHECK(t.exported(*result({page(5, "five"), page(6, "six")})).empty());  // done: the spill is not confirmed twice
}

TEST_CASE("kv transfers: spills of one step are exported in order, and one whose page the result lacks is "
          "dropped alone") {
  KvTransfers t;
  t.spill("a", {1, 2}, 0, {5, 6});
  t.spill("b", {3, 4}, 2, {7});
  CHECK(t.take({}).exports == std::vector<int32_t>{5, 6, 7});
  SECTION("every page there") {
    const auto spills = t.exported(*result({page(5, "5"), page(6, "6"), page(7, "7")}));
    REQUIRE(spills.size() == 2);
    CHECK(spills[0].session_id == "a");
    CHECK(spills[0].data == std::vector<std::string>{"5", "6"});
    CHECK(spills[1].session_id == "b");
    CHECK(spills[1].first == 2);
    CHECK(spills[1].data == std::vector<std::string>{"7"});
  }
  SECTION("the first spill's second page missing") {
    const auto spills = t.exported(*result({page(5, "5"), page(7, "7")}));
    REQUIRE(spills.size() == 1);
    CHECK(spills[0].session_id == "b");
    CHECK(spills[0].data == std::vector<std::string>{"7"});
  }
  SECTION("the result cut short") {
    const auto spills = t.exported(*result({page(5, "5"), page(6, "6")}));
    REQUIRE(spills.size() == 1);
    CHECK(spills[0].session_id == "a");
  }
  SECTION("no exported pages at all") {
    CHECK(t.exported(*result({})).empty());
  }
}

TEST_CASE("kv transfers: restored pages ride the next step as imports, and a failed step names their prefix") {
  KvTransfers t;
  t.restore({1, 2, 3, 4}, {});  // nothing to restore: nothing queued
  CHECK_FALSE(t.pending());
  t.restore({1, 2, 3, 4}, {page(9, "nine")});
  t.restore({5, 6, 7, 8}, {page(10, "ten"), page(11, "eleven")});
  CHECK(t.pending());
  CHECK_FALSE(t.spills_pending());
  const StepPages p = t.take({});
  REQUIRE(p.imports.size() == 3);
  CHECK(p.imports[0].page == 9);
  CHECK(p.imports[0].data == "nine");
  CHECK(p.imports[2].page == 11);
  CHECK(p.imports[2].data == "eleven");
  CHECK(t.unwritten() == std::vector<std::vector<int32_t>>{{1, 2, 3, 4}, {5, 6, 7, 8}});
  CHECK(t.step_done().empty());  // restores hold no pages
  CHECK(t.unwritten().empty());  // the next step's failure is not theirs
}

TEST_CASE("kv transfers: a preempted sequence's pages are swapped out by the next step and come back as host-tier "
          "pages") {
  KvTransfers t;
  const StepPages p = t.take({preempted(7, {1, 2, 3, 4, 5, 6, 7, 8}, {3, 4}), preempted(9, {9, 9, 9, 9}, {8})});
  CHECK(p.swap_outs == std::vector<int32_t>{3, 4, 8});
  const auto swapped = t.swapped(*result({}, {page(3, "three"), page(4, "four"), page(8, "eight")}));
  REQUIRE(swapped.size() == 2);
  CHECK(swapped[0].sequence == 7);
  CHECK(swapped[0].tokens == std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(swapped[0].data == std::vector<std::string>{"three", "four"});
  CHECK(swapped[0].bytes() == 9);
  CHECK(swapped[1].sequence == 9);
  CHECK(swapped[1].data == std::vector<std::string>{"eight"});
  CHECK(t.exported(*result({page(3, "three")})).empty());  // swapped pages are no spill
}

TEST_CASE("kv transfers: swapped pages the result does not carry leave their sequence to be recomputed") {
  KvTransfers t;
  t.take({preempted(7, {1, 2, 3, 4, 5, 6, 7, 8}, {3, 4})});
  CHECK(t.swapped(*result({}, {page(3, "three")})).empty());
  KvTransfers none;
  none.take({preempted(7, {1, 2, 3, 4}, {3})});
  CHECK(none.swapped(*result({})).empty());
}

TEST_CASE("kv transfers: pages are matched by id, so a page missing from a result never lends a sequence another's "
          "data") {
  KvTransfers t;
  t.spill("a", {1, 2}, 0, {5, 6});
  t.spill("b", {3, 4}, 2, {7});
  t.take({preempted(7, {1, 2, 3, 4, 5, 6, 7, 8}, {3, 4}), preempted(9, {9, 9, 9, 9}, {8})});
  // Page 4 is missing: sequence 7 is recomputed, and page 8 stays sequence 9's.
  const auto swapped = t.swapped(*result({}, {page(3, "three"), page(8, "eight")}));
  REQUIRE(swapped.size() == 1);
  CHECK(swapped[0].sequence == 9);
  CHECK(swapped[0].data == std::vector<std::string>{"eight"});
  // A foreign page among the first spill's spoils that spill alone; order does not matter.
  const auto spills = t.exported(*result({page(7, "7"), page(9, "9"), page(5, "5")}));
  REQUIRE(spills.size() == 1);
  CHECK(spills[0].session_id == "b");
  CHECK(spills[0].data == std::vector<std::string>{"7"});
}

TEST_CASE("kv transfers: a context shift's moves ride the next step, hold their source pages until it is done") {
  KvTransfers t;
  PlannedShift shift;
  shift.tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  shift.source = {20, 21, 22};
  shift.moves = {{30, 4, 0, 4, -4}, {31, 8, 0, 2, -4}};
  t.shift(shift);
  CHECK(t.pending());
  const StepPages p = t.take({});
  REQUIRE(p.shifts.size() == 2);
  CHECK(std::vector<int32_t>(p.shifts[0].src_table.begin(), p.shifts[0].src_table.end()) == shift.source);
  CHECK(std::vector<int32_t>(p.shifts[0].dst_table.begin(), p.shifts[0].dst_table.end()) == std::vector<int32_t>{30});
  CHECK(p.shifts[0].src_start == 4);
  CHECK(p.shifts[0].dst_start == 0);
  CHECK(p.shifts[0].count == 4);
  CHECK(p.shifts[0].delta == -4);
  CHECK(std::vector<int32_t>(p.shifts[1].dst_table.begin(), p.shifts[1].dst_table.end()) == std::vector<int32_t>{31});
  CHECK(p.shifts[1].src_start == 8);
  CHECK(p.shifts[1].count == 2);
  CHECK_FALSE(t.pending());
  CHECK(t.unwritten() == std::vector<std::vector<int32_t>>{shift.tokens});  // a failed step: its pages are unknown
  CHECK(t.step_done() == std::vector<int32_t>{20, 21, 22});
  CHECK(t.step_done().empty());  // released once
}

TEST_CASE("kv transfers: what is queued during a step waits for the next one") {
  KvTransfers t;
  t.spill("a", {1, 2}, 0, {5});
  t.take({});
  t.spill("b", {3, 4}, 0, {6});
  CHECK(t.spills_pending());
  const auto first = t.exported(*result({page(5, "5"), page(6, "6")}));
  REQUIRE(first.size() == 1);
  CHECK(first[0].session_id == "a");
  t.step_done();
  CHECK(t.take({}).exports == std::vector<int32_t>{6});
  const auto second = t.exported(*result({page(6, "6")}));
  REQUIRE(second.size() == 1);
  CHECK(second[0].session_id == "b");
}

TEST_CASE("swap ledger: pages fit while three times their bytes stay within the budget") {
  SwapLedger l(300);
  CHECK(l.bytes() == 0);
  CHECK(l.entries().empty());
  CHECK(l.fits(10, 10));
  CHECK_FALSE(l.fits(11, 10));
  CHECK(l.fits(0, 1000));
  l.add(1, {1, 2, 3, 4}, 4, 100);
  CHECK(l.bytes() == 100);
  CHECK(l.fits(6, 10));
  CHECK_FALSE(l.fits(7, 10));
  SwapLedger none(0);
  CHECK_FALSE(none.fits(1, 1));
}

TEST_CASE("swap ledger: a sequence is counted once, replaced when added again, and erased once") {
  SwapLedger l(1000);
  l.add(1, {1, 2, 3, 4}, 1, 40);
  l.add(2, {5, 6, 7, 8, 9, 10, 11, 12}, 2, 80);
  CHECK(l.bytes() == 120);
  REQUIRE(l.entries().size() == 2);
  CHECK(l.entries().at(2).tokens == std::vector<int32_t>{5, 6, 7, 8, 9, 10, 11, 12});
  CHECK(l.entries().at(2).pages == 2);
  CHECK(l.entries().at(2).bytes == 80);
  l.add(1, {1, 2, 3, 4, 5, 6, 7, 8}, 2, 90);  // preempted again, with more pages
  CHECK(l.bytes() == 170);
  CHECK(l.entries().size() == 2);
  CHECK(l.entries().at(1).pages == 2);
  CHECK(l.erase(1));
  CHECK_FALSE(l.erase(1));
  CHECK_FALSE(l.erase(99));
  CHECK(l.bytes() == 80);
  CHECK(l.erase(2));
  CHECK(l.bytes() == 0);
  CHECK(l.entries().empty());
}
