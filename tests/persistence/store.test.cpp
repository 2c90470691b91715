// The RocksDB store and the session and job books, on a real store in a
// temporary directory: what is written is there after reopening.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <algorithm>
#include <numeric>

#include "messages/client_validation.h"
#include "persistence/jobs.h"
#include "persistence/kv_pages.h"
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

TEST_CASE("a job of requests keeps them, its annotation and labels, and deleting it takes them", "[persistence]") {
  TempDir dir("requests");
  JobRecord job;
  job.id = "j1";
  job.items = {"a", "b"};
  job.requests = {std::string("\0req one", 8), "req two"};
  job.annotation = "{\"input_file_id\":\"f\"}";
  {
    Store store(dir.path);
    JobBook(store).create(job);
  }
  Store store(dir.path);
  const auto got = JobBook(store).load("j1");
  REQUIRE(got);
  CHECK(got->requests == job.requests);
  CHECK(got->annotation == job.annotation);
  CHECK(got->summary().annotation == job.annotation);
  Batch b;
  CHECK(JobBook(store).erase("j1", b) > 0);
  store.write(b);
  CHECK_FALSE(JobBook(store).load("j1"));
  int left = 0;
  store.scan(Family::jobs, "", [&](std::string_view, std::string_view) { return ++left, true; });
  CHECK(left == 0);  // its requests went with it
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

TEST_CASE("a job's items and results survive reopening, and prompts fill the template", "[persistence]") {
  TempDir dir("jobs");
  JobRecord job;
  job.id = "j1";
  job.item_template = "Summarize {item} now. ({item})";
  job.items = {"paper one", "paper two", "paper three"};
  job.sampling.max_tokens = 17;
  {
    Store store(dir.path);
    JobBook book(store);
    book.create(job);
    messages::JobItemFields r;
    r.index = 1;
    r.text = "a summary";
    r.completion_tokens = 5;
    job.results[1] = r;
    book.record_result(job, r);
  }
  Store store(dir.path);
  JobBook book(store);
  CHECK(book.ids() == std::vector<std::string>{"j1"});
  const auto got = book.load("j1");
  REQUIRE(got);
  CHECK(got->items == job.items);
  CHECK(got->sampling.max_tokens == 17);
  REQUIRE(got->results.size() == 1);
  CHECK(got->results.at(1).text == "a summary");
  CHECK(got->summary().finished_items == 1);
  CHECK(got->summary().completion_tokens == 5);
  CHECK(got->prompt(2) == "Summarize paper three now. (paper three)");
  JobRecord plain;
  plain.items = {"just this"};
  CHECK(plain.prompt(0) == "just this");
  CHECK_FALSE(book.load("j2"));
}

TEST_CASE("stored KV pages are found only for the same identity and tokens, up to the first gap", "[persistence]") {
  TempDir dir("kv");
  Store store(dir.path);
  const KvIdentity id{1, 2};
  KvPageStore pages(store, id, 4, 10);
  std::vector<int32_t> tokens(12);
  std::iota(tokens.begin(), tokens.end(), 1);
  {
    Batch b;
    pages.put(tokens, 0, std::vector<std::string>{std::string(10, 'a'), std::string(10, 'b')}, b);
    store.write(b, false);
  }
  CHECK(pages.get(tokens, 3) == std::vector<std::string>{std::string(10, 'a'), std::string(10, 'b')});
  CHECK(pages.get(tokens, 1).size() == 1);
  auto other = tokens;
  other[5] = 99;  // the second page differs: only the first is there
  CHECK(pages.get(other, 3).size() == 1);
  CHECK(KvPageStore(store, KvIdentity{1, 3}, 4, 10).get(tokens, 3).empty());  // another layout
  CHECK(KvPageStore(store, KvIdentity{9, 2}, 4, 10).get(tokens, 3).empty());  // another model file
  CHECK(KvPageStore(store, id, 4, 11).get(tokens, 3).empty());                // another page size in bytes
  Batch b;
  pages.erase(tokens, 2, b);
  store.write(b, false);
  CHECK(pages.get(tokens, 3).empty());
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

TEST_CASE("a damaged block among the job headers costs the listing only the jobs in it", "[persistence]") {
  TempDir dir("damaged-headers");
  store_jobs(dir.path, 400);
  damage_table(dir.path, 0.02);
  Store store(dir.path);
  std::string damage;
  const auto ids = JobBook(store).ids(&damage);
  CHECK(ids.size() < 400);
  CHECK(ids.size() > 300);  // the listing went on past the bad block
  CHECK_THAT(damage, Catch::Contains("Corruption") && Catch::Contains("1 damaged blocks skipped"));
  CHECK(std::is_sorted(ids.begin(), ids.end()));
  CHECK_THROWS_AS(JobBook(store).ids(), StoreError);
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
