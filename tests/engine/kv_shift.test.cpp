// Context shifts (Backend::shift_kv): cached KV moved to other positions,
// keys turned by RoPE. On a one-layer model a token's K/V depend on nothing
// but the token and its position, so after a shift the next token's logits
// must equal a fresh prefill of the same tokens at their new positions; the
// tolerance is the KV type's own rounding (re-encoding the turned keys).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/synthetic_model.h"
#include "tests/engine/max_rel_diff.h"

using namespace troupe;
using test::max_rel_diff;

namespace {

// qwen2 has key biases (a key offset), llama adjacent RoPE pairs, and
// gemma3's one layer is a sliding-window layer, whose keys turn at the local
// base (10,000, not the file's 1,000,000): a shift must turn them by that;
// bloom's (ALiBi) keys carry no position: a shift moves them and no more.
std::string one_layer_model(const std::string& arch) {
  // Per process: CTest runs this file's cases in parallel, each writing its model.
  const auto path = std::filesystem::temp_directory_path() /
                    ("troupe-kv-shift-" + arch + "-" + std::to_string(getpid()) + ".gguf");
  SyntheticModelSpec spec;
  spec.n_layer = 1;
  spec.seed = 41;
  spec.architecture = arch;
  write_synthetic_model(spec, path.string());
  return path.string();
}

std::vector<int32_t> tokens(int32_t n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = first + (i * 7) % 90;
  return v;
}

}  // namespace

TEST_CASE("after a context shift, the next token's logits equal a fresh prefill of the kept tokens at their new positions") {
  struct Case {
    KvType type;
    float tolerance;  // the rounding of the turned keys as the type stores them
  };
  for (const std::string arch : {"qwen2", "llama", "gemma3", "bloom"})
    for (const Case c : {Case{KvType::f16, 2e-4f}, Case{KvType::q8_0, 2e-3f}, Case{KvType::k8v4, 2e-3f},
                         Case{KvType::q4_0, 1e-2f}}) {
      BackendOptions o;
      o.kv_pages = 32;
      o.kv_type = c.type;
      auto b = open_backend(one_layer_model(arch), o);
      const int32_t sink = 16, dropped = 40, kept = 37;
      // The history: sink, then tokens to drop, then tokens to keep.
      std::vector<int32_t> history = tokens(sink, 60);
      const auto drop = tokens(dropped, 100), keep = tokens(kept, 150);
      history.insert(history.end(), drop.begin(), drop.end());
      history.insert(history.end(), keep.begin(), keep.end());
      KvSequence old(b->pages(), b->page_size());
      REQUIRE(old.reserve(static_cast<int32_t>(history.size())));
      Batch prefill;
      prefill.sequences.push_back({history, 0, old.block_table(), LogitsWanted::none});
      Logits logits;
      b->forward(prefill, logits);

      // The shifted sequence: the sink's KV copied as it is, the kept tokens' moved left.
      std::vector<int32_t> moved = tokens(sink, 60);
      moved.insert(moved.end(), keep.begin(), keep.end());
      KvSequence shifted(b->pages(), b->page_size());
      REQUIRE(shifted.reserve(static_cast<int32_t>(moved.size()) + 1));
      const KvShift shifts[] = {{old.block_table(), 0, shifted.block_table(), 0, sink, 0},
                                {old.block_table(), sink + dropped, shifted.block_table(), sink, kept, -dropped}};
      b->shift_kv(shifts);
      const int32_t next[] = {77};
      Batch step;
      step.sequences.push_back({next, static_cast<int32_t>(moved.size()), shifted.block_table(), LogitsWanted::last});
      b->forward(step, logits);
      const std::vector<float> after(logits.values.begin(), logits.values.end());

      // A fresh prefill of the same tokens, then the same next token.
      std::vector<int32_t> fresh_tokens = moved;
      fresh_tokens.push_back(next[0]);
      KvSequence fresh(b->pages(), b->page_size());
      REQUIRE(fresh.reserve(static_cast<int32_t>(fresh_tokens.size())));
      Batch full;
      full.sequences.push_back({fresh_tokens, 0, fresh.block_table(), LogitsWanted::last});
      b->forward(full, logits);
      const float diff = max_rel_diff(after, logits.values);
      INFO(kv_type_name(c.type) << ", " << arch << ": largest logit difference " << diff
                                << " of the largest logit");
      CHECK(diff < c.tolerance);
    }
}

TEST_CASE("a shift within one block table moves overlapping positions without reading what it already wrote") {
  BackendOptions o;
  o.kv_pages = 16;
  auto b = open_backend(one_layer_model("qwen2"), o);
  const auto t = tokens(48, 70);
  KvSequence seq(b->pages(), b->page_size());
  REQUIRE(seq.reserve(64));
  Batch prefill;
  prefill.sequences.push_back({t, 0, seq.block_table(), LogitsWanted::none});
  Logits logits;
  b->forward(prefill, logits);
  // Right by 5, then back left by 5: the keys come back to within half-precision rounding.
  const KvShift right[] = {{seq.block_table(), 0, seq.block_table(), 5, 48, 5}};
  b->shift_kv(right);
  const KvShift left[] = {{seq.block_table(), 5, seq.block_table(), 0, 48, -5}};
  b->shift_kv(left);
  const int32_t next[] = {77};
  Batch step;
  step.sequences.push_back({next, 48, seq.block_table(), LogitsWanted::last});
  b->forward(step, logits);
  const std::vector<float> after(logits.values.begin(), logits.values.end());
  std::vector<int32_t> all = t;
  all.push_back(77);
  KvSequence fresh(b->pages(), b->page_size());
  REQUIRE(fresh.reserve(64));
  Batch full;
  full.sequences.push_back({all, 0, fresh.block_table(), LogitsWanted::last});
  b->forward(full, logits);
  CHECK(max_rel_diff(after, logits.values) < 2e-3f);
  const KvShift outside[] = {{seq.block_table(), 60, seq.block_table(), 0, 10, -60}};
  CHECK_THROWS_AS(b->shift_kv(outside), std::out_of_range);
}
