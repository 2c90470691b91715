// Several front ends on one worker: each holds its own share of the KV pool
// and its own sequences, a crashed front end's share is freed once it has
// been silent (the worker's busy time aside), and the results of one front
// end's steps do not depend on the other's.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "engine/backend.h"
#include "engine/synthetic_model.h"
#include "messages/step_frames.h"
#include "worker/front_shares.h"
#include "worker/step_runner.h"

using namespace troupe;
using namespace std::chrono_literals;
using worker::FrontShares;

TEST_CASE("front shares: each front end holds its own part of the pool, a third is refused while both live") {
  FrontShares shares(100, 2, 10s);
  const auto t0 = FrontShares::Clock::time_point{} + 1h;
  std::vector<uint64_t> evicted;
  std::string why;
  const auto a = shares.hold(11, t0, evicted, why), b = shares.hold(22, t0, evicted, why);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->pages == 50);
  CHECK(b->pages == 50);
  CHECK(a->first_page != b->first_page);
  CHECK(a->epoch != b->epoch);
  CHECK(shares.hold(11, t0 + 1s, evicted, why)->epoch == a->epoch);  // the same holding
  CHECK_FALSE(shares.hold(33, t0 + 2s, evicted, why));
  CHECK_THAT(why, Catch::Contains("--fronts") && Catch::Contains("every share is held"));
  CHECK(evicted.empty());
  // A front end that lets go frees its share for the next, with a new epoch.
  shares.release(11);
  CHECK(shares.held() == 1);
  const auto c = shares.hold(33, t0 + 3s, evicted, why);
  REQUIRE(c);
  CHECK(c->first_page == a->first_page);
  CHECK(c->epoch != a->epoch);
  CHECK(evicted.empty());
}

TEST_CASE("front shares: a silent front end's share goes to a new one, but not while the worker was busy") {
  FrontShares shares(64, 1, 10s);
  const auto t0 = FrontShares::Clock::time_point{} + 1h;
  std::vector<uint64_t> evicted;
  std::string why;
  const auto a = shares.hold(1, t0, evicted, why);
  REQUIRE(a);
  CHECK(a->pages == 64);
  // 30 s of one long step: the front end that waits on it is not silent.
  shares.worked(30s);
  CHECK_FALSE(shares.hold(2, t0 + 31s, evicted, why));
  // 12 s more with nothing to do: it is gone, its share is the newcomer's.
  const auto b = shares.hold(2, t0 + 43s, evicted, why);
  REQUIRE(b);
  CHECK(evicted == std::vector<uint64_t>{1});
  CHECK(b->epoch != a->epoch);
  // The old front end, back, is now the stranger.
  CHECK_FALSE(shares.hold(1, t0 + 44s, evicted, why));
  CHECK_THROWS_WITH(FrontShares(3, 4, 10s), Catch::Contains("cannot be shared by 4"));
}

namespace {

std::shared_ptr<Backend> small_backend() {
  static const std::string path = [] {
    const auto p = std::filesystem::temp_directory_path() / ("troupe-shares-test-" + std::to_string(getpid()) + ".gguf");
    SyntheticModelSpec spec;
    spec.n_embd = 64;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 128;
    spec.seed = 9;
    write_synthetic_model(spec, p.string());
    return p.string();
  }();
  BackendOptions o;
  o.kv_pages = 32;
  return open_backend(path, o);
}

struct Result {
  explicit Result(std::string b) : bytes(std::move(b)), view(messages::check_step_result(bytes)) { REQUIRE(view); }
  const wire::step::StepResult* operator->() const { return view; }
  std::string bytes;
  const wire::step::StepResult* view;
};

// Greedy tokens of one sequence, stepped one token at a time by front end `front`.
std::vector<int32_t> decode(worker::StepRunner& runner, uint64_t front, uint64_t sequence, int32_t n,
                            std::function<void()> between = {}) {
  messages::SamplingFields greedy;
  greedy.temperature = 0;
  std::vector<int32_t> feed{60, 61, 62, 63, 64, 65, 66}, got;
  const std::vector<int32_t> table{0, 1};  // the same page numbers for both front ends
  int32_t start = 0;
  for (int32_t i = 0; i < n; ++i) {
    const messages::SliceSpec slice{sequence, start, feed, table, true, i == 0 ? &greedy : nullptr, {}, false, 0, {}};
    const Result r(runner.run(messages::step_plan(static_cast<uint64_t>(i + 1), {&slice, 1}, {}, {}, front)));
    REQUIRE_FALSE(r->error());
    got.push_back(r->sampled()->Get(0)->token());
    start += static_cast<int32_t>(feed.size());
    feed = {got.back()};
    if (between) between();
  }
  return got;
}

}  // namespace

TEST_CASE("two front ends step one worker with the same page numbers and sequence ids, and neither sees the other") {
  worker::StepRunner alone(small_backend());
  const std::vector<int32_t> want = decode(alone, 0, 5, 6);
  worker::StepRunner shared(small_backend(), 2);
  const Result first(shared.run(messages::step_plan(0, {}, {}, {}, 101)));
  CHECK(first->kv_pages() == 16);  // half of 32
  CHECK(first->process() == shared.process());
  // Front end 202 runs its own sequence 5 on its own pages 0 and 1 between each of 101's steps.
  std::vector<int32_t> other;
  int step = 0;
  worker::StepRunner* r = &shared;
  messages::SamplingFields greedy;
  greedy.temperature = 0;
  const std::vector<int32_t> prompt{70, 71, 72};
  const std::vector<int32_t> table{0, 1};
  const auto interleave = [&] {
    const std::vector<int32_t> feed = step == 0 ? prompt : std::vector<int32_t>{other.back()};
    const int32_t start = step == 0 ? 0 : 3 + step - 1;
    const messages::SliceSpec slice{5, start, feed, table, true, step == 0 ? &greedy : nullptr, {}, false, 0, {}};
    const Result res(r->run(messages::step_plan(static_cast<uint64_t>(++step), {&slice, 1}, {}, {}, 202)));
    REQUIRE_FALSE(res->error());
    CHECK(res->kv_pages() == 16);
    other.push_back(res->sampled()->Get(0)->token());
  };
  CHECK(decode(shared, 101, 5, 6, interleave) == want);
  CHECK(shared.fronts_held() == 2);
  // A page beyond a share is refused, though the worker's pool has it.
  const std::vector<int32_t> far{20};
  const std::vector<int32_t> tokens{60};
  const messages::SliceSpec out{9, 0, tokens, far, true, &greedy, {}, false, 0, {}};
  CHECK_THAT(Result(shared.run(messages::step_plan(9, {&out, 1}, {}, {}, 101)))->error()->str(),
             Catch::Contains("outside this worker's 16 pages"));
  // A third front end is refused while both hold theirs; a release frees one.
  CHECK_THAT(Result(shared.run(messages::step_plan(0, {}, {}, {}, 303)))->error()->str(), Catch::Contains("every share is held"));
  shared.run(messages::release_plan(202));
  CHECK(shared.fronts_held() == 1);
  CHECK_FALSE(Result(shared.run(messages::step_plan(0, {}, {}, {}, 303)))->error());
}
