// Storage errors are answers, never crashes: the store on a disk that fills
// up or fails at random (faulty_disk_fs.h). Every write either is
// acknowledged and then found afterwards, or fails with a StoreError; no
// call aborts the process (Debian's RocksDB is built with its assertions
// on, so a call sequence RocksDB forbids would abort here as in the server).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "messages/client_validation.h"
#include "persistence/jobs.h"
#include "persistence/session_turns.h"
#include "persistence/sessions.h"
#include "persistence/store.h"
#include "tests/persistence/fault_injection_fs.h"
#include "tests/persistence/faulty_disk_fs.h"

using namespace troupe;
using namespace troupe::persistence;
using troupe::test::FaultyDiskFs;

namespace {

struct Disk {
  std::filesystem::path root;
  std::shared_ptr<FaultyDiskFs> fs;
  std::unique_ptr<rocksdb::Env> env;
  explicit Disk(uint64_t seed) {
    static std::atomic<int> n = 0;
    root = std::filesystem::temp_directory_path() /
           ("troupe-faulty-" + std::to_string(getpid()) + "-" + std::to_string(++n));
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
    fs = std::make_shared<FaultyDiskFs>(root, seed);
    env = troupe::test::env_on(fs);
  }
  ~Disk() { std::filesystem::remove_all(root); }
  std::filesystem::path store() const { return root / "store"; }
};

std::string key(int i) {
  std::string k(1, 'k');  // appended, not "k" + ...: GCC 12's false -Wrestrict on operator+
  return k += be32(static_cast<uint32_t>(i));
}
std::string value(int i) { return std::string(2000, static_cast<char>('a' + i % 26)) + std::to_string(i); }

// Writes key i; true when acknowledged.
bool put(Store& store, int i) {
  Batch b;
  b.put(Family::sessions, key(i), value(i));
  try {
    store.write(b);
    return true;
  } catch (const StoreError&) {
    return false;
  }
}

// A degraded store opens afresh at most every kRecoverEveryMs.
void wait_for_recovery() { std::this_thread::sleep_for(std::chrono::milliseconds(Store::kRecoverEveryMs + 20)); }

// Every acknowledged key, read back from a store opened afresh on a healthy disk.
int64_t missing_after_reopen(const Disk& disk, const std::set<int>& acked) {
  disk.fs->set_capacity(0);
  disk.fs->stop_faults();
  Store store(disk.store(), disk.env.get());
  int64_t missing = 0;
  for (int i : acked) {
    const auto got = store.get(Family::sessions, key(i));
    if (!got || *got != value(i)) ++missing;
  }
  return missing;
}

}  // namespace

TEST_CASE("a full disk refuses writes with storage errors, serves reads, and writes again once space returns") {
  Disk disk(1);
  std::set<int> acked;
  {
    Store store(disk.store(), disk.env.get());
    for (int i = 0; i < 20; ++i)
      if (put(store, i)) acked.insert(i);
    REQUIRE(acked.size() == 20);
    disk.fs->set_capacity(disk.fs->used() + 16 * 1024);
    int refused = 0;
    for (int i = 20; i < 60; ++i) {
      if (put(store, i)) acked.insert(i);
      else ++refused;
    }
    CHECK(refused > 0);
    CHECK_FALSE(store.health().writable);
    CHECK_FALSE(store.health().reason.empty());
    // Reads go on while writes are refused.
    for (int i = 0; i < 20; ++i) CHECK(store.get(Family::sessions, key(i)) == value(i));
    disk.fs->set_capacity(0);
    wait_for_recovery();
    REQUIRE(put(store, 100));
    acked.insert(100);
    CHECK(store.health().writable);
  }
  CHECK(missing_after_reopen(disk, acked) == 0);
}

TEST_CASE("a store opened on a full disk comes up read-only, then takes writes once space returns") {
  Disk disk(2);
  std::set<int> acked;
  {
    Store store(disk.store(), disk.env.get());
    for (int i = 0; i < 10; ++i)
      if (put(store, i)) acked.insert(i);
  }
  {
    // The WAL of a killed process to replay, and no room to write its table.
    Store store(disk.store(), disk.env.get());
    for (int i = 10; i < 15; ++i)
      if (put(store, i)) acked.insert(i);
    disk.fs->set_capacity(disk.fs->used());
  }
  disk.fs->set_capacity(disk.fs->used());
  Store store(disk.store(), disk.env.get());
  for (int i : acked) CHECK(store.get(Family::sessions, key(i)) == value(i));
  CHECK_FALSE(put(store, 200));
  CHECK_FALSE(store.health().writable);
  disk.fs->set_capacity(0);
  wait_for_recovery();
  REQUIRE(put(store, 201));
  acked.insert(201);
  CHECK(store.health().writable);
  CHECK(store.get(Family::sessions, key(201)) == value(201));
}

TEST_CASE("random ENOSPC and EIO at write, sync, create, rename, delete and directory fsync lose no acknowledged write") {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Disk disk(seed);
    std::set<int> acked;
    int64_t refused = 0;
    {
      std::optional<Store> store;
      store.emplace(disk.store(), disk.env.get());
      disk.fs->set_faults(FaultyDiskFs::all_ops, 0.01);
      for (int i = 0; i < 400; ++i) {
        if (put(*store, i)) acked.insert(i);
        else ++refused;
        if (!store->health().writable) wait_for_recovery();
        if (i % 100 == 99) {
          try {
            store->compact();
          } catch (const StoreError&) {
            ++refused;
          }
        }
        if (i == 250) {  // a restart on the faulty disk
          store.reset();
          store.emplace(disk.store(), disk.env.get());
        }
      }
    }
    INFO("seed " << seed << ": " << acked.size() << " acknowledged, " << refused << " refused, faults "
                 << disk.fs->counts().no_space << " ENOSPC, " << disk.fs->counts().io_errors << " EIO");
    CHECK(refused > 0);
    CHECK(acked.size() > 200);
    CHECK(missing_after_reopen(disk, acked) == 0);
  }
}

namespace {

std::vector<ChatMessage> turn_messages(int i) {
  return {{"user", "question " + std::to_string(i)}, {"assistant", "answer " + std::to_string(i) + std::string(300, 'a')}};
}

SessionPolicy faulty_policy() {
  SessionPolicy p;
  p.model_name = "faulty-test";
  p.kv = true;
  p.kv_identity = {7, 9};
  p.page_size = 16;
  p.page_bytes = 2048;
  return p;
}

// One turn of session `id` through the persistence actor's path; true when acknowledged.
bool commit_turn(SessionTurns& turns, const std::string& id, int i) {
  if (turns.begin(id, i).error != wire::ErrorCode::none) return false;
  SessionCommit c;
  c.peer = "client";
  c.client_id = static_cast<uint64_t>(i + 1);
  c.session_id = id;
  c.messages = turn_messages(i);
  c.tokens.resize(static_cast<size_t>(8 * (i + 1)));
  std::iota(c.tokens.begin(), c.tokens.end(), 1);
  c.done.reason = wire::FinishReason::stop;
  const auto reply = turns.commit(std::move(c), i, 1000 + i);
  return messages::check_response(reply)->body_type() == wire::ResponseBody::Done;
}

}  // namespace

TEST_CASE("random ENOSPC and EIO under a 200-turn session and a 500-item job lose no acknowledged turn or item") {
  for (uint64_t seed = 11; seed <= 12; ++seed) {
    Disk disk(seed);
    int acked_turns = 0;
    std::set<int> acked_items;
    int64_t refused = 0;
    JobRecord job;
    job.id = "job-faulty";
    job.item_template = "Summarize: {item}";
    for (int i = 0; i < 500; ++i) job.items.push_back("paper " + std::to_string(i));
    {
      std::optional<Store> store;
      std::optional<SessionTurns> turns;
      const auto open = [&] {
        turns.reset();
        store.reset();
        store.emplace(disk.store(), disk.env.get());  // never throws for a faulty disk: read-only at worst
        turns.emplace(*store, faulty_policy());
      };
      open();
      JobBook(*store).create(job);  // on a healthy disk yet
      disk.fs->set_faults(FaultyDiskFs::all_ops, 0.01);
      int item = 0;
      for (int step = 0; (acked_turns < 200 || item < 500) && step < 5000; ++step) {
        if (step == 300) open();  // a restart on the faulty disk
        if (step % 150 == 149) {
          try {
            store->compact();
          } catch (const StoreError&) {
            ++refused;
          }
        }
        bool ok = true;
        if (acked_turns < 200) {
          if ((ok = commit_turn(*turns, "faulty", acked_turns))) ++acked_turns;
          else ++refused;
        }
        if (item < 500) {
          messages::JobItemFields r;
          r.index = item;
          r.text = "summary of paper " + std::to_string(item);
          try {
            JobBook(*store).record_result(job, r);
            acked_items.insert(item++);
          } catch (const StoreError&) {
            ++refused;
            ok = false;
          }
        }
        if (!ok && !store->health().writable) wait_for_recovery();
      }
    }
    INFO("seed " << seed << ": " << acked_turns << " turns and " << acked_items.size() << " items acknowledged, " << refused
                 << " refused; faults: " << disk.fs->counts().no_space << " ENOSPC, " << disk.fs->counts().io_errors
                 << " EIO");
    CHECK(refused > 0);
    CHECK(acked_turns == 200);
    CHECK(acked_items.size() == 500);
    disk.fs->stop_faults();
    Store store(disk.store(), disk.env.get());
    const auto s = SessionBook(store).load("faulty");
    REQUIRE(s);
    // A write that failed may still have reached the WAL before its sync
    // failed: the retried turn is then stored twice, side by side (allowed);
    // none may be missing or out of order.
    std::vector<std::string> answers;
    for (const auto& t : s->turns)
      if (answers.empty() || answers.back() != t.messages[1].content) answers.push_back(t.messages[1].content);
    REQUIRE(answers.size() == static_cast<size_t>(acked_turns));
    for (int i = 0; i < acked_turns; ++i) CHECK(answers[static_cast<size_t>(i)] == turn_messages(i)[1].content);
    const auto j = JobBook(store).load(job.id);
    REQUIRE(j);
    for (int i : acked_items) CHECK(j->results.count(i) == 1);
  }
}

// The real thing: the store on a small tmpfs filled by another file, as a
// disk shared with other programs fills. Needs mount(2) (root, or a
// container that allows it); elsewhere it exits 77, which CTest counts as
// skipped (tests/CMakeLists.txt).
TEST_CASE("on a real full tmpfs the store refuses writes, serves reads, reopens, and writes again", "[tmpfs]") {
  const std::filesystem::path mnt = std::filesystem::temp_directory_path() / ("troupe-tmpfs-" + std::to_string(getpid()));
  std::filesystem::create_directories(mnt);
  if (std::system(("mount -t tmpfs -o size=8m tmpfs " + mnt.string() + " 2>/dev/null").c_str()) != 0) {
    std::filesystem::remove(mnt);
    std::printf("skipped: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)\n");
    std::exit(77);
  }
  struct Unmount {
    std::filesystem::path at;
    ~Unmount() {
      (void)std::system(("umount " + at.string()).c_str());
      std::filesystem::remove(at);
    }
  } unmount{mnt};
  const auto dir = mnt / "store";
  const auto filler = mnt / "filler";
  // Another program takes all but `room` bytes of the disk.
  const auto fill = [&](uintmax_t room) {
    const auto space = std::filesystem::space(mnt);
    std::error_code ec;
    const uintmax_t have = std::filesystem::exists(filler) ? std::filesystem::file_size(filler) : 0;
    std::filesystem::resize_file(filler, 0, ec);
    if (FILE* f = std::fopen(filler.c_str(), "ab")) {
      std::string block(4096, 'x');
      for (uintmax_t n = 0; n + room < space.available + have; n += block.size())
        if (std::fwrite(block.data(), 1, block.size(), f) != block.size()) break;
      std::fclose(f);
    }
  };
  std::set<int> acked;
  int refused = 0;
  {
    Store store(dir);
    for (int i = 0; i < 20; ++i)
      if (put(store, i)) acked.insert(i);
    REQUIRE(acked.size() == 20);
    fill(64 * 1024);
    // Past what RocksDB preallocated for its WAL, into the full disk.
    for (int i = 20; i < 6000 && refused < 50; ++i) {
      if (put(store, i)) acked.insert(i);
      else ++refused;
    }
    CHECK(refused > 0);
    CHECK_FALSE(store.health().writable);
    for (int i : acked) CHECK(store.get(Family::sessions, key(i)) == value(i));
  }
  {
    // A restart on the full disk: up, read-only, everything acknowledged there.
    Store store(dir);
    CHECK_FALSE(store.health().writable);
    for (int i : acked) CHECK(store.get(Family::sessions, key(i)) == value(i));
    CHECK_FALSE(put(store, 300));
    std::filesystem::remove(filler);
    wait_for_recovery();
    REQUIRE(put(store, 301));
    acked.insert(301);
    CHECK(store.health().writable);
  }
  Store store(dir);
  CHECK(store.health().writable);
  for (int i : acked) CHECK(store.get(Family::sessions, key(i)) == value(i));
  INFO(acked.size() << " acknowledged, " << refused << " refused");
}
