// The draft-model source (engine/speculation/model_drafter.h) on tiny
// synthetic model pairs: its drafts are the draft model's own continuation,
// it keeps what it computed and cuts what the target rejected, it lives
// within its pages, and with it speculative decoding is exact: greedy
// output equals the target's, and sampled output follows the target's
// distribution (chi-square over many seeded runs).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>

#include "engine/backend.h"
#include "engine/generator.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/page_pool.h"
#include "engine/speculation/acceptance.h"
#include "engine/speculation/model_drafter.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"

using namespace troupe;

namespace {

std::string model_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("troupe-drafter-" + name + ".gguf")).string();
}

std::unique_ptr<Backend> synthetic(const std::string& name, SyntheticModelSpec spec, int32_t kv_pages) {
  write_synthetic_model(spec, model_path(name));
  BackendOptions o;
  o.kv_pages = kv_pages;
  return open_backend(model_path(name), o);
}

SamplingParams sampling(float temperature, int32_t top_k, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

std::vector<int32_t> greedy_continuation(Backend& b, const Tokenizer& tok, std::span<const int32_t> history, int32_t n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.sampling = sampling(0, 0, 1);
  return generate(b, tok, history, o, {}).tokens;
}

}  // namespace

TEST_CASE("the draft model proposes its own greedy continuation, keeps its computed prefix and cuts rejected drafts") {
  SyntheticModelSpec spec;
  spec.seed = 21;
  auto draft = synthetic("greedy", spec, 64);
  Tokenizer tok(load_vocabulary(draft->file()));
  ModelDrafter drafter(*draft);
  std::vector<int32_t> history = tok.encode("the fox and the dog went to the", tok.add_bos_by_default(), false);
  const int32_t n = static_cast<int32_t>(history.size());

  ModelDrafter::Request r{7, history, 4, sampling(0, 0, 1)};
  auto p = drafter.propose(std::span(&r, 1));
  REQUIRE(p.size() == 1);
  CHECK(p[0].id == 7);
  CHECK(p[0].dists.empty());  // greedy drafts need no q
  const auto want = greedy_continuation(*draft, tok, history, 4);
  CHECK(p[0].tokens == want);
  CHECK(drafter.computed(7) == n + 3);  // the history and the first three drafts

  // The target kept one draft, then chose its own token: the drafter keeps
  // the history and that draft, drops the rest, and drafts from there.
  history.push_back(want[0]);
  history.push_back(want[1] == 5 ? 6 : 5);
  r.history = history;
  r.k = 3;
  p = drafter.propose(std::span(&r, 1));
  CHECK(p[0].tokens == greedy_continuation(*draft, tok, history, 3));
  CHECK(drafter.computed(7) == static_cast<int32_t>(history.size()) + 2);

  // The same history again: nothing new to compute, the same drafts.
  const auto again = drafter.propose(std::span(&r, 1));
  CHECK(again[0].tokens == p[0].tokens);

  drafter.forget(7);
  CHECK(drafter.sequences() == 0);
  CHECK(draft->pages().free_count() == draft->pages().capacity());
}

TEST_CASE("the draft model drafts many sequences in one batch and lives within its pages") {
  SyntheticModelSpec spec;
  spec.seed = 22;
  // 6 pages of 16: room for one 40-token sequence with its drafts, not two.
  auto draft = synthetic("pages", spec, 6);
  BackendOptions roomy;
  roomy.kv_pages = 64;
  auto reference = open_backend(model_path("pages"), roomy);  // the same model, for the expected drafts
  Tokenizer tok(load_vocabulary(draft->file()));
  ModelDrafter drafter(*draft, 32);  // catch-ups longer than 32 tokens take several forwards
  std::vector<std::vector<int32_t>> histories;
  for (const char* text : {"one two three four five six seven eight nine ten eleven twelve thirteen fourteen",
                           "a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f",
                           "the quick brown fox jumps over the lazy dog and then the quick brown fox"})
    histories.push_back(tok.encode(text, tok.add_bos_by_default(), false));
  for (const auto& h : histories) REQUIRE(h.size() > 32);

  std::vector<ModelDrafter::Request> batch;
  for (size_t i = 0; i < 2; ++i) batch.push_back({i + 1, histories[i], 3, sampling(0, 0, 1)});
  // Both fit together only when they are short; here the second finds no
  // pages (the first is part of the same call and is not evicted).
  std::vector<ModelDrafter::Request> small;
  for (size_t i = 0; i < 2; ++i)
    small.push_back({i + 10, std::span<const int32_t>(histories[i]).first(20), 3, sampling(0, 0, 1)});
  auto p = drafter.propose(small);
  for (size_t i = 0; i < 2; ++i) {
    INFO("sequence " << i);
    CHECK(p[i].tokens == greedy_continuation(*reference, tok, small[i].history, 3));
  }
  // A third sequence, alone, evicts the least recently used ones to fit.
  ModelDrafter::Request third{30, histories[2], 4, sampling(0, 0, 1)};
  p = drafter.propose(std::span(&third, 1));
  CHECK(p[0].tokens == greedy_continuation(*reference, tok, histories[2], 4));
  CHECK(drafter.computed(10) + drafter.computed(11) < 40);
  // Two long sequences in one call: the first gets the pages, the second none (no error).
  p = drafter.propose(batch);
  CHECK(p[0].tokens == greedy_continuation(*reference, tok, histories[0], 3));
  CHECK(p[1].tokens.empty());
  CHECK(draft->pages().used_count() <= draft->pages().capacity());
  // Malformed requests are refused with the reason.
  ModelDrafter::Request bad{40, histories[0], 9, sampling(0, 0, 1)};
  CHECK_THROWS_WITH(drafter.propose(std::span(&bad, 1)), Catch::Contains("asks for 9 tokens"));
  bad.k = 2;
  bad.history = {};
  CHECK_THROWS_WITH(drafter.propose(std::span(&bad, 1)), Catch::Contains("no tokens"));
}

TEST_CASE("a model with another vocabulary cannot draft for the target") {
  SyntheticModelSpec a, b;
  b.n_vocab = 1000;  // the same trained tokens, padded
  auto ta = synthetic("vocab-a", a, 8), tb = synthetic("vocab-b", b, 8);
  CHECK(draft_pair_mismatch(load_vocabulary(ta->file()), load_vocabulary(ta->file())).empty());
  CHECK_THAT(draft_pair_mismatch(load_vocabulary(ta->file()), load_vocabulary(tb->file())), Catch::Contains("tokens"));
}

TEST_CASE("generation with a draft model is token-identical to generation without, and takes fewer target steps") {
  SyntheticModelSpec spec;
  spec.seed = 23;
  auto target = synthetic("target", spec, 64);
  // Drafts from the same weights in 8 bits: close to the target, not equal.
  spec.weight_type = TensorType::Q8_0;
  auto close = synthetic("close", spec, 64);
  spec.weight_type = TensorType::F32;
  spec.seed = 24;
  auto other = synthetic("other", spec, 64);  // unrelated weights: drafts mostly rejected
  Tokenizer tok(load_vocabulary(target->file()));
  for (Backend* d : {close.get(), other.get()}) {
    ModelDrafter drafter(*d);
    for (const char* text : {"the fox and the dog and the", "Hello there, how are you today?"}) {
      INFO(text << (d == close.get() ? " (close draft)" : " (unrelated draft)"));
      const auto prompt = tok.encode(text, tok.add_bos_by_default(), false);
      GenerateOptions plain;
      plain.max_tokens = 40;
      plain.sampling = sampling(0, 0, 1);
      GenerateOptions spec_opts = plain;
      spec_opts.speculation = SpeculationMode::draft;
      spec_opts.max_draft = 4;
      spec_opts.drafter = &drafter;
      const auto want = generate(*target, tok, prompt, plain, {});
      const auto got = generate(*target, tok, prompt, spec_opts, {});
      CHECK(got.tokens == want.tokens);
      CHECK(got.speculation.drafted > 0);
      if (d == close.get()) CHECK(got.forward_steps < want.forward_steps);
      CHECK(target->pages().free_count() == target->pages().capacity());
      CHECK(drafter.sequences() == 0);  // generate() forgets its sequence
    }
  }
}

namespace {

// Pearson's chi-square of observed counts against expected probabilities,
// cells with fewer than 5 expected pooled into one, and the 0.001 critical
// value for cells - 1 degrees of freedom (Wilson-Hilferty).
struct ChiSquare {
  double chi2 = 0, critical = 0, total = 0;
  int cells = 0;
};
ChiSquare chi_square(const std::map<std::pair<int32_t, int32_t>, double>& expected,
                     std::map<std::pair<int32_t, int32_t>, double>& counts, int runs) {
  ChiSquare x;
  double pooled_expected = 0, pooled_count = 0;
  for (const auto& [cell, p] : expected) {
    const double e = p * runs, c = counts.count(cell) ? counts[cell] : 0.0;
    x.total += c;
    if (e < 5) {
      pooled_expected += e, pooled_count += c;
      continue;
    }
    x.chi2 += (c - e) * (c - e) / e;
    ++x.cells;
  }
  if (pooled_expected > 0)
    x.chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected, ++x.cells;
  const double df = x.cells - 1, z = 3.0902;
  x.critical = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  return x;
}

}  // namespace

TEST_CASE("sampling with a draft model that differs from the target follows the target's distribution (chi-square)") {
  SyntheticModelSpec spec;
  spec.seed = 25;
  spec.n_embd = 64;
  spec.n_head = 2;
  spec.n_head_kv = 1;
  spec.n_ff = 128;
  spec.n_layer = 1;
  auto target = synthetic("chi-target", spec, 16);
  spec.weight_type = TensorType::Q4_0;  // a coarser copy: its q is near p but not p
  spec.embedding_type = TensorType::Q4_0;
  auto draft = synthetic("chi-draft", spec, 64);
  Tokenizer tok(load_vocabulary(target->file()));
  const auto prompt = tok.encode("the fox", tok.add_bos_by_default(), false);
  const int32_t n = static_cast<int32_t>(prompt.size());
  const SamplingParams base = sampling(8.0f, 6, 0);  // random weights give peaked logits: flatten them

  // The exact joint distribution of the first two tokens under the target:
  // p(t1) p(t2 | t1), by the target's own sampler distribution.
  Logits logits;
  auto target_dist = [&](const std::vector<int32_t>& tokens) {
    KvSequence seq(target->pages(), target->page_size());
    REQUIRE(seq.reserve(static_cast<int32_t>(tokens.size())));
    Batch b;
    b.sequences.push_back({tokens, 0, seq.block_table(), LogitsWanted::last});
    target->forward(b, logits);
    Sampler s(base);
    return s.distribution(logits.row(0), tokens);
  };
  std::map<std::pair<int32_t, int32_t>, double> expected;
  for (const auto& [t1, p1] : target_dist(prompt)) {
    std::vector<int32_t> h = prompt;
    h.push_back(t1);
    for (const auto& [t2, p2] : target_dist(h)) expected[{t1, t2}] = static_cast<double>(p1) * p2;
  }

  // Speculative runs: the draft model proposes two tokens, the target
  // verifies them in one window; a second token missing from the window
  // comes from a plain target step.
  ModelDrafter drafter(*draft);
  constexpr int kRuns = 12000;
  std::map<std::pair<int32_t, int32_t>, double> counts;
  int64_t accepted = 0, rejected = 0;
  for (int run = 0; run < kRuns; ++run) {
    SamplingParams params = base;
    params.seed = 5000 + static_cast<uint64_t>(run);
    ModelDrafter::Request req{static_cast<uint64_t>(run), prompt, 2, params};
    const auto prop = drafter.propose(std::span(&req, 1)).front();
    drafter.forget(req.id);
    REQUIRE(prop.tokens.size() == 2);
    REQUIRE(prop.dists.size() == 2);
    std::vector<int32_t> window = prompt;
    window.insert(window.end(), prop.tokens.begin(), prop.tokens.end());
    KvSequence seq(target->pages(), target->page_size());
    REQUIRE(seq.reserve(n + 3));
    Batch b;
    b.sequences.push_back({window, 0, seq.block_table(), LogitsWanted::all});
    target->forward(b, logits);
    Sampler s(params);
    std::vector<int32_t> history = prompt;
    const Acceptance a = accept_drafts(
        s, prop.tokens, [&](int32_t i) { return logits.row(n - 1 + i); }, history, &prop.dists);
    accepted += a.accepted;
    rejected += a.accepted < 2;
    if (history.size() < static_cast<size_t>(n + 2)) {  // one token so far: the target samples the second
      Batch next;
      next.sequences.push_back({std::span<const int32_t>(history).last(1), n, seq.block_table(), LogitsWanted::last});
      target->forward(next, logits);
      history.push_back(s.sample(logits.row(0), history));
    }
    counts[{history[static_cast<size_t>(n)], history[static_cast<size_t>(n) + 1]}] += 1;
  }
  INFO("accepted " << accepted << " drafts, " << rejected << " windows with a rejection");
  CHECK(accepted > kRuns / 4);  // both paths are exercised
  CHECK(rejected > kRuns / 10);
  const ChiSquare x = chi_square(expected, counts, kRuns);
  CHECK(x.total == kRuns);  // every outcome lies in the target's support
  INFO("chi-square " << x.chi2 << " over " << x.cells << " cells; critical " << x.critical);
  CHECK(x.chi2 < x.critical);
}
