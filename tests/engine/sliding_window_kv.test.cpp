// Sliding-window KV: a local layer's rows live in local slots that go back
// once no window reaches their page (engine/page_pool.h, engine/kv_cache.h).
// What is kept must give the very logits a cache keeping every layer gives,
// and what is given back must stay bounded however long a sequence runs.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "engine/backend.h"
#include "engine/generator.h"
#include "engine/kv_cache.h"
#include "engine/kv_page_codec.h"
#include "engine/model.h"
#include "engine/schedule/batch_planner.h"
#include "engine/synthetic_model.h"
#include "random_data.h"
#include "engine/vocabulary.h"
#include "engine/tokenizer.h"
#include "planner_steps.h"

using namespace troupe;
using troupe::test::random_tokens;

namespace {

constexpr int32_t kWindow = 24;

// Five sliding-window layers (window 24) and a global one.
std::string gemma_file() {
  const auto path = std::filesystem::temp_directory_path() /
                    ("troupe-sliding-window-kv-" + std::to_string(getpid()) + ".gguf");
  SyntheticModelSpec spec;
  spec.architecture = "gemma3";
  spec.weight_type = TensorType::F32;
  spec.embedding_type = TensorType::F32;
  spec.n_layer = 6;
  spec.sliding_window = kWindow;
  spec.seed = 7;
  write_synthetic_model(spec, path.string());
  return path.string();
}

// Prefills `prefill` tokens in chunks of `chunk`, then decodes the rest one
// a step, giving local slots back behind the window after every step when
// the cache has them; the logits of every step's last row, and the most
// local slots held at once.
struct Run {
  std::vector<float> logits;
  int32_t most_local = 0;
};
Run run(Model& m, KvCache& cache, const std::vector<int32_t>& tokens, int32_t prefill, int32_t chunk) {
  KvSequence seq(cache);
  Run r;
  Logits out;
  auto forward = [&](int32_t pos, int32_t len) {
    REQUIRE(seq.reserve(pos + len));
    Batch b;
    b.sequences.push_back({std::span(tokens).subspan(static_cast<size_t>(pos), static_cast<size_t>(len)), pos,
                           seq.block_table(), LogitsWanted::last});
    m.forward(b, cache, out);
    r.logits.insert(r.logits.end(), out.values.begin(), out.values.end());
    r.most_local = std::max(r.most_local, cache.pool().local_used_count());
    seq.drop_local_behind(pos + len, kWindow);
  };
  for (int32_t pos = 0; pos < prefill; pos += chunk) forward(pos, std::min(chunk, prefill - pos));
  for (auto pos = prefill; pos < static_cast<int32_t>(tokens.size()); ++pos) forward(pos, 1);
  return r;
}

// A planner over pages of 4 tokens with local slots and a window.
struct WindowedPlanner {
  PagePool pool;
  BatchPlanner p;
  WindowedPlanner(int32_t pages, int32_t local, int32_t budget, int32_t window)
      : pool(pages, local), p(pool, 4, limits(budget, window)) {}
  static PlannerLimits limits(int32_t budget, int32_t window) {
    PlannerLimits l;
    l.token_budget = budget;
    l.window = window;
    return l;
  }
};

}  // namespace

TEST_CASE("local slots: a page takes one when allocated and gives it back when dropped or freed") {
  PagePool pool(8, 3);
  CHECK(pool.local_capacity() == 3);
  pool.record_local_changes(true);
  const int32_t a = *pool.allocate(), b = *pool.allocate();
  const int32_t c = *pool.allocate(false);  // restored behind a window: no local rows
  CHECK(pool.has_local(a));
  CHECK(pool.has_local(b));
  CHECK_FALSE(pool.has_local(c));
  CHECK(pool.local_slot(a) != pool.local_slot(b));
  CHECK(pool.allocatable() == 1);
  const int32_t d = *pool.allocate();
  CHECK(pool.allocatable() == 0);
  CHECK_FALSE(pool.allocate().has_value());        // no local slot left
  CHECK(pool.allocate(false).has_value());          // a page without one still
  pool.drop_local(a);
  CHECK_FALSE(pool.has_local(a));
  CHECK(pool.local_free_count() == 1);
  pool.retain(d);
  pool.release(d);
  CHECK(pool.has_local(d));  // still held
  pool.release(d);
  CHECK(pool.local_free_count() == 2);  // freed with its page
  const auto changes = pool.take_local_changes();
  REQUIRE(changes.size() == 6);  // the start, a, b and d given slots, a's dropped, d's freed
  CHECK(changes.front() == std::pair<int32_t, int32_t>{-1, -1});  // the mirror starts over
  CHECK(changes[4] == std::pair<int32_t, int32_t>{a, -1});
  CHECK(changes[5] == std::pair<int32_t, int32_t>{d, -1});
  PagePool mirror(8, 3);
  for (const auto& [page, slot] : changes)
    if (page >= 0) mirror.set_local(page, slot);
  for (int32_t p = 0; p < 8; ++p) CHECK(mirror.local_slot(p) == pool.local_slot(p));
  CHECK_THROWS_AS(mirror.set_local(0, 3), std::out_of_range);
  // After a failed step the front end sends everything again: the start, then every slot held.
  pool.resend_local_slots();
  const auto again = pool.take_local_changes();
  REQUIRE(again.size() == 2);
  CHECK(again[0] == std::pair<int32_t, int32_t>{-1, -1});
  CHECK(again[1] == std::pair<int32_t, int32_t>{b, pool.local_slot(b)});
  CHECK_THROWS_AS(PagePool(4, 5), std::invalid_argument);
}

TEST_CASE("sliding-window KV: giving back local slots changes no logit, and a long sequence holds a bounded number") {
  const std::string path = gemma_file();
  auto m = Model::load(path, 2);
  const auto tokens = random_tokens(420, m->config().n_vocab, 3);
  for (const int32_t page_size : {16, 8}) {  // 8: a kernel block spans two pages, one of them given back
    for (const int32_t chunk : {1, 40, 200}) {
      CAPTURE(page_size, chunk);
      const int32_t pages = static_cast<int32_t>(tokens.size()) / page_size + 2;
      KvCache full(m->config(), pages, page_size);
      const int32_t bound = local_pages_for(1, kWindow, chunk, page_size);
      KvCache windowed(m->config(), pages, page_size, KvType::f16, bound);
      REQUIRE(windowed.pool().local_capacity() == bound);
      CHECK(windowed.bytes() < full.bytes());
      const Run a = run(*m, full, tokens, 64, chunk);
      const Run b = run(*m, windowed, tokens, 64, chunk);
      CHECK(b.logits == a.logits);  // bit for bit
      CHECK(b.most_local <= bound);
      CHECK(b.most_local < pages / 4);  // 420 tokens: the window is a small part of them
      CHECK(a.most_local == 0);
    }
  }
  std::filesystem::remove(path);
}

TEST_CASE("sliding-window KV: a page behind the window exports flagged, and imports only its global layers") {
  const std::string path = gemma_file();
  BackendOptions o;
  o.threads = 1;
  o.kv_pages = 40;
  o.window_sequences = 1;
  o.window_chunk = 16;
  auto backend = open_backend(path, o);
  REQUIRE(backend->pages().local_capacity() > 0);
  REQUIRE(backend->pages().local_capacity() < 40);
  const auto tokens = random_tokens(160, backend->config().n_vocab, 5);
  KvSequence seq(backend->pages(), backend->page_size());
  Logits out;
  for (int32_t pos = 0; pos < 160; pos += 16) {
    REQUIRE(seq.reserve(pos + 16));
    Batch b;
    b.sequences.push_back({std::span(tokens).subspan(static_cast<size_t>(pos), 16), pos, seq.block_table(), LogitsWanted::last});
    backend->forward(b, out);
    seq.drop_local_behind(pos + 16, kWindow);
  }
  const auto table = seq.block_table();
  const std::string old_page = export_kv_page(*backend, table[0], KvPageCodec::fp16);
  const std::string last_page = export_kv_page(*backend, table.back(), KvPageCodec::fp16);
  CHECK_FALSE(kv_page_has_local_rows(old_page));
  CHECK(kv_page_has_local_rows(last_page));
  CHECK_FALSE(kv_page_has_local_rows(export_kv_page(*backend, table[0], KvPageCodec::raw)));
  // Into a page without local rows: the global layers land, no local slot is touched.
  const auto target = backend->pages().allocate(false);
  REQUIRE(target);
  const int32_t local_before = backend->pages().local_used_count();
  REQUIRE(import_kv_page(*backend, *target, last_page));
  CHECK(backend->pages().local_used_count() == local_before);
  CHECK_FALSE(kv_page_has_local_rows(export_kv_page(*backend, *target, KvPageCodec::fp16)));
  const std::string again = export_kv_page(*backend, *target, KvPageCodec::raw);
  const std::string original = export_kv_page(*backend, table.back(), KvPageCodec::raw);
  // Layer 5 (global) equals the original page's; layer 0 (local) reads as zeros.
  const auto& c = backend->config();
  const size_t layer_bytes = static_cast<size_t>(16 * c.n_head_kv * c.head_dim * 2 * 2);
  const size_t header = again.size() - 6 * layer_bytes;
  CHECK(again.substr(header + 5 * layer_bytes) == original.substr(header + 5 * layer_bytes));
  CHECK(again.substr(header, layer_bytes) == std::string(layer_bytes, '\0'));
  backend->pages().release(*target);
  // A page without its local rows is refused where they would be kept: into a page with a
  // slot, and into a cache that keeps every layer in every page.
  const auto slotted = backend->pages().allocate();
  REQUIRE(slotted);
  CHECK_FALSE(import_kv_page(*backend, *slotted, old_page));
  CHECK(import_kv_page(*backend, *slotted, last_page));
  backend->pages().release(*slotted);
  BackendOptions full_options = o;
  full_options.window_sequences = 0;
  auto full = open_backend(path, full_options);
  CHECK_FALSE(import_kv_page(*full, 0, old_page));
  CHECK(import_kv_page(*full, 0, last_page));
  std::filesystem::remove(path);
}

TEST_CASE("sliding-window KV: generate holds one window of local slots and writes what a full cache writes") {
  const std::string path = gemma_file();
  std::vector<std::vector<int32_t>> outputs;
  for (const int32_t sequences : {0, 1}) {
    BackendOptions o;
    o.threads = 2;
    o.kv_pages = 64;
    o.window_sequences = sequences;
    o.window_chunk = 256 + 9;
    auto backend = open_backend(path, o);
    const Tokenizer tokenizer(load_vocabulary(backend->file()));
    CHECK((backend->pages().local_capacity() > 0) == (sequences > 0));
    const auto prompt = random_tokens(300, backend->config().n_vocab, 9);
    GenerateOptions g;
    g.max_tokens = 200;
    g.speculation = SpeculationMode::ngram;  // verify windows roll back rejected drafts too
    for (int32_t t = 0; t < backend->config().n_vocab; ++t)  // a random model: let nothing end it early
      if (tokenizer.is_end_of_generation(t)) g.sampling.logit_bias.emplace_back(t, -100.0f);
    int32_t most = 0;
    GenerateCallbacks cb;
    cb.on_token = [&](int32_t) { most = std::max(most, backend->pages().local_used_count()); };
    const GenerateResult r = generate(*backend, tokenizer, prompt, g, cb);
    if (sequences > 0) {
      CHECK(most <= local_pages_for(1, kWindow, o.window_chunk, o.page_size));
      CHECK(most < static_cast<int32_t>(prompt.size() + r.tokens.size()) / o.page_size / 2);
    }
    outputs.push_back(r.tokens);
  }
  CHECK(outputs[0] == outputs[1]);
  std::filesystem::remove(path);
}

TEST_CASE("sliding-window planner: local slots stay bounded, a finished turn's window stays for the next, and a prefix without it is cut") {
  using test::prompt;
  using test::step;
  WindowedPlanner w(200, 30, 32, 16);
  PagePool& pool = w.pool;
  BatchPlanner& p = w.p;
  REQUIRE(p.add(1, Priority::interactive, prompt(100), 400) == BatchPlanner::AddResult::accepted);
  int32_t most = 0;
  for (int i = 0; i < 300; ++i) {
    step(p);
    most = std::max(most, pool.local_used_count());
  }
  const int32_t computed = p.find(1)->computed;
  CHECK(computed > 300);
  // Window 16 and two pages more, a step's chunk of 32 and a partial page: 4 + 2 + 8 + 1 pages of 4 tokens.
  CHECK(most <= 16);
  CHECK(p.stats().local_pages_used == pool.local_used_count());
  std::vector<int32_t> history = p.find(1)->tokens;
  history.resize(static_cast<size_t>(computed));
  p.finish(1);
  const int32_t kept = pool.local_used_count();
  CHECK(kept > 0);  // the finished sequence's window, kept by the prefix cache
  CHECK(kept <= 8);
  // Its next turn starts from the whole history: the window is there.
  auto next = history;
  next.push_back(900);
  next.push_back(901);
  REQUIRE(p.add(2, Priority::interactive, next, 4) == BatchPlanner::AddResult::accepted);
  step(p);
  CHECK(p.find(2)->cached_prompt_tokens == computed / 4 * 4);
  p.finish(2);
  // A prompt that leaves the history early finds no local rows at its end's
  // window: it starts from the last prefix whose window still has them
  // (none so far back), and computes the rest.
  auto branch = history;
  branch.resize(120);
  branch.push_back(902);
  REQUIRE(p.add(3, Priority::interactive, branch, 4) == BatchPlanner::AddResult::accepted);
  step(p);
  CHECK(p.find(3)->cached_prompt_tokens == 0);
  while (p.find(3)->computed < static_cast<int32_t>(branch.size())) step(p);
  CHECK(pool.local_used_count() <= 30);
}

TEST_CASE("sliding-window planner: local rows a pending shift reads outlast the settling until released") {
  using test::prompt;
  using test::step;
  WindowedPlanner w(100, 40, 16, 8);
  PagePool& pool = w.pool;
  BatchPlanner& p = w.p;
  REQUIRE(p.add(1, Priority::interactive, prompt(20), 60) == BatchPlanner::AddResult::accepted);
  while (p.find(1)->computed < 24) step(p);
  // Its last full page is in its window now; a shift is planned to read it.
  const std::vector<int32_t> history(p.find(1)->tokens.begin(), p.find(1)->tokens.begin() + 24);
  const std::vector<int32_t> source = p.retain_prefix(history, 6);
  REQUIRE(source.size() == 6);
  const int32_t last = source.back();
  REQUIRE(pool.has_local(last));
  p.hold_local(source);
  while (p.find(1)->computed < 56) step(p);  // the window moved far past it
  CHECK(pool.has_local(last));
  p.release_local(source);
  p.release_pages(source);
  step(p);
  CHECK_FALSE(pool.has_local(last));
}

TEST_CASE("sliding-window planner: a sequence short of local slots preempts or waits like one short of pages") {
  using test::prompt;
  using test::step;
  WindowedPlanner w(400, 24, 16, 16);  // pages for all, local slots for about two windows
  PagePool& pool = w.pool;
  BatchPlanner& p = w.p;
  for (uint64_t id = 1; id <= 4; ++id)
    REQUIRE(p.add(id, Priority::interactive, prompt(40, static_cast<int32_t>(id) * 1000), 60) ==
            BatchPlanner::AddResult::accepted);
  int finished = 0;
  for (int i = 0; i < 2000 && finished < 4; ++i) {
    step(p);
    CHECK(pool.local_used_count() <= 24);
    for (uint64_t id = 1; id <= 4; ++id)
      if (const PlannedSequence* s = p.find(id); s && s->generated() >= 60) {
        p.finish(id);
        ++finished;
      }
  }
  CHECK(finished == 4);
}
