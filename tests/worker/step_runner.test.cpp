// The step and draft runners on a synthetic model: a plan's tokens are the
// engine's own greedy tokens, verify windows keep exactly the drafts the
// model agrees with, and bad plans are answered with an error while the
// runner goes on.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <numeric>

#include "engine/backend.h"
#include "engine/generator.h"
#include "engine/grammar/grammar.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"
#include "engine/gguf_file.h"
#include "messages/draft_frames.h"
#include "messages/step_frames.h"
#include "worker/draft_runner.h"
#include "worker/step_runner.h"

using namespace troupe;

namespace {

const std::string& model_path() {
  static const std::string path = [] {
    const auto p = std::filesystem::temp_directory_path() / ("troupe-worker-test-" + std::to_string(getpid()) + ".gguf");
    SyntheticModelSpec spec;
    spec.n_embd = 64;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 128;
    spec.seed = 5;
    write_synthetic_model(spec, p.string());
    return p.string();
  }();
  return path;
}

std::shared_ptr<Backend> backend() {
  BackendOptions o;
  o.kv_pages = 32;
  return open_backend(model_path(), o);
}

messages::SamplingFields greedy() {
  messages::SamplingFields s;
  s.temperature = 0;
  return s;
}

std::vector<int32_t> reference_greedy(std::span<const int32_t> prompt, int32_t n) {
  auto b = backend();
  const Tokenizer tok(load_vocabulary(b->file()));
  GenerateOptions o;
  o.max_tokens = n;
  o.sampling.temperature = 0;
  return generate(*b, tok, prompt, o, {}).tokens;
}

// A StepResult and the bytes it points into.
struct Result {
  explicit Result(std::string b) : bytes(std::move(b)), view(messages::check_step_result(bytes)) { REQUIRE(view); }
  const wire::step::StepResult* operator->() const { return view; }
  std::string bytes;
  const wire::step::StepResult* view;
};
Result result(std::string bytes) { return Result(std::move(bytes)); }

// Greedy tokens of one sequence, stepped one token at a time by front end `front`.
std::vector<int32_t> decode(worker::StepRunner& runner, uint64_t front, uint64_t sequence, int32_t n,
                            std::function<void()> between = {}) {
  const messages::SamplingFields s = greedy();
  std::vector<int32_t> feed{60, 61, 62, 63, 64, 65, 66}, got;
  const std::vector<int32_t> table{0, 1};  // the same page numbers for both front ends
  int32_t start = 0;
  for (int32_t i = 0; i < n; ++i) {
    const messages::SliceSpec slice{sequence, start, feed, table, true, i == 0 ? &s : nullptr, {}, false, 0, {}};
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

TEST_CASE("a step runner's tokens, prefill then decode one slice at a time, are the engine's greedy tokens") {
  worker::StepRunner runner(backend());
  const std::vector<int32_t> prompt{60, 61, 62, 63, 64, 65, 66};
  const std::vector<int32_t> want = reference_greedy(prompt, 5);
  const std::vector<int32_t> table{3, 4};  // pages of 16: any the plan names
  const messages::SamplingFields s = greedy();
  std::vector<int32_t> got;
  std::vector<int32_t> feed = prompt;
  int32_t start = 0;
  for (int step = 1; step <= 5; ++step) {
    const messages::SliceSpec slice{7, start, feed, table, true, step == 1 ? &s : nullptr, {}, false, 0, {}};
    const Result r = result(runner.run(messages::step_plan(static_cast<uint64_t>(step), {&slice, 1}, {})));
    REQUIRE_FALSE(r->error());
    REQUIRE(r->sampled()->size() == 1);
    got.push_back(r->sampled()->Get(0)->token());
    start += static_cast<int32_t>(feed.size());
    feed = {got.back()};
  }
  CHECK(got == want);
}

TEST_CASE("a verify window keeps the drafts the model agrees with, up to the first it does not") {
  worker::StepRunner runner(backend());
  const std::vector<int32_t> prompt{60, 61, 62, 63, 64, 65, 66};
  const std::vector<int32_t> want = reference_greedy(prompt, 5);
  const std::vector<int32_t> table{0};
  const messages::SamplingFields s = greedy();
  messages::SliceSpec first{1, 0, prompt, table, true, &s, {}, false, 0, {}};
  REQUIRE(result(runner.run(messages::step_plan(1, {&first, 1}, {})))->sampled()->Get(0)->token() == want[0]);
  // The window: the token just sampled, then two right drafts and a wrong one.
  const std::vector<int32_t> window{want[0], want[1], want[2], want[3] + 1};
  messages::SliceSpec verify{1, 7, window, table, true, nullptr, {}, false, 3, {}};
  const Result r = result(runner.run(messages::step_plan(2, {&verify, 1}, {})));
  REQUIRE_FALSE(r->error());
  const auto* t = r->sampled()->Get(0);
  REQUIRE(t->accepted());
  CHECK(std::vector<int32_t>(t->accepted()->begin(), t->accepted()->end()) == std::vector<int32_t>{want[1], want[2]});
  CHECK(t->token() == want[3]);
}

TEST_CASE("bad plans are answered with the reason, and the runner serves the next plan") {
  worker::StepRunner runner(backend());
  CHECK_THAT(result(runner.run("garbage"))->error()->str(), Catch::Contains("malformed step plan"));
  const std::vector<int32_t> tokens{60, 61};
  const std::vector<int32_t> far{9999};
  const messages::SamplingFields s = greedy();
  messages::SliceSpec out_of_range{1, 0, tokens, far, true, &s, {}, false, 0, {}};
  CHECK_THAT(result(runner.run(messages::step_plan(1, {&out_of_range, 1}, {})))->error()->str(),
             Catch::Contains("outside this worker's 32 pages"));
  const std::vector<int32_t> table{0};
  messages::SliceSpec stranger{2, 5, tokens, table, true, nullptr, {}, false, 0, {}};
  CHECK_THAT(result(runner.run(messages::step_plan(2, {&stranger, 1}, {})))->error()->str(),
             Catch::Contains("continues but never started"));
  messages::SliceSpec too_many{3, 0, tokens, table, true, &s, {}, false, 2, {}};
  CHECK_THAT(result(runner.run(messages::step_plan(3, {&too_many, 1}, {})))->error()->str(), Catch::Contains("2 drafts"));
  messages::SliceSpec fine{4, 0, tokens, table, true, &s, {}, false, 0, {}};
  const Result ok = result(runner.run(messages::step_plan(4, {&fine, 1}, {})));
  CHECK_FALSE(ok->error());
  CHECK(ok->kv_pages() == 32);
}

TEST_CASE("a draft runner asks for the whole history of a sequence it does not know, and drafts for one it does") {
  worker::DraftRunner runner(backend(), "draft");
  const std::vector<int32_t> history{60, 61, 62, 63};
  const messages::SamplingFields s = greedy();
  const messages::DraftSequenceSpec unknown{1, 2, std::span<const int32_t>(history).subspan(2), 3, nullptr};
  std::string bytes = runner.run(messages::draft_plan(1, {&unknown, 1}, {}));
  const auto* r = messages::check_draft_result(bytes);
  REQUIRE(r);
  REQUIRE(r->proposals()->size() == 1);
  CHECK(r->proposals()->Get(0)->resync());
  const messages::DraftSequenceSpec whole{1, 0, history, 3, &s};
  bytes = runner.run(messages::draft_plan(2, {&whole, 1}, {}));
  r = messages::check_draft_result(bytes);
  REQUIRE(r);
  CHECK_FALSE(r->error());
  CHECK(r->proposals()->Get(0)->tokens()->size() == 3);
  CHECK(r->model()->str() == "draft");
}

TEST_CASE("two front ends step one worker with the same page numbers and sequence ids, and neither sees the other") {
  worker::StepRunner alone(backend());
  const std::vector<int32_t> want = decode(alone, 0, 5, 6);
  worker::StepRunner shared(backend(), 2);
  const Result first(shared.run(messages::step_plan(0, {}, {}, {}, 101)));
  CHECK(first->kv_pages() == 16);  // half of 32
  CHECK(first->process() == shared.process());
  // Front end 202 runs its own sequence 5 on its own pages 0 and 1 between each of 101's steps.
  std::vector<int32_t> other;
  int step = 0;
  worker::StepRunner* r = &shared;
  const messages::SamplingFields g = greedy();
  const std::vector<int32_t> prompt{70, 71, 72};
  const std::vector<int32_t> table{0, 1};
  const auto interleave = [&] {
    const std::vector<int32_t> feed = step == 0 ? prompt : std::vector<int32_t>{other.back()};
    const int32_t start = step == 0 ? 0 : 3 + step - 1;
    const messages::SliceSpec slice{5, start, feed, table, true, step == 0 ? &g : nullptr, {}, false, 0, {}};
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
  const messages::SliceSpec out{9, 0, tokens, far, true, &g, {}, false, 0, {}};
  CHECK_THAT(Result(shared.run(messages::step_plan(9, {&out, 1}, {}, {}, 101)))->error()->str(),
             Catch::Contains("outside this worker's 16 pages"));
  // A third front end is refused while both hold theirs; a release frees one.
  CHECK_THAT(Result(shared.run(messages::step_plan(0, {}, {}, {}, 303)))->error()->str(), Catch::Contains("every share is held"));
  shared.run(messages::release_plan(202));
  CHECK(shared.fronts_held() == 1);
  CHECK_FALSE(Result(shared.run(messages::step_plan(0, {}, {}, {}, 303)))->error());
}

namespace {

// One constrained sequence stepped on `runner` from `history` (all tokens so
// far; the last not yet computed) until its grammar ends it or `n` tokens:
// each step feeds the sampled token and the forced ones after it, as the
// scheduler does. Returns every token it decided, forced ones included.
std::vector<int32_t> constrained(worker::StepRunner& runner, uint64_t sequence, std::vector<int32_t> history,
                                 int32_t grammar_start, const messages::SamplingFields& s, int32_t n, bool& ended) {
  const Tokenizer tok(load_vocabulary(backend()->file()));
  const std::vector<int32_t> table{0, 1, 2, 3};
  std::vector<int32_t> got;
  // The first slice brings the sampling and the computed history before it.
  std::vector<int32_t> feed{history.back()};
  int32_t start = static_cast<int32_t>(history.size()) - 1;
  std::vector<int32_t> before(history.begin(), history.end() - 1);
  ended = false;
  for (int32_t step = 1; step <= n && !ended; ++step) {
    messages::SliceSpec slice{sequence, start, feed, table, true, step == 1 ? &s : nullptr,
                              step == 1 ? std::span<const int32_t>(before) : std::span<const int32_t>(), false, 0, {}};
    slice.grammar = {grammar_start, true};
    const Result r(runner.run(messages::step_plan(static_cast<uint64_t>(step), {&slice, 1}, {})));
    REQUIRE_FALSE(r->error());
    const auto* t = r->sampled()->Get(0);
    REQUIRE_FALSE(t->grammar_blocked());
    start += static_cast<int32_t>(feed.size());
    feed = {t->token()};
    if (t->forced()) feed.insert(feed.end(), t->forced()->begin(), t->forced()->end());
    if (tok.is_end_of_generation(t->token())) ended = true;
    else got.insert(got.end(), feed.begin(), feed.end());
  }
  return got;
}

}  // namespace

TEST_CASE("a constrained sequence follows its grammar to its end, and another runner given its history goes on alike") {
  const std::string gbnf = R"(root ::= "{\"id\": " [1-9] [0-9]{0,2} ", \"name\": \"" [a-z]{2,6} "\"}")";
  messages::SamplingFields s = greedy();
  s.grammar = gbnf;
  const std::vector<int32_t> prompt{60, 61, 62, 63, 64, 65, 66};
  const Tokenizer tok(load_vocabulary(backend()->file()));
  worker::StepRunner a(backend());
  bool ended = false;
  const std::vector<int32_t> whole = constrained(a, 1, prompt, 7, s, 64, ended);
  REQUIRE(ended);
  const std::string text = tok.decode(whole);
  CHECK(grammar::matches(*grammar::compile_gbnf(gbnf), text));
  INFO(text);
  // Part way, the sequence moves to another runner (failover, a cascade
  // tier): its history past grammar_start is replayed there.
  REQUIRE(whole.size() > 4);
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), whole.begin(), whole.begin() + 4);
  worker::StepRunner b(backend());
  const std::vector<int32_t> rest = constrained(b, 9, history, 7, s, 64, ended);
  CHECK(ended);
  CHECK(rest == std::vector<int32_t>(whole.begin() + 4, whole.end()));
}

TEST_CASE("a grammar a worker cannot run blocks its own sequence only, and the runner goes on") {
  messages::SamplingFields s = greedy();
  s.grammar = "root ::= [\\U0001F600-\\U0001F64F]";  // one emoji, spelled byte by byte
  worker::StepRunner runner(backend());
  const std::vector<int32_t> prompt{60, 61, 62}, page0{0}, page1{1};
  messages::SliceSpec slice{3, 0, prompt, page0, true, &s, {}, false, 0, {}};
  slice.grammar = {3, true};
  const Result r = result(runner.run(messages::step_plan(1, {&slice, 1}, {})));
  REQUIRE_FALSE(r->error());
  // A byte-level vocabulary spells every byte: the grammar is never blocked there.
  CHECK_FALSE(r->sampled()->Get(0)->grammar_blocked());
  messages::SamplingFields bad = greedy();
  bad.grammar = "root ::= undefined";  // a worker that cannot compile it tells the sequence, not the step
  messages::SliceSpec other{4, 0, prompt, page1, true, &bad, {}, false, 0, {}};
  other.grammar = {3, true};
  const Result r2 = result(runner.run(messages::step_plan(2, {&other, 1}, {})));
  REQUIRE_FALSE(r2->error());
  CHECK(r2->sampled()->Get(0)->grammar_blocked());
}
