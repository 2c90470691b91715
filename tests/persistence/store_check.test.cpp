// Offline checks and repair of a store (persistence/store_check.h), on real
// stores in temporary directories: what check reports and that it changes
// nothing, what repair keeps, leaves out and keeps beside it, and the
// directories and manifests both refuse.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "persistence/jobs.h"
#include "persistence/sessions.h"
#include "persistence/store.h"
#include "persistence/store_check.h"
#include "tests/persistence/damaged_tables.h"
#include "tests/persistence/temp_dir.h"

using namespace troupe;
using namespace troupe::persistence;

namespace {

using test::damage_table;
using test::store_jobs;
using test::TempDir;

// The damaged original repair keeps beside the store, removed with the test.
struct Kept {
  std::filesystem::path path;
  ~Kept() {
    if (!path.empty()) std::filesystem::remove_all(path);
  }
};

SessionRecord session(const std::string& id, int turns) {
  SessionRecord s;
  s.id = id;
  for (int i = 0; i < turns; ++i) {
    SessionTurnRecord t;
    t.messages = {{"user", "q" + std::to_string(i)}, {"assistant", "a" + std::to_string(i)}};
    s.turns.push_back(t);
  }
  return s;
}

void store_session(SessionBook& book, const SessionRecord& s) {
  SessionRecord partial = s;
  partial.turns.clear();
  for (const auto& t : s.turns) {
    partial.turns.push_back(t);
    book.append_last_turn(partial);
  }
}

void erase(Store& store, Family f, const std::string& key) {
  Batch b;
  b.erase(f, key);
  store.write(b);
}

std::string nul() { return std::string(1, '\0'); }

// A store with a sound job and session, and three that cannot be resumed: a
// job that lost an item, a session that lost a turn, a session header that
// does not decode.
void store_with_incomplete_records(const std::filesystem::path& dir) {
  Store store(dir);
  JobBook jobs(store);
  SessionBook sessions(store);
  JobRecord good;
  good.id = "good";
  good.items = {"a"};
  jobs.create(good);
  JobRecord lost = good;
  lost.id = "lost";
  lost.items = {"a", "b"};
  jobs.create(lost);
  erase(store, Family::jobs, "ilost" + nul() + be32(1));
  store_session(sessions, session("fine", 2));
  store_session(sessions, session("short", 2));
  erase(store, Family::sessions, "tshort" + nul() + be32(0));
  store_session(sessions, session("bad", 1));
  Batch b;
  b.put(Family::sessions, "hbad", "xyz");
  store.write(b);
}

int64_t count_of(const StoreCheck& c, const std::string& family) {
  for (const auto& f : c.families)
    if (f.name == family) return f.records;
  FAIL("no family " << family);
  return -1;
}

void write_junk(const std::filesystem::path& file) {
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  f << std::string(256, '\x5a');
}

std::filesystem::path manifest_of(const std::filesystem::path& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("MANIFEST-", 0) == 0) return e.path();
  FAIL("no MANIFEST in " << dir);
  return {};
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

TEST_CASE("store check: sessions are counted per family and decoded whole", "[persistence]") {
  TempDir dir("check-sessions");
  {
    Store store(dir.path);
    SessionBook book(store);
    store_session(book, session("a", 3));
    store_session(book, session("b", 1));
  }
  const StoreCheck c = check_store(dir.path);
  CHECK(c.ok());
  CHECK(c.problems.empty());
  CHECK(c.sessions == 2);
  CHECK(c.jobs == 0);
  CHECK(count_of(c, "sessions") == 6);  // two headers, four turns
  CHECK(count_of(c, "jobs") == 0);
  CHECK(count_of(c, "meta") == 1);  // the schema version
  CHECK(count_of(c, "kv_pages") == 0);
  CHECK(count_of(c, "responses") == 0);
}

TEST_CASE("store check: a job that lost an item, a session that lost a turn and a header that does not decode are "
          "each a problem, and checking changes nothing",
          "[persistence]") {
  TempDir dir("check-incomplete");
  store_with_incomplete_records(dir.path);
  const std::vector<std::string> problems{
      "job 'lost': job 'lost' lists 2 items; the store holds 1",
      "listing sessions: session 'bad': a stored session header is corrupt (0 damaged blocks, 1 unreadable records "
      "skipped)",
      "session 'short': session 'short' lists 2 turns; the store holds 1",
  };
  const StoreCheck first = check_store(dir.path);
  CHECK_FALSE(first.ok());
  CHECK(first.problems == problems);
  CHECK(first.jobs == 1);
  CHECK(first.sessions == 1);
  const StoreCheck again = check_store(dir.path);
  CHECK(again.problems == problems);
  CHECK(count_of(again, "jobs") == count_of(first, "jobs"));
  CHECK(count_of(again, "sessions") == count_of(first, "sessions"));
}

TEST_CASE("store check: a directory without a store and a store whose manifest is damaged are refused with the way out",
          "[persistence]") {
  TempDir dir("check-refused");
  std::filesystem::create_directories(dir.path);
  CHECK_THROWS_AS(check_store(dir.path), StoreError);
  CHECK_THROWS_WITH(check_store(dir.path), dir.path.string() + " holds no store (no RocksDB CURRENT file)");
  store_jobs(dir.path, 3);
  write_junk(manifest_of(dir.path));
  // RocksDB reads what it can of a damaged manifest: the check refuses the
  // store (the manifest unreadable, or a family missing from it) and says how out.
  CHECK_THROWS_AS(check_store(dir.path), StoreError);
  CHECK_THROWS_WITH(check_store(dir.path),
                    Catch::Contains(dir.path.string()) && Catch::EndsWith("(run `troupe store repair`)"));
}

TEST_CASE("store repair: what is not a directory is refused", "[persistence]") {
  TempDir dir("repair-refused");
  CHECK_THROWS_WITH(repair_store(dir.path), dir.path.string() + " is not a directory");
  std::filesystem::create_directories(dir.path);
  { std::ofstream(dir.path / "plain-file") << "x"; }
  CHECK_THROWS_AS(repair_store(dir.path / "plain-file"), StoreError);
  CHECK_THROWS_WITH(repair_store(dir.path / "plain-file"), (dir.path / "plain-file").string() + " is not a directory");
}

TEST_CASE("store repair: a sound store is copied record for record, and the original kept beside it", "[persistence]") {
  TempDir dir("repair-sound");
  store_jobs(dir.path, 10);
  {
    Store store(dir.path);
    SessionBook book(store);
    store_session(book, session("s", 2));
  }
  const StoreCheck before = check_store(dir.path);
  REQUIRE(before.ok());
  int64_t records = 0;
  for (const auto& f : before.families) records += f.records;
  const RepairOutcome r = repair_store(dir.path);
  Kept kept{r.original};
  CHECK(r.records == records);
  CHECK(r.damaged_blocks == 0);
  CHECK(r.dropped.empty());
  CHECK_FALSE(r.rebuilt_manifest);
  CHECK_THAT(r.original.string(), Catch::StartsWith(dir.path.string() + ".damaged-"));
  CHECK(std::filesystem::exists(r.original / "CURRENT"));
  CHECK_FALSE(std::filesystem::exists(dir.path.string() + ".repairing"));
  const StoreCheck after = check_store(dir.path);
  CHECK(after.ok());
  CHECK(after.jobs == 10);
  CHECK(after.sessions == 1);
  for (size_t i = 0; i < after.families.size(); ++i) CHECK(after.families[i].records == before.families[i].records);
}

TEST_CASE("store repair: a job or session missing part of itself is left out whole, and the rest is kept",
          "[persistence]") {
  TempDir dir("repair-incomplete");
  store_with_incomplete_records(dir.path);
  const RepairOutcome r = repair_store(dir.path);
  Kept kept{r.original};
  CHECK(r.dropped == std::vector<std::string>{"job lost", "session bad", "session short"});
  CHECK(r.damaged_blocks == 0);
  const StoreCheck after = check_store(dir.path);
  CHECK(after.ok());
  CHECK(after.jobs == 1);
  CHECK(after.sessions == 1);
  CHECK(count_of(after, "jobs") == 2);      // the good job's header and item: nothing of the lost one
  CHECK(count_of(after, "sessions") == 3);  // the fine session's header and turns
  Store store(dir.path);
  CHECK(JobBook(store).load("good"));
  CHECK_FALSE(JobBook(store).load("lost"));
  CHECK(SessionBook(store).load("fine"));
  CHECK_FALSE(SessionBook(store).load("short"));
  // The original still holds what remains of them.
  Store original(r.original);
  CHECK_THROWS_AS(JobBook(original).load("lost"), StoreError);
}

TEST_CASE("store repair: a store whose manifest is damaged is rebuilt from its files", "[persistence]") {
  TempDir dir("repair-manifest");
  store_jobs(dir.path, 20);
  write_junk(manifest_of(dir.path));
  const RepairOutcome r = repair_store(dir.path);
  Kept kept{r.original};
  CHECK(r.rebuilt_manifest);
  CHECK(r.dropped.empty());
  const StoreCheck after = check_store(dir.path);
  CHECK(after.ok());
  CHECK(after.jobs == 20);
}
