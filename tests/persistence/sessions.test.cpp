// Chat sessions in the store (persistence/sessions.h) on a real store in a
// temporary directory: turns and headers read back, listings and slices of
// headers, every way a stored session fails to load, erasure, and a session
// handed from one store to another.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "messages/store_generated.h"
#include "persistence/sessions.h"
#include "persistence/store.h"
#include "tests/persistence/temp_dir.h"

using namespace troupe;
using namespace troupe::persistence;

namespace {

using test::TempDir;

SessionRecord with_turn(SessionRecord s, const std::string& user, const std::string& answer) {
  SessionTurnRecord t;
  t.messages = {{"user", user}, {"assistant", answer}};
  t.prompt_tokens = 10;
  t.completion_tokens = 3;
  s.turns.push_back(t);
  s.tokens.insert(s.tokens.end(), {1, 2, 3});
  s.updated_ms += 1;
  return s;
}

SessionRecord session(const std::string& id, int turns) {
  SessionRecord s;
  s.id = id;
  for (int i = 0; i < turns; ++i) s = with_turn(s, "question " + std::to_string(i), "answer " + std::to_string(i));
  return s;
}

// Writes every turn of `s` as a client's turns would be, one at a time.
void store_turns(SessionBook& book, const SessionRecord& s) {
  SessionRecord partial = s;
  partial.turns.clear();
  for (const auto& t : s.turns) {
    partial.turns.push_back(t);
    book.append_last_turn(partial);
  }
}

void put(Store& store, const std::string& key, const std::string& value) {
  Batch b;
  b.put(Family::sessions, key, value);
  store.write(b);
}

void erase(Store& store, const std::string& key) {
  Batch b;
  b.erase(Family::sessions, key);
  store.write(b);
}

std::string turn_key(const std::string& id, uint32_t turn) { return "t" + id + std::string(1, '\0') + be32(turn); }

std::pair<int64_t, int> family_bytes(const Store& store) {
  int64_t bytes = 0;
  int records = 0;
  store.scan(Family::sessions, "", [&](std::string_view k, std::string_view v) {
    bytes += static_cast<int64_t>(k.size() + v.size());
    ++records;
    return true;
  });
  return {bytes, records};
}

}  // namespace

TEST_CASE("a session's turns are there after the store is reopened", "[persistence]") {
  TempDir dir("sessions");
  SessionRecord s;
  s.id = "chat-1";
  s.model = "m";
  s.model_fingerprint = 42;
  s.sampling.temperature = 0.25f;
  s.sampling.stop = {"END"};
  {
    Store store(dir.path);
    SessionBook book(store);
    CHECK_FALSE(book.load("chat-1"));
    s = with_turn(s, "hello", "hi there");
    book.append_last_turn(s);
    s = with_turn(s, "and now?", "now this");
    book.append_last_turn(s);
    SessionRecord other;
    other.id = "chat-10";  // a prefix of neither's turn keys
    book.append_last_turn(with_turn(other, "x", "y"));
  }
  Store store(dir.path);
  SessionBook book(store);
  const auto got = book.load("chat-1");
  REQUIRE(got);
  CHECK(got->turns.size() == 2);
  CHECK(got->tokens == s.tokens);
  CHECK(got->model_fingerprint == 42);
  CHECK(got->sampling.temperature == 0.25f);
  CHECK(got->sampling.stop == std::vector<std::string>{"END"});
  const auto h = got->history();
  REQUIRE(h.size() == 4);
  CHECK(h[2].content == "and now?");
  CHECK(h[3].role == "assistant");
  CHECK(book.list().size() == 2);
  CHECK(book.load("chat-10")->turns.size() == 1);
  CHECK(book.remove("chat-1"));
  CHECK_FALSE(book.remove("chat-1"));
  CHECK_FALSE(book.load("chat-1"));
  CHECK(book.load("chat-10"));
}

TEST_CASE("a header whose turn count is damaged to 2^31 - 1 fails its session, allocating nothing", "[persistence]") {
  // Found by tests/fuzz (store_records): the count once sized a vector.
  TempDir dir("turn-count");
  Store store(dir.path);
  SessionBook book(store);
  SessionRecord s;
  s.id = "big";
  book.append_last_turn(with_turn(s, "hi", "hello"));
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(store::CreateSessionHeader(fbb, fbb.CreateString("big"), 1, 2, 0x7fffffff));
  Batch b;
  b.put(Family::sessions, "hbig", std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize()));
  store.write(b);
  const auto all = book.list();
  REQUIRE(all.size() == 1);
  CHECK(all[0].turns == 0x7fffffff);
  CHECK_THROWS_WITH(book.load("big"), Catch::Contains("lists 2147483647 turns; the store holds 1"));
}

TEST_CASE("sessions: every header field and every turn field reads back as written", "[persistence]") {
  TempDir dir("session-fields");
  Store store(dir.path);
  SessionBook book(store);
  SessionRecord s;
  s.id = "s";
  s.owner = "alice";
  s.created_ms = 1000;
  s.updated_ms = 2000;
  s.model = "qwen";
  s.model_fingerprint = 77;
  s.sampling.max_tokens = 33;
  s.kv_pages = 3;
  s.kv_model = 11;
  s.kv_layout = 22;
  s.window_first_turn = 1;
  s.summary_through = 1;
  s.context_summary = "they said hello";
  s.escalations = 2;
  SessionTurnRecord t;
  t.messages = {{"system", "be brief"}, {"user", "hi"}, {"assistant", "hello"}};
  t.pinned = {1};
  t.finish_reason = wire::FinishReason::length;
  t.prompt_tokens = 12;
  t.completion_tokens = 4;
  t.time_ms = 1500;
  s.turns = {t, t};
  s.tokens = {5, 6, 7};
  book.append_last_turn(s);
  // Only the last turn is written: the first must have been stored before.
  CHECK_THROWS_WITH(book.load("s"), "session 's' lists 2 turns; the store holds 1");
  s.turns = {t};
  book.append_last_turn(s);
  const auto got = book.load("s");
  REQUIRE(got);
  CHECK(got->id == "s");
  CHECK(got->owner == "alice");
  CHECK(got->created_ms == 1000);
  CHECK(got->updated_ms == 2000);
  CHECK(got->model == "qwen");
  CHECK(got->model_fingerprint == 77);
  CHECK(got->sampling.max_tokens == 33);
  CHECK(got->kv_pages == 3);
  CHECK(got->kv_model == 11);
  CHECK(got->kv_layout == 22);
  CHECK(got->window_first_turn == 1);
  CHECK(got->summary_through == 1);
  CHECK(got->context_summary == "they said hello");
  CHECK(got->escalations == 2);
  CHECK(got->header_turns == 1);
  CHECK(got->tokens == std::vector<int32_t>{5, 6, 7});
  REQUIRE(got->turns.size() == 1);
  const SessionTurnRecord& r = got->turns[0];
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[2].content == "hello");
  CHECK(r.pinned == std::vector<int32_t>{1});
  CHECK(r.finish_reason == wire::FinishReason::length);
  CHECK(r.prompt_tokens == 12);
  CHECK(r.completion_tokens == 4);
  CHECK(r.time_ms == 1500);
}

TEST_CASE("sessions: a record's history, turn states and summary", "[persistence]") {
  SessionRecord s = session("s", 5);
  s.owner = "bob";
  s.model = "m";
  s.created_ms = 10;
  s.escalations = 1;
  const auto history = s.history();
  REQUIRE(history.size() == 10);
  CHECK(history[0].content == "question 0");
  CHECK(history[9].content == "answer 4");
  using TS = wire::TurnState;
  CHECK(s.turn_states() == std::vector<TS>(5, TS::window));
  s.summary_through = 2;
  s.window_first_turn = 4;
  CHECK(s.turn_states() == std::vector<TS>{TS::summarized, TS::summarized, TS::archived, TS::archived, TS::window});
  s.window_first_turn = 1;  // the summary reaches past the window's first turn
  CHECK(s.turn_states() == std::vector<TS>{TS::summarized, TS::summarized, TS::window, TS::window, TS::window});
  s.summary_through = 9;  // past the turns there are
  CHECK(s.turn_states() == std::vector<TS>(5, TS::summarized));
  const messages::SessionSummaryFields f = s.summary();
  CHECK(f.session_id == "s");
  CHECK(f.turns == 5);
  CHECK(f.tokens == 15);
  CHECK(f.created_ms == 10);
  CHECK(f.updated_ms == 5);
  CHECK(f.model == "m");
  CHECK(f.owner == "bob");
  CHECK(f.escalations == 1);
  // A header read alone has no turns: its count stands for them.
  SessionRecord header;
  header.header_turns = 7;
  CHECK(header.summary().turns == 7);
  CHECK(header.history().empty());
  CHECK(header.turn_states().empty());
}

TEST_CASE("sessions: a session with no turn is not stored", "[persistence]") {
  TempDir dir("session-empty");
  Store store(dir.path);
  SessionBook book(store);
  CHECK_THROWS_AS(book.append_last_turn(session("empty", 0)), StoreError);
  CHECK_THROWS_WITH(book.append_last_turn(session("empty", 0)), "session 'empty' has no turn to store");
  CHECK_FALSE(book.load("empty"));
  CHECK(book.count() == 0);
}

TEST_CASE("sessions: a header written alone is read by header and headers without its turns, and counted",
          "[persistence]") {
  TempDir dir("session-headers");
  Store store(dir.path);
  SessionBook book(store);
  CHECK(book.count() == 0);
  CHECK(book.headers("", 10).empty());
  CHECK_FALSE(book.header("none"));
  for (const char* id : {"c", "a", "b"}) store_turns(book, session(id, 2));
  SessionRecord d = session("d", 0);
  d.kv_pages = 4;
  Batch b;
  book.write_header(d, b);
  store.write(b);
  CHECK(book.count() == 4);
  const auto header = book.header("a");
  REQUIRE(header);
  CHECK(header->id == "a");
  CHECK(header->header_turns == 2);
  CHECK(header->turns.empty());
  CHECK(book.header("d")->kv_pages == 4);
  const auto first = book.headers("", 2);
  REQUIRE(first.size() == 2);
  CHECK(first[0].id == "a");
  CHECK(first[1].id == "b");
  const auto rest = book.headers("b", 10);
  REQUIRE(rest.size() == 2);
  CHECK(rest[0].id == "c");
  CHECK(rest[1].id == "d");
  CHECK(book.headers("d", 10).empty());
}

TEST_CASE("sessions: a header that does not decode is skipped by header and headers, and said by list",
          "[persistence]") {
  TempDir dir("session-corrupt-header");
  Store store(dir.path);
  SessionBook book(store);
  for (const char* id : {"a", "b", "c"}) store_turns(book, session(id, 1));
  put(store, "hb", "xyz");
  CHECK_FALSE(book.header("b"));
  const auto headers = book.headers("", 10);
  REQUIRE(headers.size() == 2);
  CHECK(headers[0].id == "a");
  CHECK(headers[1].id == "c");
  CHECK(book.count() == 3);  // counted, not decoded
  CHECK_THROWS_WITH(book.load("b"), "a stored session header is corrupt");
  CHECK_THROWS_WITH(book.list(), "a stored session header is corrupt");
  std::string damage;
  const auto listed = book.list(&damage);
  REQUIRE(listed.size() == 2);
  CHECK(listed[0].session_id == "a");
  CHECK(listed[1].session_id == "c");
  CHECK(damage ==
        "session 'b': a stored session header is corrupt (0 damaged blocks, 1 unreadable records skipped)");
  std::string none;
  erase(store, "hb");
  CHECK(book.list(&none).size() == 2);
  CHECK(none.empty());
}

TEST_CASE("sessions: a damaged turn or a missing one fails the session's load", "[persistence]") {
  TempDir dir("session-turns");
  Store store(dir.path);
  SessionBook book(store);
  store_turns(book, session("damaged", 2));
  put(store, turn_key("damaged", 1), "xyz");
  CHECK_THROWS_WITH(book.load("damaged"), "a stored session turn is corrupt");
  store_turns(book, session("missing", 3));
  erase(store, turn_key("missing", 0));
  CHECK_THROWS_WITH(book.load("missing"), "session 'missing' lists 3 turns; the store holds 2");
  // A turn past the header's count (a turn whose header write was lost) is not read.
  store_turns(book, session("ahead", 1));
  put(store, turn_key("ahead", 1), "xyz");
  const auto ahead = book.load("ahead");
  REQUIRE(ahead);
  CHECK(ahead->turns.size() == 1);
}

TEST_CASE("sessions: removing or erasing a session takes its header and turns, and leaves a session whose id "
          "it prefixes",
          "[persistence]") {
  TempDir dir("session-erase");
  Store store(dir.path);
  SessionBook book(store);
  store_turns(book, session("s1", 3));
  const auto [s1_bytes, s1_records] = family_bytes(store);
  CHECK(s1_records == 4);
  store_turns(book, session("s10", 2));
  Batch b;
  CHECK(book.erase("s1", b) == s1_bytes);
  store.write(b);
  CHECK_FALSE(book.load("s1"));
  REQUIRE(book.load("s10"));
  CHECK(book.load("s10")->turns.size() == 2);
  CHECK(family_bytes(store).second == 3);
  Batch none;
  CHECK(book.erase("nothing", none) == 0);
  CHECK_FALSE(book.remove("nothing"));
  CHECK(book.remove("s10"));
  CHECK(family_bytes(store).second == 0);
}

TEST_CASE("sessions: a session's stored records go to another store whole, and a moved marker says where it went",
          "[persistence]") {
  TempDir from_dir("session-from"), to_dir("session-to");
  Store from(from_dir.path), to(to_dir.path);
  SessionBook a(from), b(to);
  CHECK_FALSE(a.stored("none"));
  SessionRecord s = session("s", 3);
  s.owner = "alice";
  store_turns(a, s);
  const auto records = a.stored("s");
  REQUIRE(records);
  CHECK(records->header == encode_session_header(s));
  REQUIRE(records->turns.size() == 3);
  CHECK(records->turns[2] == encode_session_turn(s.turns[2]));
  // The other store had it moved away once: adopting it clears the marker.
  Batch marker;
  b.mark_moved("s", "tcp://front-a:5555", marker);
  to.write(marker);
  CHECK(b.moved_to("s") == "tcp://front-a:5555");
  Batch in;
  const SessionRecord adopted = b.adopt("s", *records, in);
  to.write(in);
  CHECK(adopted.id == "s");
  CHECK(adopted.turns.size() == 3);
  CHECK(adopted.owner == "alice");
  CHECK_FALSE(b.moved_to("s"));
  const auto there = b.load("s");
  REQUIRE(there);
  REQUIRE(there->history().size() == 6);
  CHECK(there->history()[5].content == "answer 2");
  // This store lets it go: its records, then a marker of where.
  Batch out;
  a.erase("s", out);
  a.mark_moved("s", "tcp://front-b:5555", out);
  from.write(out);
  CHECK_FALSE(a.load("s"));
  CHECK(a.moved_to("s") == "tcp://front-b:5555");
  CHECK_FALSE(a.moved_to("other"));
}

TEST_CASE("sessions: records handed over that do not decode, name another session or miss a turn are refused whole",
          "[persistence]") {
  TempDir dir("session-adopt");
  Store store(dir.path);
  SessionBook book(store);
  const SessionRecord s = session("s", 2);
  StoredSession good{encode_session_header(s), {encode_session_turn(s.turns[0]), encode_session_turn(s.turns[1])}};
  Batch b;
  SECTION("a header that does not decode") {
    StoredSession bad = good;
    bad.header = "xyz";
    CHECK_THROWS_WITH(book.adopt("s", bad, b), "session 's' handed over: a stored session header is corrupt");
  }
  SECTION("a turn that does not decode") {
    StoredSession bad = good;
    bad.turns[1] = "xyz";
    CHECK_THROWS_WITH(book.adopt("s", bad, b), "session 's' handed over: a stored session turn is corrupt");
  }
  SECTION("another session's records") {
    CHECK_THROWS_WITH(book.adopt("t", good, b), "session 't' handed over under the id 's'");
  }
  SECTION("fewer turns than the header counts") {
    StoredSession bad = good;
    bad.turns.pop_back();
    CHECK_THROWS_WITH(book.adopt("s", bad, b), "session 's' handed over with 1 turns; its header counts 2");
  }
  CHECK(b.empty());  // nothing of it is written
}

TEST_CASE("sessions: stored records that do not decode are not handed on", "[persistence]") {
  TempDir dir("session-stored");
  Store store(dir.path);
  SessionBook book(store);
  store_turns(book, session("turn", 2));
  put(store, turn_key("turn", 0), "xyz");
  CHECK_THROWS_WITH(book.stored("turn"), "a stored session turn is corrupt");
  store_turns(book, session("missing", 2));
  erase(store, turn_key("missing", 1));
  CHECK_THROWS_WITH(book.stored("missing"), "session 'missing' lists 2 turns; the store holds 1");
  store_turns(book, session("header", 1));
  put(store, "hheader", "xyz");
  CHECK_THROWS_WITH(book.stored("header"), "a stored session header is corrupt");
}
