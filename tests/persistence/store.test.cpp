// The RocksDB store and the session book, on a real store in a temporary
// directory: what is written is there after reopening, and what check and
// repair make of a store. Jobs and KV pages have their own files.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <algorithm>

#include "messages/client_validation.h"
#include "persistence/jobs.h"
#include "persistence/sessions.h"
#include "persistence/store.h"
#include "persistence/store_check.h"
#include "tests/persistence/temp_dir.h"
#include "messages/store_generated.h"

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

TEST_CASE("a store of another schema version is refused with a clear error", "[persistence]") {
  TempDir dir("version");
  {
    Store store(dir.path);
    Batch b;
    b.put(Family::meta, "schema_version", "99");
    store.write(b);
  }
  CHECK_THROWS_WITH(Store(dir.path), Catch::Contains("schema version 99") && Catch::Contains("reads version 1"));
}

TEST_CASE("a data directory in use by another store is refused", "[persistence]") {
  TempDir dir("lock");
  Store first(dir.path);
  CHECK_THROWS_WITH(Store(dir.path), Catch::Contains("another troupe serve"));
}

TEST_CASE("a data directory that cannot be created is a clear error", "[persistence]") {
  TempDir dir("file");
  std::filesystem::create_directories(dir.path);
  { std::ofstream(dir.path / "plain-file") << "x"; }
  CHECK_THROWS_WITH(Store(dir.path / "plain-file" / "store"), Catch::Contains("cannot create the data directory"));
}

namespace {

// `n` jobs of one item each, flushed into SST files by closing the store.
void store_jobs(const std::filesystem::path& dir, int n) {
  Store store(dir);
  JobBook book(store);
  for (int i = 0; i < n; ++i) {
    JobRecord j;
    char id[32];
    std::snprintf(id, sizeof id, "job-%04d", i);
    j.id = id;
    j.item_template = "Summarize: {item}";
    j.items = {"paper " + std::to_string(i) + ": " + std::string(300, static_cast<char>('a' + i % 26))};
    book.create(j);
  }
}

// Overwrites bytes at `fraction` of the way into the largest table file.
void damage_table(const std::filesystem::path& dir, double fraction) {
  std::filesystem::path largest;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".sst" && (largest.empty() || e.file_size() > std::filesystem::file_size(largest)))
      largest = e.path();
  REQUIRE_FALSE(largest.empty());
  std::fstream f(largest, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(static_cast<double>(std::filesystem::file_size(largest)) * fraction));
  const std::string junk(64, '\x5a');
  f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
}

}  // namespace

TEST_CASE("a sound store checks clean, with its records counted", "[persistence]") {
  TempDir dir("check-ok");
  store_jobs(dir.path, 20);
  const StoreCheck c = check_store(dir.path);
  CHECK(c.ok());
  CHECK(c.jobs == 20);
  REQUIRE(c.families.size() == 5);
  CHECK(c.families[2].name == "jobs");
  CHECK(c.families[2].records == 40);  // a header and an item each
  CHECK_THROWS_WITH(check_store(dir.path / "none"), Catch::Contains("holds no store"));
}

TEST_CASE("a damaged block fails the jobs it holds, not the listing of the others, and check names it and repair keeps the rest",
          "[persistence]") {
  TempDir dir("damaged");
  store_jobs(dir.path, 400);
  damage_table(dir.path, 0.6);  // past the headers ('h' sorts first), among the items
  {
    Store store(dir.path);
    JobBook book(store);
    std::string damage;
    const auto ids = book.ids(&damage);
    CHECK(damage.empty());
    CHECK(ids.size() == 400);
    int readable = 0, refused = 0;
    for (const auto& id : ids) try {
        readable += book.load(id).has_value();
      } catch (const StoreError&) {
        ++refused;
      }
    CHECK(refused > 0);
    CHECK(readable > 300);  // one block's jobs are lost, not the store's
  }
  const StoreCheck before = check_store(dir.path);
  CHECK_FALSE(before.ok());
  CHECK_THAT(before.problems.front(), Catch::Contains("Corruption"));
  CHECK(before.jobs > 300);
  const RepairOutcome r = repair_store(dir.path);
  CHECK(r.damaged_blocks >= 1);
  CHECK(r.dropped.size() == 400 - static_cast<size_t>(before.jobs));  // the jobs whose items were in the bad block
  CHECK_FALSE(r.rebuilt_manifest);
  CHECK(std::filesystem::exists(r.original / "CURRENT"));  // the damaged store, kept
  const StoreCheck after = check_store(dir.path);
  CHECK(after.ok());
  CHECK(after.jobs == before.jobs);  // every job that could be read before, and only those
  Store store(dir.path);
  std::string damage;
  CHECK(JobBook(store).ids(&damage).size() == static_cast<size_t>(after.jobs));
  CHECK(damage.empty());
  std::filesystem::remove_all(r.original);
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
