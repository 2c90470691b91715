// Batch jobs in the store (persistence/jobs.h) on a real store in a
// temporary directory: a job written whole, its results, its header and its
// stamps read back, every way a stored job fails to load, and its erasure.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "persistence/jobs.h"
#include "persistence/store.h"
#include "tests/persistence/damaged_tables.h"
#include "tests/persistence/temp_dir.h"

using namespace troupe;
using namespace troupe::persistence;

namespace {

using test::damage_table;
using test::store_jobs;
using test::TempDir;

JobRecord job_of(const std::string& id, std::vector<std::string> items) {
  JobRecord j;
  j.id = id;
  j.item_template = "Summarize: {item}";
  j.items = std::move(items);
  return j;
}

messages::JobItemFields result(int32_t index, const std::string& text, int32_t tokens, const std::string& error = "") {
  messages::JobItemFields r;
  r.index = index;
  r.text = text;
  r.completion_tokens = tokens;
  r.error = error;
  return r;
}

// The key of item `index` of job `id` under `kind` ('i' input, 'q' request, 'r' result).
std::string item_key(char kind, const std::string& id, uint32_t index) {
  return std::string(1, kind) + id + std::string(1, '\0') + be32(index);
}

void put(Store& store, const std::string& key, const std::string& value) {
  Batch b;
  b.put(Family::jobs, key, value);
  store.write(b);
}

void erase(Store& store, const std::string& key) {
  Batch b;
  b.erase(Family::jobs, key);
  store.write(b);
}

// Every record of the jobs family: their keys' and values' bytes, and how many.
std::pair<int64_t, int> family_bytes(const Store& store) {
  int64_t bytes = 0;
  int records = 0;
  store.scan(Family::jobs, "", [&](std::string_view k, std::string_view v) {
    bytes += static_cast<int64_t>(k.size() + v.size());
    ++records;
    return true;
  });
  return {bytes, records};
}

}  // namespace

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

TEST_CASE("jobs: the header keeps owner, state, priority, times and sampling, and a rewritten header keeps the items",
          "[persistence]") {
  TempDir dir("job-header");
  JobRecord job = job_of("j", {"one", "two"});
  job.owner = "alice";
  job.priority = wire::Priority::interactive;
  job.created_ms = 1000;
  job.updated_ms = 2000;
  job.sampling.temperature = 0.5f;
  job.sampling.stop = {"END"};
  Store store(dir.path);
  JobBook book(store);
  book.create(job);
  const auto first = book.load("j");
  REQUIRE(first);
  CHECK(first->owner == "alice");
  CHECK(first->state == wire::JobState::running);
  CHECK(first->priority == wire::Priority::interactive);
  CHECK(first->created_ms == 1000);
  CHECK(first->updated_ms == 2000);
  CHECK(first->sampling.temperature == 0.5f);
  CHECK(first->sampling.stop == std::vector<std::string>{"END"});
  CHECK(first->item_template == "Summarize: {item}");
  CHECK(first->requests.empty());  // a template job
  job.state = wire::JobState::cancelled;
  job.updated_ms = 3000;
  book.write_header(job);
  const auto second = book.load("j");
  REQUIRE(second);
  CHECK(second->state == wire::JobState::cancelled);
  CHECK(second->updated_ms == 3000);
  CHECK(second->items == job.items);
}

TEST_CASE("jobs: each result is kept by its index, and the summary counts finished and failed items and tokens",
          "[persistence]") {
  TempDir dir("job-results");
  JobRecord job = job_of("j", {"a", "b", "c", "d"});
  job.owner = "bob";
  job.annotation = "note";
  job.created_ms = 7000;
  Store store(dir.path);
  JobBook book(store);
  book.create(job);
  for (const auto& r : {result(3, "third", 4), result(0, "first", 6), result(2, "", 0, "the prompt is too long")}) {
    job.results[r.index] = r;
    job.updated_ms += 1;
    book.record_result(job, r);
  }
  job.state = wire::JobState::finished;
  book.write_header(job);
  const auto got = book.load("j");
  REQUIRE(got);
  REQUIRE(got->results.size() == 3);
  CHECK(got->results.at(0).text == "first");
  CHECK(got->results.at(3).completion_tokens == 4);
  CHECK(got->results.at(2).error == "the prompt is too long");
  CHECK_FALSE(got->results.count(1));  // item 1 has not finished: it runs again
  const messages::JobSummaryFields s = got->summary();
  CHECK(s.job_id == "j");
  CHECK(s.state == wire::JobState::finished);
  CHECK(s.items == 4);
  CHECK(s.finished_items == 3);
  CHECK(s.failed_items == 1);
  CHECK(s.completion_tokens == 10);
  CHECK(s.created_ms == 7000);
  CHECK(s.updated_ms == 3);
  CHECK(s.owner == "bob");
  CHECK(s.annotation == "note");
}

TEST_CASE("jobs: a prompt's length is counted without building it, for every shape of template", "[persistence]") {
  const std::vector<std::string> templates{"", "{item}", "Q: {item}", "{item} and {item}, then {item}.",
                                           "no placeholder", "{ite{item}m}", "{item"};
  for (const std::string& tmpl : templates) {
    JobRecord j;
    j.item_template = tmpl;
    j.items = {"", "x", std::string(1000, 'y')};
    for (int32_t i = 0; i < 3; ++i) {
      INFO("template '" << tmpl << "', item " << i);
      CHECK(j.prompt_bytes(i) == j.prompt(i).size());
    }
  }
  JobRecord many;
  many.item_template = "[{item}][{item}]";
  many.items = {"ab"};
  CHECK(many.prompt(0) == "[ab][ab]");
  CHECK(many.prompt_bytes(0) == 8);
  many.item_template = "no placeholder";
  CHECK(many.prompt(0) == "no placeholder");  // the item is not appended
}

TEST_CASE("jobs: a header that does not decode is refused by load and stamp, and skipped by stamps", "[persistence]") {
  TempDir dir("job-corrupt-header");
  Store store(dir.path);
  JobBook book(store);
  for (const char* id : {"a", "b", "c"}) book.create(job_of(id, {"x"}));
  put(store, "hb", "xyz");
  CHECK_THROWS_WITH(book.load("b"), "job 'b': its header is corrupt");
  CHECK_THROWS_WITH(book.stamp("b"), "job 'b': its header is corrupt");
  CHECK(book.load("a"));
  const auto stamps = book.stamps("", 10);
  REQUIRE(stamps.size() == 2);
  CHECK(stamps[0].id == "a");
  CHECK(stamps[1].id == "c");
  CHECK(book.ids() == std::vector<std::string>{"a", "b", "c"});  // listed: only loading it fails
}

TEST_CASE("jobs: a job missing an item, a request or with a damaged result fails to load, saying which",
          "[persistence]") {
  TempDir dir("job-incomplete");
  Store store(dir.path);
  JobBook book(store);
  book.create(job_of("items", {"a", "b", "c"}));
  erase(store, item_key('i', "items", 1));
  CHECK_THROWS_WITH(book.load("items"), "job 'items' lists 3 items; the store holds 2");

  JobRecord requests = job_of("requests", {"a", "b"});
  requests.requests = {"req a", "req b"};
  book.create(requests);
  erase(store, item_key('q', "requests", 0));
  CHECK_THROWS_WITH(book.load("requests"), "job 'requests' lists 2 requests; the store holds 1");

  JobRecord results = job_of("results", {"a"});
  book.create(results);
  put(store, item_key('r', "results", 0), "xyz");
  CHECK_THROWS_WITH(book.load("results"), "job 'results': a result is corrupt");
}

TEST_CASE("jobs: stamps come in id order, max at a time, after the one given", "[persistence]") {
  TempDir dir("job-stamps");
  Store store(dir.path);
  JobBook book(store);
  CHECK(book.ids().empty());
  CHECK(book.stamps("", 10).empty());
  for (const char* id : {"c", "a", "d", "b"}) {
    JobRecord j = job_of(id, {"x"});
    j.updated_ms = 100 * (id[0] - 'a');
    j.state = id[0] == 'b' ? wire::JobState::finished : wire::JobState::running;
    book.create(j);
  }
  CHECK(book.ids() == std::vector<std::string>{"a", "b", "c", "d"});
  const auto first = book.stamps("", 2);
  REQUIRE(first.size() == 2);
  CHECK(first[0].id == "a");
  CHECK(first[1].id == "b");
  CHECK(first[1].state == wire::JobState::finished);
  CHECK(first[1].updated_ms == 100);
  const auto rest = book.stamps("b", 10);
  REQUIRE(rest.size() == 2);
  CHECK(rest[0].id == "c");
  CHECK(rest[1].id == "d");
  CHECK(book.stamps("d", 10).empty());
  const auto one = book.stamp("c");
  REQUIRE(one);
  CHECK(one->id == "c");
  CHECK(one->updated_ms == 200);
  CHECK(one->state == wire::JobState::running);
  CHECK_FALSE(book.stamp("e"));
}

TEST_CASE("jobs: erasing a job counts the bytes of every record it had, and leaves a job whose id it prefixes",
          "[persistence]") {
  TempDir dir("job-erase");
  Store store(dir.path);
  JobBook book(store);
  JobRecord j1 = job_of("j1", {"a", "b"});
  j1.requests = {"req a", "req b"};
  book.create(j1);
  j1.results[0] = result(0, "done", 2);
  book.record_result(j1, j1.results[0]);
  const auto [j1_bytes, j1_records] = family_bytes(store);
  CHECK(j1_records == 6);  // header, 2 items, 2 requests, 1 result
  book.create(job_of("j10", {"c"}));
  Batch b;
  CHECK(book.erase("j1", b) == j1_bytes);
  store.write(b);
  CHECK_FALSE(book.load("j1"));
  const auto j10 = book.load("j10");
  REQUIRE(j10);
  CHECK(j10->items == std::vector<std::string>{"c"});
  CHECK(family_bytes(store).second == 2);
  Batch none;
  CHECK(book.erase("nothing", none) == 0);
  store.write(none);
  CHECK(book.ids() == std::vector<std::string>{"j10"});
}
