// Speculative decoding in the engine: the n-gram drafter, acceptance
// (greedy: exactly greedy decoding; sampled: exactly the target's
// distribution, by a chi-square test), the controller's choices, and
// generation with speculation equal to generation without.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "engine/backend.h"
#include "engine/generator.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/page_pool.h"
#include "engine/speculation/acceptance.h"
#include "engine/speculation/controller.h"
#include "engine/speculation/ngram_drafter.h"
#include "engine/speculation/suffix_tree.h"
#include "engine/synthetic_model.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"

using namespace troupe;

TEST_CASE("the n-gram drafter proposes what followed the most recent earlier occurrence of the tail") {
  NgramDrafter d(3, 2);
  const std::vector<int32_t> h{1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3};
  // Tail "1 2 3" occurred at 0 (followed by 4 5 9); "2 3" more recently at 6 (7 8), but longer n-grams win.
  CHECK(d.propose(h, 3) == std::vector<int32_t>{4, 5, 9});
  CHECK(d.propose(h, 1) == std::vector<int32_t>{4});
  const std::vector<int32_t> h2{5, 2, 3, 7, 8, 9, 2, 3};
  CHECK(d.propose(h2, 4) == std::vector<int32_t>{7, 8, 9, 2});
  // A recent match continues its period: "4 4 4" → 4 4 4 4; "1 2 1 2" → 1 2 1 2.
  CHECK(d.propose(std::vector<int32_t>{9, 4, 4, 4}, 4) == std::vector<int32_t>{4, 4, 4, 4});
  CHECK(d.propose(std::vector<int32_t>{7, 1, 2, 1, 2}, 4) == std::vector<int32_t>{1, 2, 1, 2});
  CHECK(d.propose(std::vector<int32_t>{1, 2, 3, 4}, 4).empty());  // nothing recurs
  CHECK(d.propose(h, 0).empty());
}

namespace {

// Logit rows where row i's argmax is argmax[i].
std::vector<std::vector<float>> rows_with_argmax(const std::vector<int32_t>& argmax, int32_t vocab) {
  std::vector<std::vector<float>> rows;
  for (int32_t a : argmax) {
    std::vector<float> r(static_cast<size_t>(vocab), 0.0f);
    r[static_cast<size_t>(a)] = 5.0f;
    rows.push_back(r);
  }
  return rows;
}

SamplingParams plain(float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

}  // namespace

TEST_CASE("greedy acceptance keeps the drafts that match the argmax, then the target's own token") {
  Sampler s(plain(0, 1));
  auto rows = rows_with_argmax({3, 4, 6, 1}, 8);
  std::vector<int32_t> history{9};
  auto row = [&](int32_t i) { return std::span<float>(rows[static_cast<size_t>(i)]); };
  const std::vector<int32_t> drafts{3, 4, 5};
  const Acceptance a = accept_drafts(s, drafts, row, history);
  CHECK(a.accepted == 2);
  CHECK(a.next == 6);
  CHECK(history == std::vector<int32_t>{9, 3, 4, 6});
  rows = rows_with_argmax({3, 4, 5, 1}, 8);
  history = {9};
  const Acceptance all = accept_drafts(s, drafts, row, history);
  CHECK(all.accepted == 3);
  CHECK(all.next == 1);  // every draft kept: the bonus token from the last row
}

TEST_CASE("a lenient acceptance ratio keeps a greedy draft nearly as likely as the argmax, and only those") {
  // Row 0: argmax 3 (logit 2.0); the draft 5 at 1.5 has p(5)/p(3) = exp(-0.5) = 0.607.
  std::vector<std::vector<float>> rows(3, std::vector<float>(8, 0.0f));
  rows[0][3] = 2.0f, rows[0][5] = 1.5f;
  rows[1][4] = 2.0f, rows[1][2] = 0.0f;  // the next draft, 2, is exp(-2) = 0.135 of the top
  rows[2][1] = 1.0f;
  auto row = [&](int32_t i) { return std::span<float>(rows[static_cast<size_t>(i)]); };
  const std::vector<int32_t> drafts{5, 2};
  auto run = [&](float ratio) {
    SamplingParams p = plain(0, 1);
    p.accept_ratio = ratio;
    Sampler s(p);
    std::vector<int32_t> history{9};
    return std::make_pair(accept_drafts(s, drafts, row, history), history);
  };
  const auto [exact, h1] = run(1.0f);  // exactly greedy: 5 is not the argmax
  CHECK(exact.accepted == 0);
  CHECK(exact.next == 3);
  const auto [lenient, h2] = run(0.6f);  // 0.607 >= 0.6: kept; 0.135 < 0.6: the target's 4
  CHECK(lenient.accepted == 1);
  CHECK(lenient.next == 4);
  CHECK(h2 == std::vector<int32_t>{9, 5, 4});
  const auto [strict, h3] = run(0.61f);  // just above the ratio: not kept
  CHECK(strict.accepted == 0);
  const auto [loose, h4] = run(0.1f);  // both kept, then the last row's argmax
  CHECK(loose.accepted == 2);
  CHECK(loose.next == 1);
  // Out of (0, 1], or below 1 on a sampled request: refused with the reason.
  SamplingParams bad = plain(0, 1);
  bad.accept_ratio = 0.0f;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("accept_ratio"));
  bad.accept_ratio = 1.5f;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("accept_ratio"));
  bad = plain(0.8f, 1);
  bad.accept_ratio = 0.5f;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("greedy"));
}

TEST_CASE("sampled acceptance follows the target distribution exactly, with point-mass and model drafts (chi-square)") {
  // Target: p0 at the first position, p1 at the second (temperature 1, no cuts).
  const std::vector<float> l0{1.0f, 0.2f, -0.5f, 0.7f, 0.0f}, l1{-1.0f, 0.5f, 0.3f, 0.0f, 1.2f};
  auto softmax = [](const std::vector<float>& l) {
    std::vector<double> p(l.size());
    double z = 0;
    for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(static_cast<double>(l[i]));
    for (auto& v : p) v /= z;
    return p;
  };
  const auto p0 = softmax(l0), p1 = softmax(l1);
  // Drafts: d1 = 3 (not the target's favourite), d2 = 1; a draft model with its own q.
  const std::vector<int32_t> fixed{3, 1};
  const std::vector<Sampler::Distribution> q{{{3, 0.6f}, {0, 0.2f}, {2, 0.2f}}, {{1, 0.5f}, {4, 0.5f}}};
  for (const bool model : {false, true}) {
    INFO((model ? "draft-model q" : "point-mass drafts"));
    constexpr int kRuns = 40000;
    std::vector<double> first(5, 0), second(5, 0);
    int second_n = 0;
    std::mt19937 draft_rng(77);
    auto draw_q = [&](const Sampler::Distribution& d) {
      float u = std::uniform_real_distribution<float>(0.0f, 1.0f)(draft_rng), acc = 0;
      for (const auto& [t, p] : d)
        if (u < (acc += p)) return t;
      return d.back().first;
    };
    for (int r = 0; r < kRuns; ++r) {
      Sampler s(plain(1.0f, 1000 + static_cast<uint64_t>(r)));
      // A draft model's tokens are drawn from its q; n-gram drafts are fixed (q a point mass).
      const std::vector<int32_t> drafts = model ? std::vector<int32_t>{draw_q(q[0]), draw_q(q[1])} : fixed;
      std::vector<std::vector<float>> rows{l0, l1, l0};
      std::vector<int32_t> history{0};
      const Acceptance a = accept_drafts(
          s, drafts, [&](int32_t i) { return std::span<float>(rows[static_cast<size_t>(i)]); }, history,
          model ? &q : nullptr);
      first[static_cast<size_t>(history[1])] += 1;
      if (a.accepted >= 1) {  // the second token came from this window too: given the first, it must follow p1
        second[static_cast<size_t>(history[2])] += 1;
        ++second_n;
      }
    }
    auto chi2 = [](const std::vector<double>& counts, const std::vector<double>& p, double n) {
      double x = 0;
      for (size_t i = 0; i < p.size(); ++i) x += (counts[i] - n * p[i]) * (counts[i] - n * p[i]) / (n * p[i]);
      return x;
    };
    // 4 degrees of freedom: the 0.001 critical value is 18.47.
    CHECK(chi2(first, p0, kRuns) < 18.47);
    REQUIRE(second_n > 1000);
    CHECK(chi2(second, p1, second_n) < 18.47);
  }
}

TEST_CASE("the step cost model keeps small steps apart from prefill chunks") {
  StepCostModel m;
  CHECK(m.ms(1) > 0);  // a guess before anything is measured
  m.observe(1, 33.0);
  // One size seen: each further token is assumed to cost half its per-token time.
  CHECK(m.extra_ms(1, 2) == Approx(33.0).epsilon(0.01));
  // Decode and verify steps at 16 ms a token, prefill chunks at 7 ms a token.
  for (int i = 0; i < 20; ++i) {
    for (int n = 1; n <= 5; ++n) m.observe(n, 17.0 + 16.0 * n);
    m.observe(256, 17.0 + 7.0 * 256);
  }
  CHECK(m.extra_ms(1, 4) == Approx(64.0).epsilon(0.01));  // not 4 x 7: a window costs what small steps cost
  CHECK(m.ms(3) == Approx(65.0).epsilon(0.01));
  CHECK(m.ms(256) == Approx(17.0 + 7.0 * 256).epsilon(0.01));
  CHECK(m.ms(100) > m.ms(5));
  CHECK(m.ms(100) < m.ms(256));
  m.observe(0, 5.0);  // nothing to learn from
  m.observe(3, -1.0);
  CHECK(m.ms(3) == Approx(65.0).epsilon(0.01));
}

TEST_CASE("the controller speculates when it pays and turns itself down when it does not") {
  StepCostModel cpu;  // a 2-core CPU: 15 ms a step plus 7 ms a token
  for (int i = 0; i < 40; ++i) cpu.observe(1 + i % 8, 15.0 + 7.0 * (1 + i % 8));
  CHECK(cpu.ms(1) == Approx(22.0).epsilon(0.01));
  CHECK(cpu.extra_ms(1, 4) == Approx(28.0).epsilon(0.01));
  CHECK(cpu.ms(64) == Approx(15.0 + 7.0 * 64).epsilon(0.01));  // beyond what was seen: the last slope

  SpeculationController verbatim(SpeculationMode::ngram, 8);
  for (int i = 0; i < 10; ++i) verbatim.observe(DraftSource::ngram, 6, 6);  // copying its input
  const auto alone = verbatim.choose(8, 1, cpu);
  CHECK(alone.source == DraftSource::ngram);
  CHECK(alone.k == 8);
  CHECK(verbatim.choose(3, 1, cpu).k == 3);  // no more than the drafter has

  SpeculationController moderate(SpeculationMode::automatic, 8);
  for (int i = 0; i < 10; ++i) moderate.observe(DraftSource::ngram, 6, 4);  // ~80 % per token
  const auto one = moderate.choose(8, 1, cpu);
  CHECK(one.k >= 3);
  CHECK(one.k <= 6);
  CHECK(moderate.choose(8, 64, cpu).k == 0);  // a full, compute-bound batch: the longer step costs everyone more

  SpeculationController bad(SpeculationMode::automatic, 8);
  for (int i = 0; i < 10; ++i) bad.observe(DraftSource::ngram, 4, 0);  // free prose: nothing accepted
  int speculated = 0;
  for (int i = 0; i < 64; ++i) speculated += bad.choose(8, 1, cpu).k > 0;
  CHECK(speculated == 2);  // only the probes, one drafted token every 32 steps

  // A fixed source speculates whenever it has drafts, with the k that loses least.
  SpeculationController fixed(SpeculationMode::ngram, 8);
  for (int i = 0; i < 10; ++i) fixed.observe(DraftSource::ngram, 4, 0);
  CHECK(fixed.choose(8, 1, cpu).k == 1);
  CHECK(fixed.choose(0, 1, cpu).k == 0);

  // The draft model: its time per drafted token counts against it.
  SpeculationController model(SpeculationMode::automatic, 8, true);
  for (int i = 0; i < 10; ++i) model.observe(DraftSource::model, 4, 3);  // ~75 % per token
  CHECK(model.choose(0, 1, cpu, 2.0).source == DraftSource::model);  // a draft 10x cheaper than a step: pays
  CHECK(model.choose(0, 1, cpu, 2.0).k >= 2);
  CHECK(model.choose(0, 1, cpu, 40.0).k == 0);  // a draft as slow as the target: never pays
  // ...and so does its catch-up on the tokens it has not read: a sequence far
  // behind (n-gram windows since its last model window) waits for n-grams.
  DraftCatchUpCost catch_up;
  CHECK(catch_up.ms(40) == 0.0);  // nothing measured: no cost assumed
  catch_up.observe(24.0, 12);     // 2 ms a token
  catch_up.observe(-1.0, 5);      // nothing to learn from
  catch_up.observe(3.0, 0);
  CHECK(catch_up.ms(40) == Approx(80.0));
  CHECK(catch_up.ms(-3) == 0.0);
  CHECK(model.choose(0, 1, cpu, 2.0, 0, catch_up.ms(2)).source == DraftSource::model);  // just behind: pays
  CHECK(model.choose(0, 1, cpu, 2.0, 0, catch_up.ms(40)).k == 0);                      // 80 ms behind: does not
  catch_up.observe(10.0, 2);  // 5 ms a token now: the estimate moves 30 % of the way
  CHECK(catch_up.ms(10) == Approx(29.0));
  // Probes of the draft model (nothing else to draft): only where it would
  // clearly pay at 95 % acceptance, since a probe also costs its catch-up.
  StepCostModel cpu15;  // the 1.5B on 2 cores: ~33 ms a step, ~8 ms a token more
  for (int i = 0; i < 40; ++i) cpu15.observe(1 + i % 8, 25.0 + 8.0 * (1 + i % 8));
  const auto model_windows = [&cpu15](double draft_ms) {
    SpeculationController c(SpeculationMode::automatic, 8, true);
    int windows = 0;
    for (int i = 0; i < 64; ++i) windows += c.choose(0, 1, cpu15, draft_ms).source == DraftSource::model;
    return windows;
  };
  CHECK(model_windows(14.0) == 0);  // the 0.5B drafting for the 1.5B here: ~0.28 tokens a step at best, never tried
  CHECK(model_windows(2.0) == 64);  // a cheap draft pays even at the prior's 40 %: used from the start
  SpeculationController no_model(SpeculationMode::draft, 8, false);
  CHECK(no_model.choose(8, 1, cpu, 2.0).k == 0);  // draft mode without a draft model: nothing

  SpeculationController off(SpeculationMode::off, 8);
  CHECK(off.choose(8, 1, cpu).k == 0);
}

namespace {
// A synthetic model of `seed` written to a file of that name and opened.
std::unique_ptr<Backend> synthetic_backend(uint64_t seed, const char* file, int32_t kv_pages = 64) {
  const auto path = std::filesystem::temp_directory_path() / file;
  SyntheticModelSpec spec;
  spec.seed = seed;
  write_synthetic_model(spec, path.string());
  BackendOptions o;
  o.kv_pages = kv_pages;
  return open_backend(path.string(), o);
}
}  // namespace

TEST_CASE("generation with n-gram speculation is token-identical to generation without, and takes fewer steps") {
  auto backend = synthetic_backend(8, "troupe-speculation-test.gguf");
  Tokenizer tok(load_vocabulary(backend->file()));
  int saved_steps = 0;
  for (const char* text : {"the fox and the dog and the fox and the dog and the", "one two three one two three one two",
                           "Hello there, how are you today?"}) {
    INFO(text);
    const auto prompt = tok.encode(text, tok.add_bos_by_default(), false);
    GenerateOptions plain_opts;
    plain_opts.max_tokens = 48;
    plain_opts.sampling.temperature = 0;
    GenerateOptions spec_opts = plain_opts;
    spec_opts.speculation = SpeculationMode::automatic;
    spec_opts.max_draft = 6;
    const auto want = generate(*backend, tok, prompt, plain_opts, {});
    const auto got = generate(*backend, tok, prompt, spec_opts, {});
    CHECK(got.tokens == want.tokens);
    CHECK(got.finish == want.finish);
    CHECK(backend->pages().free_count() == backend->pages().capacity());  // rolled back, nothing leaked
    saved_steps += want.forward_steps - got.forward_steps;
  }
  CHECK(saved_steps > 0);
}

TEST_CASE("after rejected drafts are rolled back, the KV cache and the pages equal a run without speculation") {
  auto backend = synthetic_backend(8, "troupe-speculation-rollback.gguf", 32);
  Tokenizer tok(load_vocabulary(backend->file()));
  const auto prompt = tok.encode("the fox and the dog", tok.add_bos_by_default(), false);
  const auto vocab = static_cast<int32_t>(backend->config().n_vocab);
  const int32_t ps = backend->page_size();
  const auto slot_values = backend->config().n_head_kv * backend->config().head_dim;
  const auto page_values = static_cast<size_t>(backend->config().n_layer * ps * slot_values);
  constexpr int kTokens = 40;

  // Greedy decode of kTokens, each step verifying `wrong` drafts that are
  // (almost always) rejected; returns the tokens and the K/V of every
  // computed position, as FP16 bit patterns.
  auto run = [&](int32_t wrong, int64_t& rejected) {
    KvSequence seq(backend->pages(), ps);
    Sampler sampler(plain(0, 1));
    std::vector<int32_t> history(prompt.begin(), prompt.end());
    REQUIRE(seq.reserve(static_cast<int32_t>(prompt.size())));
    Logits logits;
    Batch pre;
    pre.sequences.push_back({prompt, 0, seq.block_table(), LogitsWanted::last});
    backend->forward(pre, logits);
    int32_t token = sampler.sample(logits.row(0), history);
    while (static_cast<int32_t>(history.size() - prompt.size()) < kTokens) {
      history.push_back(token);
      const int32_t pos = static_cast<int32_t>(history.size()) - 1;
      std::vector<int32_t> window{token};
      for (int32_t i = 1; i <= wrong; ++i) window.push_back((token + 7 * i) % vocab);
      REQUIRE(seq.reserve(pos + 1 + wrong));
      Batch step;
      step.sequences.push_back({window, pos, seq.block_table(), wrong ? LogitsWanted::all : LogitsWanted::last});
      backend->forward(step, logits);
      const auto drafts = std::span<const int32_t>(window).subspan(1);
      std::vector<int32_t> h = history;
      const Acceptance a = accept_drafts(sampler, drafts, [&](int32_t i) { return logits.row(i); }, h);
      rejected += wrong - a.accepted;
      seq.truncate(pos + 1 + a.accepted);
      history.insert(history.end(), drafts.begin(), drafts.begin() + a.accepted);
      token = a.next;
    }
    // K/V of positions [0, history.size()): all computed.
    std::vector<uint16_t> kv, k(page_values), v(page_values);
    for (size_t p = 0; p < history.size(); ++p) {
      if (p % static_cast<size_t>(ps) == 0) backend->read_page(seq.block_table()[p / static_cast<size_t>(ps)], k, v);
      for (int64_t l = 0; l < backend->config().n_layer; ++l)
        for (int64_t j = 0; j < slot_values; ++j) {
          const size_t at = static_cast<size_t>((l * ps + static_cast<int64_t>(p % static_cast<size_t>(ps))) * slot_values + j);
          kv.push_back(k[at]);
          kv.push_back(v[at]);
        }
    }
    return std::make_pair(history, kv);
  };
  int64_t none = 0, rejected = 0;
  const auto plain_run = run(0, none);
  const auto spec_run = run(3, rejected);
  CHECK(rejected > 20);  // drafts were rejected and rolled back, step after step
  CHECK(spec_run.first == plain_run.first);
  CHECK(spec_run.second == plain_run.second);  // bit for bit
  CHECK(backend->pages().free_count() == backend->pages().capacity());
}

TEST_CASE("generation with suffix speculation from a history of earlier outputs is token-identical, in fewer steps") {
  auto backend = synthetic_backend(9, "troupe-suffix-speculation-test.gguf");
  Tokenizer tok(load_vocabulary(backend->file()));
  SuffixTree history;
  for (const char* text : {"Summary of paper one: the method", "Summary of paper two: the method", "Hello there"}) {
    INFO(text);
    const auto prompt = tok.encode(text, tok.add_bos_by_default(), false);
    GenerateOptions plain_opts;
    plain_opts.max_tokens = 40;
    plain_opts.sampling.temperature = 0;
    GenerateOptions spec_opts = plain_opts;
    spec_opts.speculation = SpeculationMode::suffix;
    spec_opts.max_draft = 6;
    spec_opts.history = &history;
    const auto want = generate(*backend, tok, prompt, plain_opts, {});
    const auto got = generate(*backend, tok, prompt, spec_opts, {});
    CHECK(got.tokens == want.tokens);
    CHECK(got.finish == want.finish);
    CHECK(backend->pages().free_count() == backend->pages().capacity());
    // The same prompt again, with this output in the history: nearly every
    // draft is right, so far fewer forwards.
    history.add(want.tokens);
    const auto again = generate(*backend, tok, prompt, spec_opts, {});
    CHECK(again.tokens == want.tokens);
    CHECK(again.speculation.last_source == DraftSource::suffix);
    CHECK(again.forward_steps < want.forward_steps * 2 / 3);
  }
}

TEST_CASE("the controller weighs suffix drafts by their own acceptance: fixed in mode suffix, against n-gram in auto") {
  StepCostModel cpu;
  for (int i = 0; i < 40; ++i) cpu.observe(1 + i % 8, 15.0 + 7.0 * (1 + i % 8));
  SpeculationController fixed(SpeculationMode::suffix, 8);
  CHECK(fixed.choose({8, 3}, 1, cpu).source == DraftSource::suffix);  // never n-gram in mode suffix
  CHECK(fixed.choose({8, 0}, 1, cpu).k == 0);
  SpeculationController automatic(SpeculationMode::automatic, 8);
  for (int i = 0; i < 10; ++i) {
    automatic.observe(DraftSource::suffix, 6, 6);  // history repeats itself
    automatic.observe(DraftSource::ngram, 6, 0);   // the prompt does not
  }
  CHECK(automatic.acceptance(DraftSource::suffix) > 0.9);
  CHECK(automatic.acceptance(DraftSource::ngram) < 0.2);
  const auto choice = automatic.choose({8, 8}, 1, cpu);
  CHECK(choice.source == DraftSource::suffix);
  CHECK(choice.k == 8);
  CHECK(std::string(draft_source_name(DraftSource::suffix)) == "suffix");
  // Counted by source (auto mixes them), as /metrics reports them.
  const SpeculationStats& st = automatic.stats();
  CHECK(st.by_source[static_cast<size_t>(DraftSource::suffix)].drafted == 60);
  CHECK(st.by_source[static_cast<size_t>(DraftSource::suffix)].accepted == 60);
  CHECK(st.by_source[static_cast<size_t>(DraftSource::ngram)].drafted == 60);
  CHECK(st.by_source[static_cast<size_t>(DraftSource::ngram)].accepted == 0);
  CHECK(st.drafted == 120);
}

TEST_CASE("a controller started from an earlier sequence's acceptance drafts as that one ended, and soon learns its own") {
  StepCostModel cpu;
  for (int i = 0; i < 40; ++i) cpu.observe(1 + i % 8, 15.0 + 7.0 * (1 + i % 8));
  SpeculationController earlier(SpeculationMode::automatic, 8);
  for (int i = 0; i < 10; ++i) earlier.observe(DraftSource::suffix, 8, 8);  // the session copies itself
  const AcceptanceEstimates learned = earlier.estimates();

  SpeculationController fresh(SpeculationMode::automatic, 8);
  SpeculationController next(SpeculationMode::automatic, 8, false, &learned);
  CHECK(fresh.acceptance(DraftSource::suffix) == Approx(0.4));  // the default prior
  CHECK(next.acceptance(DraftSource::suffix) == Approx(earlier.acceptance(DraftSource::suffix)));
  CHECK(next.acceptance(DraftSource::ngram) == Approx(0.4));  // a source the earlier one never drafted from
  CHECK(fresh.choose({8, 8}, 1, cpu).k < 8);
  const auto first = next.choose({8, 8}, 1, cpu);
  CHECK(first.source == DraftSource::suffix);
  CHECK(first.k == 8);  // its first window is a long one

  // The prior weighs as kPriorTries tries: a window rejected at its first
  // draft brings the estimate down by a fifth, three such to under half.
  const double before = next.acceptance(DraftSource::suffix);
  next.observe(DraftSource::suffix, 8, 0);
  CHECK(next.acceptance(DraftSource::suffix) < before * 0.8);
  next.observe(DraftSource::suffix, 8, 0);
  next.observe(DraftSource::suffix, 8, 0);
  CHECK(next.acceptance(DraftSource::suffix) < 0.5);

  // A damaged prior (more kept than tried, not a number) leaves the default.
  AcceptanceEstimates bad{};
  bad[static_cast<size_t>(DraftSource::suffix)] = {5.0, 2.0};
  bad[static_cast<size_t>(DraftSource::ngram)] = {std::nan(""), 3.0};
  SpeculationController guarded(SpeculationMode::automatic, 8, false, &bad);
  CHECK(guarded.acceptance(DraftSource::suffix) == Approx(0.4));
  CHECK(guarded.acceptance(DraftSource::ngram) == Approx(0.4));
}
