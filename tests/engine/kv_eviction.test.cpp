// KV eviction (engine/kv_eviction.h, engine/kv_budget.h): the choice of kept
// positions, the query ring, the rows moved, and the forward after an
// eviction against an independent construction of the same cache.
//
// On a one-layer model a token's K/V depend on nothing but the token and its
// position; with one KV head every query head keeps the same positions. The
// cache an eviction leaves can then be built without one: each kept token
// run alone into its slot at its original position (rope_offset), and the
// next token's logits must match.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "engine/backend.h"
#include "engine/cpu_backend.h"
#include "engine/generator.h"
#include "engine/kv_budget.h"
#include "engine/kv_cache.h"
#include "engine/kv_eviction.h"
#include "engine/model_config.h"
#include "engine/synthetic_model.h"
#include "tests/engine/max_rel_diff.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"

using namespace troupe;
using test::max_rel_diff;

namespace {

std::string eviction_model(const std::string& arch, int64_t n_layer, int64_t n_head_kv) {
  // Per process: CTest runs this file's cases in parallel, each writing its model.
  const auto path = std::filesystem::temp_directory_path() /
                    ("troupe-kv-eviction-" + arch + "-" + std::to_string(n_layer) + "-" + std::to_string(n_head_kv) + "-" +
                     std::to_string(getpid()) + ".gguf");
  SyntheticModelSpec spec;
  spec.n_layer = n_layer;
  spec.n_head_kv = n_head_kv;
  spec.seed = 43;
  spec.architecture = arch;
  write_synthetic_model(spec, path.string());
  return path.string();
}

std::vector<int32_t> text_tokens(int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 40 + (i * 13 + i / 7) % 150;
  return v;
}

}  // namespace

TEST_CASE("an eviction keeps the sinks, the window and the best-scored positions, pooled over neighbours") {
  EvictionPolicy p;
  p.budget = 128;
  p.sinks = 2;
  p.window = 4;
  p.pool = 3;
  std::vector<float> scores(40, 0.0f);
  scores[10] = 5.0f;  // its neighbours 9 and 11 share its pooled score
  scores[25] = 3.0f;
  scores[38] = 9.0f;  // in the window: kept anyway
  const auto kept = choose_kept(scores, 40, 2 + 4 + 4, p);
  // Four chosen: 10 and its two neighbours, then one of 24..26 (tied): the latest.
  CHECK(kept == std::vector<int32_t>{0, 1, 9, 10, 11, 26, 36, 37, 38, 39});
  CHECK(choose_kept(scores, 8, 10, p) == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  // Kept positions are ascending and distinct whatever the scores.
  std::vector<float> flat(300, 1.0f);
  const auto all_tied = choose_kept(flat, 300, 100, p);
  REQUIRE(all_tied.size() == 100);
  CHECK(std::adjacent_find(all_tied.begin(), all_tied.end(), std::greater_equal<>()) == all_tied.end());
}

TEST_CASE("an eviction's room and its refusals") {
  CHECK(EvictionPolicy{1024}.keep() == 896);
  CHECK(EvictionPolicy{128}.keep() == 96);
  CHECK_NOTHROW(EvictionPolicy{0}.check());
  CHECK_NOTHROW(EvictionPolicy{128}.check());
  CHECK_THROWS_WITH(EvictionPolicy{127}.check(), Catch::Contains("too small: at least 128"));
  EvictionPolicy even{256};
  even.pool = 4;
  CHECK_THROWS(even.check());
}

TEST_CASE("the query window holds the latest positions of every layer and forgets older ones") {
  QueryWindow w(2, 3, 4);
  const float a[] = {1, 2, 3}, b[] = {4, 5, 6};
  w.store(0, 9, a);
  w.store(1, 9, b);
  REQUIRE(w.find(1, 9));
  CHECK(w.find(1, 9)[2] == 6.0f);
  CHECK(w.find(0, 9)[0] == 1.0f);
  CHECK(w.find(0, 5) == nullptr);  // the same ring slot, another position
  w.store(0, 13, b);
  CHECK(w.find(0, 9) == nullptr);
  CHECK(w.find(0, 13)[0] == 4.0f);
  CHECK(w.find(2, 13) == nullptr);
}

TEST_CASE("after an eviction the next token's logits equal a cache built of the kept tokens alone, at their positions") {
  for (const std::string arch : {"qwen2", "llama"})
    for (const KvType type : {KvType::f16, KvType::q8_0, KvType::q4_0}) {
      INFO(arch << " " << kv_type_name(type));
      BackendOptions o;
      o.kv_pages = 64;
      o.kv_type = type;
      auto b = open_backend(eviction_model(arch, 1, 1), o);
      auto& cpu = dynamic_cast<CpuBackend&>(*b);
      const int32_t n = 300;
      const std::vector<int32_t> text = text_tokens(n);
      EvictionPolicy policy{128};
      QueryWindow queries(1, b->config().q_dim(), policy.window);
      KvSequence seq(b->pages(), b->page_size());
      REQUIRE(seq.reserve(n));
      Batch prefill;
      prefill.sequences.push_back({text, 0, seq.block_table(), LogitsWanted::none});
      prefill.sequences.back().queries = &queries;
      Logits logits;
      b->forward(prefill, logits);

      KvEviction e;
      e.src_table = e.dst_table = seq.block_table();
      e.length = n;
      e.keep = policy.keep();
      e.queries = &queries;
      e.policy = policy;
      std::vector<float> scores(static_cast<size_t>(n));
      REQUIRE(score_slots(cpu.cache(), b->config(), e, 0, 0, scores) == policy.window);
      const std::vector<int32_t> kept = choose_kept(scores, n, e.keep, policy);
      // What the kept slots hold before the move, row by row.
      const KvCache& cache = cpu.cache();
      const int32_t ps = cache.page_size();
      const auto row_bytes = [&](std::span<const int32_t> table, int32_t s) {
        const uint8_t* k = cache.key_row(0, table[static_cast<size_t>(s / ps)], s % ps, 0);
        const uint8_t* v = cache.value_row(0, table[static_cast<size_t>(s / ps)], s % ps, 0);
        return std::string(reinterpret_cast<const char*>(k), static_cast<size_t>(cache.key_row_bytes(0))) +
               std::string(reinterpret_cast<const char*>(v), static_cast<size_t>(cache.value_row_bytes()));
      };
      std::vector<std::string> before;
      for (int32_t p : kept) before.push_back(row_bytes(seq.block_table(), p));
      b->evict_kv(e);
      seq.truncate(e.keep);
      for (int32_t i = 0; i < e.keep; ++i) CHECK(row_bytes(seq.block_table(), i) == before[static_cast<size_t>(i)]);

      // The next token at position n, slot keep.
      const int32_t next = 77;
      REQUIRE(seq.reserve(e.keep + 1));
      Batch step;
      step.sequences.push_back({std::span(&next, 1), e.keep, seq.block_table(), LogitsWanted::last});
      step.sequences.back().rope_offset = n - e.keep;
      Logits evicted;
      b->forward(step, evicted);

      // The same cache without an eviction: each kept token alone at its position.
      KvSequence built(b->pages(), b->page_size());
      REQUIRE(built.reserve(e.keep + 1));
      for (int32_t i = 0; i < e.keep; ++i) {
        const int32_t p = kept[static_cast<size_t>(i)];
        Batch one;
        one.sequences.push_back({std::span(&text[static_cast<size_t>(p)], 1), i, built.block_table(), LogitsWanted::none});
        one.sequences.back().rope_offset = p - i;
        b->forward(one, logits);
      }
      Batch again;
      again.sequences.push_back({std::span(&next, 1), e.keep, built.block_table(), LogitsWanted::last});
      again.sequences.back().rope_offset = n - e.keep;
      Logits reference;
      b->forward(again, reference);
      CHECK(max_rel_diff(evicted.row(0), reference.row(0)) < 2e-3f);
    }
}

TEST_CASE("RoPE turns queries and keys alike by a sequence's offset: scores see distances, not positions") {
  BackendOptions o;
  o.kv_pages = 16;
  auto b = open_backend(eviction_model("qwen2", 2, 2), o);
  const std::vector<int32_t> text = text_tokens(40);
  std::vector<Logits> out(2);
  for (const int32_t offset : {0, 1000}) {
    KvSequence seq(b->pages(), b->page_size());
    REQUIRE(seq.reserve(40));
    Batch batch;
    batch.sequences.push_back({text, 0, seq.block_table(), LogitsWanted::last});
    batch.sequences.back().rope_offset = offset;
    b->forward(batch, out[offset ? 1 : 0]);
  }
  CHECK(max_rel_diff(out[1].row(0), out[0].row(0)) < 1e-3f);
}

TEST_CASE("a generation under a KV budget never holds more than the budget after its prompt, and without need never evicts") {
  BackendOptions o;
  o.kv_pages = 64;
  const std::string path = eviction_model("qwen2", 2, 2);
  auto b = open_backend(path, o);
  const Tokenizer tok(load_vocabulary(b->file()));
  const std::vector<int32_t> prompt = text_tokens(200);
  GenerateOptions g;
  g.max_tokens = 300;
  g.sampling.temperature = 0.0f;
  int32_t most = 0;
  GenerateCallbacks cb;
  cb.on_kv = [&](std::span<const int32_t>, int32_t computed) { most = computed; };
  const GenerateResult plain = generate(*b, tok, prompt, g, cb);
  g.eviction.budget = 1024;  // more than the run needs
  const GenerateResult roomy = generate(*b, tok, prompt, g, cb);
  CHECK(roomy.evictions == 0);
  CHECK(roomy.tokens == plain.tokens);

  g.eviction.budget = 128;
  int32_t held_most = 0, seen = 0, held_end = 0;
  cb.on_kv = [&](std::span<const int32_t>, int32_t computed) { held_end = computed; };
  // After the first token (which the prompt's whole cache computes): pages in use.
  cb.on_token = [&](int32_t) {
    if (seen++ > 0) held_most = std::max(held_most, b->pages().used_count() * b->page_size());
  };
  const GenerateResult tight = generate(*b, tok, prompt, g, cb);
  CHECK(tight.evictions > 1);
  CHECK(held_end + tight.evicted == static_cast<int32_t>(prompt.size() + tight.tokens.size()) - 1);
  CHECK(held_end <= g.eviction.budget);
  // Pages: the budget, and a partly filled one.
  CHECK(held_most <= g.eviction.budget + b->page_size());
  CHECK(tight.tokens.size() == 300);
  // Deterministic: the same run, the same tokens.
  CHECK(generate(*b, tok, prompt, g, {}).tokens == tight.tokens);
}

TEST_CASE("a backend or model without eviction refuses a budget before it runs") {
  BackendOptions o;
  o.kv_pages = 64;
  auto b = open_backend(eviction_model("gemma3", 1, 1), o);
  CHECK_FALSE(b->can_evict_kv());
  CHECK_THROWS_WITH(KvBudget(*b, EvictionPolicy{256}), Catch::Contains("sliding-window"));
  CHECK_NOTHROW(KvBudget(*b, EvictionPolicy{}));
}
