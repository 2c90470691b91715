// The session turn policy on a real store: one turn at a time, the Done only
// once the turn is durable, stored KV pages valid only for the history later
// turns keep, under the model and layout that wrote them.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <numeric>

#include "messages/client_validation.h"
#include "persistence/session_turns.h"

using namespace troupe;
using namespace troupe::persistence;

namespace {

std::filesystem::path temp_store(const std::string& tag) {
  static int n = 0;
  auto p = std::filesystem::temp_directory_path() /
           ("troupe-turns-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(++n));
  std::filesystem::remove_all(p);
  return p;
}

SessionPolicy policy() {
  SessionPolicy p;
  p.model_name = "test";
  p.kv = true;
  p.kv_identity = {11, 22};
  p.page_size = 4;
  p.page_bytes = 8;
  p.idle_ms = 1000;
  return p;
}

SessionCommit turn(const std::string& id, std::vector<int32_t> tokens, const std::string& answer) {
  SessionCommit c;
  c.peer = "client";
  c.client_id = 5;
  c.session_id = id;
  c.messages = {{"user", "question"}, {"assistant", answer}};
  c.tokens = std::move(tokens);
  c.done.reason = wire::FinishReason::stop;
  c.done.completion_tokens = 3;
  return c;
}

std::vector<int32_t> seq(int32_t n, int32_t first = 1) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

wire::ResponseBody kind(const messages::Bytes& b) { return messages::check_response(b)->body_type(); }

}  // namespace

TEST_CASE("a session runs one turn at a time, and its Done is sent once the turn is stored") {
  const auto dir = temp_store("busy");
  Store store(dir);
  SessionTurns turns(store, policy());
  SessionStart first = turns.begin("s", 0);
  CHECK(first.error == wire::ErrorCode::none);
  CHECK(first.turns.empty());
  CHECK(turns.begin("s", 0).error == wire::ErrorCode::session_busy);
  CHECK(kind(turns.remove(1, "s")) == wire::ResponseBody::Error);  // busy: not deleted
  CHECK(kind(turns.commit(turn("s", seq(10), "one"), 0, 1000)) == wire::ResponseBody::Done);
  SessionStart second = turns.begin("s", 0);
  REQUIRE(second.error == wire::ErrorCode::none);
  REQUIRE(second.turns.size() == 1);
  REQUIRE(second.turns[0].size() == 2);
  CHECK(second.turns[0][1].content == "one");
  CHECK(second.pinned == std::vector<std::vector<int32_t>>{{}});
  // A pinned message is pinned in every later read, in this server and another.
  auto pinned = turn("s", seq(12), "two");
  pinned.pinned = {0};
  CHECK(kind(turns.commit(pinned, 0, 1000)) == wire::ResponseBody::Done);
  CHECK(turns.begin("s", 0).pinned == std::vector<std::vector<int32_t>>{{}, {0}});
  turns.release("s");
  // Another server on the same store sees the stored turns.
  SessionTurns fresh(store, policy());
  const SessionStart again = fresh.begin("s", 0);
  CHECK(again.turns.size() == 2);
  CHECK(again.pinned == std::vector<std::vector<int32_t>>{{}, {0}});
  std::filesystem::remove_all(dir);
}

TEST_CASE("spilled pages are stored only contiguously with those stored, and restored after the session went idle") {
  const auto dir = temp_store("kv");
  Store store(dir);
  SessionTurns turns(store, policy());
  REQUIRE(turns.begin("s", 0).error == wire::ErrorCode::none);
  turns.commit(turn("s", seq(12), "a"), 0, 1);
  const std::vector<std::string> pages{"AAAAAAAA", "BBBBBBBB"};
  CHECK(turns.spill({"s", seq(8), 1, pages}) == 0);  // a gap: page 0 is not stored
  CHECK(turns.spill({"s", seq(8), 0, pages}) == 2);
  SessionStart soon = turns.begin("s", 500);  // pages still in the server's memory
  CHECK(soon.kv_stored == 2);
  CHECK(soon.kv_data.empty());
  turns.release("s");
  SessionStart later = turns.begin("s", 5000);  // idle: restore them
  CHECK(later.kv_data == pages);
  CHECK(later.kv_tokens == seq(12));
  // A turn whose history parts after the first page keeps only that page valid.
  std::vector<int32_t> parted = seq(12);
  parted[5] = 99;
  turns.commit(turn("s", parted, "b"), 6000, 2);
  SessionStart after = turns.begin("s", 100000);
  CHECK(after.kv_stored == 1);
  CHECK(after.kv_data == std::vector<std::string>{"AAAAAAAA"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("pages stored under another model or layout are never restored") {
  const auto dir = temp_store("foreign");
  Store store(dir);
  {
    SessionTurns turns(store, policy());
    turns.begin("s", 0);
    turns.commit(turn("s", seq(8), "a"), 0, 1);
    REQUIRE(turns.spill({"s", seq(8), 0, {"AAAAAAAA", "BBBBBBBB"}}) == 2);
  }
  SessionPolicy other = policy();
  other.kv_identity.layout = 23;
  SessionTurns turns(store, other);
  SessionStart start = turns.begin("s", 100000);
  CHECK(start.turns.size() == 1);  // the conversation is there
  CHECK(start.kv_stored == 0);       // its pages are not this layout's
  CHECK(start.kv_data.empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("unknown sessions answer unknown_session, and a deleted session is gone with its pages") {
  const auto dir = temp_store("delete");
  Store store(dir);
  SessionTurns turns(store, policy());
  CHECK(messages::check_response(turns.show(1, "nope"))->body_as_Error()->code() == wire::ErrorCode::unknown_session);
  CHECK(messages::check_response(turns.remove(1, "nope"))->body_as_Error()->code() == wire::ErrorCode::unknown_session);
  turns.begin("s", 0);
  turns.commit(turn("s", seq(8), "a"), 0, 1);
  turns.spill({"s", seq(8), 0, {"AAAAAAAA", "BBBBBBBB"}});
  CHECK(kind(turns.list(1)) == wire::ResponseBody::SessionList);
  CHECK(kind(turns.remove(2, "s")) == wire::ResponseBody::Ack);
  CHECK(kind(turns.show(3, "s")) == wire::ResponseBody::Error);
  SessionStart start = turns.begin("s", 100000);
  CHECK(start.turns.empty());
  CHECK(start.kv_stored == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the stored-session count is read from the store once, then follows new sessions, deletes and sweeps") {
  const auto dir = temp_store("count");
  {
    Store store(dir);
    SessionTurns turns(store, policy());
    CHECK(turns.stored() == 0);
    for (const char* id : {"a", "b", "c"}) {
      turns.begin(id, 0);
      turns.commit(turn(id, seq(8), "x"), 0, 1);
    }
    turns.begin("a", 0);
    turns.commit(turn("a", seq(12), "again"), 0, 2);  // a second turn is no new session
    CHECK(turns.stored() == 3);
    CHECK(kind(turns.remove(1, "b")) == wire::ResponseBody::Ack);
    CHECK(kind(turns.remove(2, "nope")) == wire::ResponseBody::Error);
    CHECK(turns.stored() == 2);
  }
  Store store(dir);
  SessionTurns reopened(store, policy());
  CHECK(reopened.stored() == 2);  // counted from the store's headers
  reopened.forget("c");           // retention deleted it
  CHECK(reopened.stored() == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the session cache keeps at most max_cached sessions, never evicts a busy one, and an evicted one reads back whole") {
  const auto dir = temp_store("lru");
  Store store(dir);
  SessionPolicy p = policy();
  p.max_cached = 2;
  SessionTurns turns(store, p);
  for (const char* id : {"a", "b", "c", "d"}) {
    REQUIRE(turns.begin(id, 0).error == wire::ErrorCode::none);
    CHECK(kind(turns.commit(turn(id, seq(8), std::string("answer ") + id), 0, 1000)) == wire::ResponseBody::Done);
  }
  CHECK(turns.cached() == 2);
  // Busy sessions stay however many there are.
  for (const char* id : {"a", "b", "c"}) REQUIRE(turns.begin(id, 0).error == wire::ErrorCode::none);
  CHECK(turns.cached() == 3);
  for (const char* id : {"a", "b", "c"}) {
    CHECK(kind(turns.commit(turn(id, seq(12), "second"), 0, 2000)) == wire::ResponseBody::Done);
  }
  CHECK(turns.cached() <= 3);
  // "d" was evicted, then is read back from the store with its turn.
  const SessionStart d = turns.begin("d", 0);
  REQUIRE(d.error == wire::ErrorCode::none);
  REQUIRE(d.turns.size() == 1);
  CHECK(d.turns[0][1].content == "answer d");
  turns.release("d");
  CHECK(turns.begin("a", 0).turns.size() == 2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("deleting a session keeps the pages of a prefix another session shares") {
  const auto dir = temp_store("shared");
  Store store(dir);
  SessionTurns turns(store, policy());
  // a and b share their first page (tokens 1..4); a's second page is its own.
  turns.begin("a", 0);
  turns.commit(turn("a", seq(8), "x"), 0, 1);
  REQUIRE(turns.spill({"a", seq(8), 0, {"AAAAAAAA", "BBBBBBBB"}}) == 2);
  std::vector<int32_t> b_tokens = seq(4);
  for (int32_t t : seq(4, 100)) b_tokens.push_back(t);
  turns.begin("b", 0);
  turns.commit(turn("b", b_tokens, "y"), 0, 1);
  REQUIRE(turns.spill({"b", b_tokens, 0, {"AAAAAAAA", "CCCCCCCC"}}) == 2);
  CHECK(kind(turns.remove(1, "a")) == wire::ResponseBody::Ack);
  SessionStart b = turns.begin("b", 100000);  // idle: its pages come from the store
  CHECK(b.kv_data == std::vector<std::string>{"AAAAAAAA", "CCCCCCCC"});
  turns.release("b");
  KvPageStore kv(store, policy().kv_identity, 4, 8);
  CHECK(kv.get(seq(8), 2).size() == 1);  // a's own second page went, the shared first stayed
  std::filesystem::remove_all(dir);
}

TEST_CASE("a session is its owner's: another client is forbidden, an admin is not, listings show one's own") {
  const auto dir = temp_store("owner");
  Store store(dir);
  SessionTurns turns(store, policy());
  const Principal alice{"alice", false}, bob{"bob", false}, root{"root", true};
  REQUIRE(turns.begin("notes", 0, alice).error == wire::ErrorCode::none);
  turns.commit(turn("notes", seq(8), "a"), 0, 1);
  CHECK(turns.begin("notes", 0, bob).error == wire::ErrorCode::forbidden);
  auto code = [](const messages::Bytes& b) { return messages::check_response(b)->body_as_Error()->code(); };
  CHECK(code(turns.show(1, "notes", bob)) == wire::ErrorCode::forbidden);
  CHECK(code(turns.remove(2, "notes", bob)) == wire::ErrorCode::forbidden);
  CHECK(messages::check_response(turns.list(3, bob))->body_as_SessionList()->sessions()->size() == 0);
  const messages::Bytes listed = turns.list(4, alice);  // mine points into it
  const auto* mine = messages::check_response(listed)->body_as_SessionList();
  REQUIRE(mine->sessions()->size() == 1);
  CHECK(mine->sessions()->Get(0)->owner()->str() == "alice");
  CHECK(kind(turns.show(5, "notes", root)) == wire::ResponseBody::Session);
  // The owner survives a restart of the store.
  SessionTurns again(store, policy());
  CHECK(again.begin("notes", 0, bob).error == wire::ErrorCode::forbidden);
  CHECK(again.begin("notes", 0, alice).error == wire::ErrorCode::none);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a session handed to another front end's store leaves this one whole, with its pages, and a marker of where") {
  const auto dir_a = temp_store("give"), dir_b = temp_store("take");
  Store a_store(dir_a), b_store(dir_b);
  SessionTurns a(a_store, policy()), b(b_store, policy());
  const Principal alice{"alice", false}, bob{"bob", false};
  REQUIRE(a.begin("s", 0, alice).error == wire::ErrorCode::none);
  a.commit(turn("s", seq(6), "one"), 0, 1);
  REQUIRE(a.begin("s", 0, alice).error == wire::ErrorCode::none);
  a.commit(turn("s", seq(12), "two"), 0, 2);
  REQUIRE(a.spill({"s", seq(8), 0, {"AAAAAAAA", "BBBBBBBB"}}) == 2);
  // Refused: unknown, another client's, mid-turn.
  CHECK(a.hand_off("nobody", "tcp://b:7700", alice, 0).error == wire::ErrorCode::unknown_session);
  CHECK(a.hand_off("s", "tcp://b:7700", bob, 0).error == wire::ErrorCode::forbidden);
  REQUIRE(a.begin("s", 0, alice).error == wire::ErrorCode::none);
  CHECK(a.hand_off("s", "tcp://b:7700", alice, 0).error == wire::ErrorCode::session_busy);
  a.release("s");
  // Asked: the records, and the session is held here (no turn, no second taker) until confirmed.
  const SessionHandOff h = a.hand_off("s", "tcp://b:7700", alice, 0);
  REQUIRE(h.error == wire::ErrorCode::none);
  CHECK(h.records.turns.size() == 2);
  CHECK(h.kv_data == std::vector<std::string>{"AAAAAAAA", "BBBBBBBB"});
  CHECK(a.begin("s", 0, alice).error == wire::ErrorCode::session_busy);
  CHECK(a.hand_off("s", "tcp://c:7700", alice, 0).error == wire::ErrorCode::session_busy);
  CHECK(a.hand_off_done("s", "tcp://c:7700") != "");  // not the taker
  // Taken: the same turns, the owner, and its pages restored from B's store.
  REQUIRE(b.take("s", h) == "");
  REQUIRE(a.hand_off_done("s", "tcp://b:7700") == "");
  // Gone from A, in the store too (a restart would not bring it back), and said where.
  CHECK(a.begin("s", 0, alice).turns.empty());
  a.release("s");
  CHECK(a.moved_to("s") == "tcp://b:7700");
  CHECK_FALSE(SessionBook(a_store).load("s"));
  CHECK(KvPageStore(a_store, {11, 22}, 4, 8).get(seq(12), 2).empty());
  CHECK(b.begin("s", 0, bob).error == wire::ErrorCode::forbidden);
  const SessionStart there = b.begin("s", 100000, alice);
  REQUIRE(there.error == wire::ErrorCode::none);
  REQUIRE(there.turns.size() == 2);
  CHECK(there.turns[1][1].content == "two");
  CHECK(there.kv_stored == 2);
  CHECK(there.kv_data == h.kv_data);
  b.release("s");
  CHECK(b.take("s", h) != "");  // B holds one by that id already
  // A taker that never confirms: after the hold the session is A's to serve again (B asked; nothing lost).
  const SessionHandOff back = b.hand_off("s", "tcp://a:7700", alice, 0, 1000);
  REQUIRE(back.error == wire::ErrorCode::none);
  b.expire_hand_offs(500);
  CHECK(b.begin("s", 600, alice).error == wire::ErrorCode::session_busy);
  b.expire_hand_offs(1000);
  CHECK(b.begin("s", 1100, alice).turns.size() == 2);
  b.release("s");
  // An aborted hand-off frees it at once; a confirmed one moves it back, and A's marker goes.
  REQUIRE(b.hand_off("s", "tcp://a:7700", alice, 0).error == wire::ErrorCode::none);
  b.hand_off_abort("s", "tcp://a:7700");
  const SessionHandOff again = b.hand_off("s", "tcp://a:7700", alice, 0);
  REQUIRE(again.error == wire::ErrorCode::none);
  REQUIRE(a.take("s", again) == "");
  REQUIRE(b.hand_off_done("s", "tcp://a:7700") == "");
  CHECK(a.moved_to("s") == "");
  CHECK(b.moved_to("s") == "tcp://a:7700");
  CHECK(a.begin("s", 100000, alice).turns.size() == 2);
  // Damaged records are refused whole.
  SessionHandOff bad = again;
  bad.records.turns.pop_back();
  SessionTurns c(b_store, policy());
  CHECK_THAT(c.take("t", bad), Catch::Contains("handed over"));
  bad.records.header = "garbage";
  CHECK_THAT(c.take("s", bad), Catch::Contains("corrupt"));
  std::filesystem::remove_all(dir_a);
  std::filesystem::remove_all(dir_b);
}
