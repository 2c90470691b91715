// Records as a damaged or hostile store holds them (persistence/sessions.h,
// jobs.h): the first byte says which record the rest becomes (a session
// header or turn, a job header or result), the other records of that
// session or job are sound. Each is written into a real RocksDB store and
// read back through the calls the server makes: load a session (and its
// history, turn states, summary), list sessions with and without damage
// accounting, load a job (and its prompts), list job ids.
//
// Property: a record that does not decode is a StoreError for that record
// (the server answers `storage_failed`, docs/OPERATIONS.md), never a crash,
// a sanitizer report, another exception, or an allocation the record's
// bytes cannot justify.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "messages/store_generated.h"
#include "persistence/jobs.h"
#include "persistence/sessions.h"
#include "persistence/store.h"
#include "tests/fuzz/fuzz_support.h"

using namespace troupe;
using namespace troupe::persistence;

namespace {

const std::string kSession = "s";
const std::string kJob = "j";

std::string session_key(char kind, uint32_t turn = 0) {
  if (kind == 'h') return "h" + kSession;
  return "t" + kSession + std::string(1, '\0') + be32(turn);
}
std::string job_key(char kind, uint32_t index = 0) {
  if (kind == 'h') return "h" + kJob;
  return std::string(1, kind) + kJob + std::string(1, '\0') + be32(index);
}

// A sound session of two turns and a sound job of two items, one finished.
struct SoundRecords {
  std::string session_header, turn0, turn1, job_header, result0;
  SoundRecords() {
    SessionRecord s;
    s.id = kSession;
    s.model = "fuzz";
    s.tokens = {1, 2, 3, 4};
    s.turns.resize(2);
    s.turns[0].messages = {{"user", "hi"}, {"assistant", "hello"}};
    s.turns[1].messages = {{"user", "and?"}, {"assistant", "that is all"}};
    s.window_first_turn = 1;
    s.summary_through = 1;
    s.context_summary = "a greeting";
    session_header = encode_session_header(s);
    turn0 = encode_session_turn(s.turns[0]);
    turn1 = encode_session_turn(s.turns[1]);
  }
};

struct Fixture {
  std::filesystem::path dir;
  std::unique_ptr<Store> store;
  SoundRecords sound;
  // The job header and result come from the real writer (JobBook::create and
  // record_result), read back once.
  Fixture() {
    dir = std::filesystem::temp_directory_path() / ("troupe-fuzz-store-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    store = std::make_unique<Store>(dir);
    JobRecord j;
    j.id = kJob;
    j.item_template = "Summarize: {item}";
    j.items = {"first item", "second item"};
    JobBook jobs(*store);
    jobs.create(j);
    messages::JobItemFields r;
    r.index = 0;
    r.text = "done";
    jobs.record_result(j, r);
    sound.job_header = *store->get(Family::jobs, job_key('h'));
    sound.result0 = *store->get(Family::jobs, job_key('r'));
  }
  ~Fixture() {
    store.reset();
    std::filesystem::remove_all(dir);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void read_session(Store& store) {
  SessionBook sessions(store);
  try {
    if (const auto s = sessions.load(kSession)) {
      (void)s->history();
      (void)s->turn_states();
      (void)s->summary();
    }
  } catch (const StoreError&) {
  }
  std::string damage;
  (void)sessions.list(&damage);
  try {
    (void)sessions.list();
  } catch (const StoreError&) {
  }
}

void read_job(Store& store) {
  JobBook jobs(store);
  try {
    if (const auto j = jobs.load(kJob)) {
      (void)j->summary();
      for (int32_t i = 0; i < static_cast<int32_t>(j->items.size()); ++i)
        if (j->prompt_bytes(i) <= (1 << 20)) (void)j->prompt(i);  // the job runner's own bound
    }
  } catch (const StoreError&) {
  }
  std::string damage;
  (void)jobs.ids(&damage);
}

}  // namespace

// Loading happens before the first input, so it is not timed as one.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)fixture();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Fixture& f = fixture();
  const std::string record(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int kind = data[0] % 4;

  Batch b;
  b.put(Family::sessions, session_key('h'), kind == 0 ? record : f.sound.session_header);
  b.put(Family::sessions, session_key('t', 0), kind == 1 ? record : f.sound.turn0);
  b.put(Family::sessions, session_key('t', 1), f.sound.turn1);
  b.put(Family::jobs, job_key('h'), kind == 2 ? record : f.sound.job_header);
  b.put(Family::jobs, job_key('r', 0), kind == 3 ? record : f.sound.result0);
  f.store->write(b, false);  // no fsync: each input replaces the same keys

  if (kind < 2) read_session(*f.store);
  else read_job(*f.store);
  return 0;
}
