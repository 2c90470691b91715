// KV tiers in the engine: the INT8 page codec, moving pages out of and back
// into a backend (restore equals recompute within the codec's error), the
// identity that keys stored pages, and the prefix cache adopting restored
// pages and dropping idle ones.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "engine/backend.h"
#include "engine/cpu/half.h"
#include "engine/gguf_file.h"
#include "engine/kv_cache.h"
#include "engine/kv_page_codec.h"
#include "engine/model_config.h"
#include "engine/model_identity.h"
#include "engine/schedule/prefix_cache.h"
#include "engine/synthetic_model.h"

using namespace troupe;

namespace {

std::string model_file(uint64_t seed) {
  const auto path = std::filesystem::temp_directory_path() / ("troupe-kv-tiers-" + std::to_string(seed) + ".gguf");
  SyntheticModelSpec spec;
  spec.seed = seed;
  write_synthetic_model(spec, path.string());
  return path.string();
}

}  // namespace

TEST_CASE("the INT8 page codec is within half a step of every value and half the size of FP16") {
  const KvPageShape shape{3, 16, 2, 64};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<uint16_t> k(static_cast<size_t>(shape.values())), v(k.size());
  for (auto& x : k) x = cpu::fp32_to_fp16(normal(rng));
  for (auto& x : v) x = cpu::fp32_to_fp16(normal(rng) * 0.1f);
  k[5] = cpu::fp32_to_fp16(40.0f);  // an outlier sets its row's scale only
  const std::string bytes = encode_kv_page(shape, k, v);
  CHECK(static_cast<int64_t>(bytes.size()) == shape.encoded_bytes());
  CHECK(static_cast<double>(bytes.size()) / static_cast<double>(2 * shape.values() * 2) < 0.52);
  std::vector<uint16_t> k2(k.size()), v2(v.size());
  REQUIRE(decode_kv_page(shape, bytes, k2, v2));
  for (const auto* pair : {&k, &v}) {
    const auto& in = *pair;
    const auto& out = pair == &k ? k2 : v2;
    for (size_t row = 0; row < in.size() / 64; ++row) {
      float amax = 0;
      for (size_t i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(cpu::fp16_to_fp32(in[row * 64 + i])));
      for (size_t i = 0; i < 64; ++i) {
        const float err = std::fabs(cpu::fp16_to_fp32(in[row * 64 + i]) - cpu::fp16_to_fp32(out[row * 64 + i]));
        REQUIRE(err <= amax / 254.0f * 1.01f + 1e-3f * amax + 1e-7f);  // half a step, plus FP16 rounding
      }
    }
  }
  // Anything else is refused, outputs untouched.
  const KvPageShape other{3, 16, 2, 32};
  std::vector<uint16_t> small(static_cast<size_t>(other.values()));
  CHECK_FALSE(decode_kv_page(other, bytes, small, small));
  CHECK_FALSE(decode_kv_page(shape, bytes.substr(0, bytes.size() - 1), k2, v2));
  std::string bad = bytes;
  bad[0] = 'X';
  CHECK_FALSE(decode_kv_page(shape, bad, k2, v2));
}

TEST_CASE("the swap codec is lossless") {
  const KvPageShape shape{2, 16, 2, 32};
  std::mt19937 rng(9);
  std::vector<uint16_t> k(static_cast<size_t>(shape.values())), v(k.size());
  for (auto& x : k) x = static_cast<uint16_t>(rng() & 0x7bff);  // any finite halves
  for (auto& x : v) x = static_cast<uint16_t>(rng() & 0xfbff);
  const std::string bytes = encode_kv_page(shape, k, v, KvPageCodec::fp16);
  CHECK(static_cast<int64_t>(bytes.size()) == shape.encoded_bytes(KvPageCodec::fp16));
  std::vector<uint16_t> k2(k.size()), v2(v.size());
  REQUIRE(decode_kv_page(shape, bytes, k2, v2));
  CHECK(k2 == k);
  CHECK(v2 == v);
}

TEST_CASE("pages restored into a fresh backend give the logits of the recomputed ones, within the codec's error") {
  const auto [codec, tolerance] = GENERATE(std::make_pair(KvPageCodec::int8, 0.005f), std::make_pair(KvPageCodec::k8v4, 0.02f),
                                           std::make_pair(KvPageCodec::fp16, 0.0f));
  const std::string path = model_file(11);
  BackendOptions o;
  o.kv_pages = 16;
  auto a = open_backend(path, o);
  auto b = open_backend(path, o);
  REQUIRE(a->can_transfer_pages());
  const int32_t ps = a->page_size();
  std::vector<int32_t> prompt(static_cast<size_t>(3 * ps));
  std::mt19937 rng(3);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(a->config().n_vocab));
  KvSequence sa(a->pages(), ps), sb(b->pages(), ps);
  REQUIRE(sa.reserve(3 * ps + 1));
  REQUIRE(sb.reserve(3 * ps + 1));
  Logits la, lb;
  Batch prefill;
  prefill.sequences.push_back({prompt, 0, sa.block_table(), LogitsWanted::none});
  a->forward(prefill, la);
  // Move the three prompt pages from a into b (b's pages are other ids).
  for (int i = 0; i < 3; ++i)
    REQUIRE(import_kv_page(*b, sb.block_table()[i], export_kv_page(*a, sa.block_table()[i], codec)));
  const std::vector<int32_t> next{prompt[5]};
  Batch da, db;
  da.sequences.push_back({next, 3 * ps, sa.block_table(), LogitsWanted::last});
  db.sequences.push_back({next, 3 * ps, sb.block_table(), LogitsWanted::last});
  a->forward(da, la);
  b->forward(db, lb);
  float worst = 0, scale = 0;
  for (int64_t i = 0; i < a->config().n_vocab; ++i) {
    worst = std::max(worst, std::fabs(la.row(0)[i] - lb.row(0)[i]));
    scale = std::max(scale, std::fabs(la.row(0)[i]));
  }
  INFO("codec " << static_cast<int>(codec) << ": worst logit difference " << worst << " of max |logit| " << scale);
  // docs/TESTING.md: 0.5% of the largest logit for INT8 (measured 0.08%), 2% for k8v4, exact for the swap codec.
  CHECK(worst <= tolerance * scale);
  const auto argmax = [](std::span<const float> r) { return std::max_element(r.begin(), r.end()) - r.begin(); };
  CHECK(argmax(la.row(0)) == argmax(lb.row(0)));
}

TEST_CASE("a quantized cache's pages move as they are: restored, they give the same logits bit for bit") {
  const KvType type = GENERATE(KvType::q8_0, KvType::k8v4, KvType::q4_0);
  REQUIRE(swap_codec(type) == KvPageCodec::raw);
  const std::string path = model_file(12);
  BackendOptions o;
  o.kv_pages = 16;
  o.kv_type = type;
  auto a = open_backend(path, o);
  auto b = open_backend(path, o);
  const int32_t ps = a->page_size();
  std::vector<int32_t> prompt(static_cast<size_t>(2 * ps));
  std::mt19937 rng(5);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(a->config().n_vocab));
  KvSequence sa(a->pages(), ps), sb(b->pages(), ps);
  REQUIRE(sa.reserve(2 * ps + 1));
  REQUIRE(sb.reserve(2 * ps + 1));
  Logits la, lb;
  Batch prefill;
  prefill.sequences.push_back({prompt, 0, sa.block_table(), LogitsWanted::none});
  a->forward(prefill, la);
  for (int i = 0; i < 2; ++i) {
    const std::string bytes = export_kv_page(*a, sa.block_table()[i], KvPageCodec::raw);
    CHECK(static_cast<int64_t>(bytes.size()) ==
          KvPageShape::of(a->config(), ps, type).encoded_bytes(KvPageCodec::raw));
    REQUIRE(import_kv_page(*b, sb.block_table()[i], bytes));
  }
  const std::vector<int32_t> next{prompt[3]};
  Batch da, db;
  da.sequences.push_back({next, 2 * ps, sa.block_table(), LogitsWanted::last});
  db.sequences.push_back({next, 2 * ps, sb.block_table(), LogitsWanted::last});
  a->forward(da, la);
  b->forward(db, lb);
  CHECK(std::equal(la.row(0).begin(), la.row(0).end(), lb.row(0).begin()));
  // A page of another KV type is refused, and the cache is left as it was.
  BackendOptions other = o;
  other.kv_type = type == KvType::q8_0 ? KvType::k8v4 : KvType::q8_0;
  auto c = open_backend(path, other);
  CHECK_FALSE(import_kv_page(*c, 0, export_kv_page(*a, sa.block_table()[0], KvPageCodec::raw)));
  BackendOptions f16 = o;
  f16.kv_type = KvType::f16;
  auto d = open_backend(path, f16);
  CHECK_FALSE(import_kv_page(*d, 0, export_kv_page(*a, sa.block_table()[0], KvPageCodec::raw)));
}

TEST_CASE("stored KV is keyed by the model file's bytes and the KV layout") {
  const auto f1 = GgufFile::open(model_file(21));
  const auto f1_again = GgufFile::open(model_file(21));
  const auto f2 = GgufFile::open(model_file(22));  // same shapes, other weights
  const ModelConfig c = read_model_config(f1);
  CHECK(kv_identity(f1, c, 16).model == kv_identity(f1_again, c, 16).model);
  CHECK(kv_identity(f1, c, 16).model != kv_identity(f2, read_model_config(f2), 16).model);
  CHECK(kv_identity(f1, c, 16).layout != kv_identity(f1, c, 32).layout);
  ModelConfig scaled = c;
  scaled.rope_freq_scale = 0.5f;
  CHECK(kv_identity(f1, c, 16).layout != kv_identity(f1, scaled, 16).layout);
  CHECK(kv_identity(f1, c, 16).key_prefix().size() == 16);
}

TEST_CASE("the prefix cache adopts restored pages once, matches them, and drops them when idle") {
  PagePool pool(6);
  PrefixCache cache(pool, 4);
  std::vector<int32_t> tokens(14);
  std::iota(tokens.begin(), tokens.end(), 100);
  const auto fill = cache.adopt(tokens, 3);
  REQUIRE(fill.size() == 3);
  CHECK(fill[0].first == 0);
  CHECK(fill[2].first == 2);
  CHECK(cache.adopt(tokens, 3).empty());  // already cached: nothing to write
  auto hit = cache.match(tokens, 8);
  CHECK(hit.size() == 3);
  CHECK(hit[1] == fill[1].second);
  CHECK(cache.drop(tokens) == 0);  // in use by the matching sequence
  for (int32_t p : hit) pool.release(p);
  CHECK(cache.drop(tokens) == 3);
  CHECK(pool.free_count() == 6);
  // A full pool: adopting evicts unreferenced cached pages, and stops when none can go.
  std::vector<int32_t> held;
  for (int i = 0; i < 5; ++i) held.push_back(*pool.allocate());
  CHECK(cache.adopt(tokens, 3).size() == 1);
  for (int32_t p : held) pool.release(p);
}

TEST_CASE("the k8v4 codec keeps keys within half an INT8 step and values within half an INT4 step, at 0.40 of FP16") {
  const KvPageShape shape{2, 16, 2, 64};
  REQUIRE(shape.supports(KvPageCodec::k8v4));
  CHECK_FALSE(KvPageShape{2, 16, 2, 48}.supports(KvPageCodec::k8v4));
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> k(static_cast<size_t>(shape.values())), v(k.size());
  for (auto& x : k) x = cpu::fp32_to_fp16(normal(rng));
  for (auto& x : v) x = cpu::fp32_to_fp16(normal(rng));
  const std::string bytes = encode_kv_page(shape, k, v, KvPageCodec::k8v4);
  CHECK(static_cast<int64_t>(bytes.size()) == shape.encoded_bytes(KvPageCodec::k8v4));
  CHECK(static_cast<double>(bytes.size()) / static_cast<double>(2 * shape.values() * 2) < 0.41);
  std::vector<uint16_t> k2(k.size()), v2(v.size());
  REQUIRE(decode_kv_page(shape, bytes, k2, v2));
  auto check_groups = [](const std::vector<uint16_t>& in, const std::vector<uint16_t>& out, size_t group, float steps) {
    for (size_t g = 0; g < in.size() / group; ++g) {
      float amax = 0;
      for (size_t i = 0; i < group; ++i) amax = std::max(amax, std::fabs(cpu::fp16_to_fp32(in[g * group + i])));
      for (size_t i = 0; i < group; ++i)
        REQUIRE(std::fabs(cpu::fp16_to_fp32(in[g * group + i]) - cpu::fp16_to_fp32(out[g * group + i])) <=
                amax / (2 * steps) * 1.01f + 1e-3f * amax + 1e-7f);
    }
  };
  check_groups(k, k2, 64, 127);
  check_groups(v, v2, 32, 7);
}
