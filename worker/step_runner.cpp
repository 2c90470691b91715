#include "worker/step_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/grammar/constraint.h"
#include "engine/grammar/matcher.h"
#include "engine/kv_eviction.h"
#include "engine/kv_page_codec.h"
#include "engine/model_config.h"
#include "engine/model_identity.h"
#include "engine/page_pool.h"
#include "engine/sampler.h"
#include "engine/speculation/acceptance.h"
#include "engine/token_logprobs.h"
#include "engine/tokenizer.h"
#include "engine/vocabulary.h"
#include "messages/step_frames.h"
#include "worker/front_shares.h"
#include "worker/sequence_sampling.h"

namespace troupe::worker {
namespace {

using wire::step::StepPlan;

std::string who(uint64_t seq) { return "sequence " + std::to_string(seq); }

}  // namespace

struct StepRunner::Impl {
  struct SequenceSampler {
    Sampler sampler;
    std::vector<int32_t> history;
    bool logprobs = false;
    // Constrained decoding: the matcher has taken every token before
    // position `fed` from grammar_start on (history, then what this worker
    // decided ahead of the next slice: its sampled and forced tokens).
    std::optional<grammar::Matcher> matcher;
    size_t fed = 0;
    bool jump_forward = true;
    bool blocked = false;  // the grammar allows nothing (or the history broke it)
    int32_t top = 0;       // with logprobs: most likely tokens reported per position
    // Under a KV budget: its latest queries, which score its next eviction.
    std::optional<QueryWindow> queries;
  };
  static constexpr size_t kMaxForced = 32;  // jump-forward tokens per step
  static constexpr int32_t kMaxQueryWindow = 1024;  // latest queries kept per sequence for eviction
  // A slice that wants a token: where its logits rows are and what they judge.
  struct Wanting {
    uint64_t sequence = 0;
    int32_t drafts = 0;                 // 0: a plain next token
    std::span<const int32_t> window;    // the drafted tokens
    std::vector<Sampler::Distribution> q;  // the draft model's q per draft (empty: fixed drafts)
  };

  using Samplers = std::unordered_map<uint64_t, SequenceSampler>;

  std::shared_ptr<Backend> backend;
  messages::WorkerInfo info;  // kv_pages and instance: those of the current plan's share
  FrontShares shares;
  std::unordered_map<uint64_t, Samplers> samplers_of;  // by front end: sequence ids are each front end's own
  Samplers* samplers = nullptr;                          // the current plan's front end's
  int32_t first_page = 0;                                // where its share starts
  std::vector<std::vector<int32_t>> tables;              // its block tables in the worker's page numbers
  Logits logits;
  std::vector<float> original;
  // Grammars: the vocabulary's trie (built on first use), compiled grammars
  // by text, and one index (automaton and masks) per grammar in use.
  std::shared_ptr<const grammar::TokenTrie> trie;
  std::unique_ptr<Tokenizer> tokenizer;
  grammar::GrammarCache grammars;
  std::unordered_map<std::string, std::shared_ptr<grammar::GrammarIndex>> indexes;
  static constexpr size_t kMaxIndexes = 16;  // grammars whose masks a worker keeps (64 MiB each at most)

  Impl(std::shared_ptr<Backend> b, int32_t fronts, std::chrono::milliseconds front_idle)
      : backend(std::move(b)), shares(backend->pages().capacity(), fronts, front_idle) {}

  // A front end sized for another worker must not touch pages out of its
  // share; a page it names is translated to the worker's numbering.
  int32_t page_of(int32_t page) const {
    if (page < 0 || page >= info.kv_pages)
      throw std::out_of_range("KV page " + std::to_string(page) + " outside this worker's " + std::to_string(info.kv_pages) +
                              " pages");
    return first_page + page;
  }
  std::span<const int32_t> table_of(const flatbuffers::Vector<int32_t>& pages) {
    std::vector<int32_t>& t = tables.emplace_back();
    t.reserve(pages.size());
    for (int32_t page : pages) t.push_back(page_of(page));
    return t;
  }

  // Exports and swap-outs first: a page this step reuses still holds what left.
  void export_pages(const StepPlan& plan, std::vector<messages::PageBytes>& exported,
                    std::vector<messages::PageBytes>& swapped) const {
    if (plan.exports()) {
      const auto codec = static_cast<KvPageCodec>(plan.export_codec());
      for (int32_t page : *plan.exports()) {
        const int32_t at = page_of(page);
        if (codec != KvPageCodec::int8 && codec != KvPageCodec::k8v4 && codec != KvPageCodec::raw &&
            codec != KvPageCodec::fp16)
          throw std::invalid_argument("unknown KV export codec " + std::to_string(plan.export_codec()));
        exported.push_back({page, export_kv_page(*backend, at, codec)});
      }
    }
    if (plan.swap_outs())
      for (int32_t page : *plan.swap_outs())
        swapped.push_back({page, export_kv_page(*backend, page_of(page), swap_codec(backend->kv_type()))});
  }

  // Which page holds which local slot, as the front end's pool decided.
  void set_local_slots(const StepPlan& plan) const {
    if (!plan.local_slots()) return;
    PagePool& pool = backend->pages();
    for (const auto* l : *plan.local_slots()) {
      if (l->page() == -1) {  // the front end starts over
        for (int32_t p = 0; p < pool.capacity(); ++p) pool.set_local(p, -1);
        continue;
      }
      pool.set_local(page_of(l->page()), l->slot());
    }
  }

  void import_pages(const StepPlan& plan) const {
    if (!plan.imports()) return;
    for (const auto* p : *plan.imports()) {
      const int32_t at = page_of(p->page());
      const auto* d = p->data();
      if (!d || !import_kv_page(*backend, at, std::string_view(reinterpret_cast<const char*>(d->data()), d->size())))
        throw std::invalid_argument("KV page " + std::to_string(p->page()) + " to restore is not in this model's layout");
    }
  }

  void shift(const StepPlan& plan) {
    if (!plan.shifts() || plan.shifts()->size() == 0) return;
    std::vector<KvShift> shifts;
    for (const auto* sh : *plan.shifts()) {
      if (!sh->src_table() || !sh->dst_table()) throw std::invalid_argument("KV shift without its block tables");
      shifts.push_back({table_of(*sh->src_table()), sh->src_start(), table_of(*sh->dst_table()), sh->dst_start(),
                        sh->count(), sh->delta()});
    }
    backend->shift_kv(shifts);
  }

  // Evictions read the queries the sequence's earlier steps kept; one whose
  // worker kept none (a restart) keeps the sinks and its latest positions.
  void evict(const StepPlan& plan) {
    if (!plan.evictions()) return;
    for (const auto* e : *plan.evictions()) {
      if (!e->src_table() || !e->dst_table()) throw std::invalid_argument("KV eviction without its block tables");
      KvEviction k;
      k.src_table = table_of(*e->src_table());
      k.dst_table = table_of(*e->dst_table());
      k.length = e->length();
      k.keep = e->keep();
      k.rope_offset = e->rope_offset();
      k.policy.budget = e->keep();
      k.policy.sinks = e->sinks();
      k.policy.window = e->window();
      k.policy.pool = e->pool();
      if (k.policy.sinks < 0 || k.policy.window < 1 || k.policy.window > kMaxQueryWindow || k.policy.pool < 1 ||
          k.policy.pool % 2 == 0 || k.policy.pool > 255 || k.rope_offset < 0)
        throw std::invalid_argument("KV eviction of " + who(e->sequence_id()) + " with an impossible policy");
      const auto it = samplers->find(e->sequence_id());
      k.queries = it != samplers->end() && it->second.queries ? &*it->second.queries : nullptr;
      backend->evict_kv(k);
    }
  }

  std::shared_ptr<grammar::GrammarIndex> index_for(const std::string& gbnf) {
    if (!trie) {
      tokenizer = std::make_unique<Tokenizer>(load_vocabulary(backend->file()));
      trie = grammar::token_trie_of(*tokenizer);
    }
    std::shared_ptr<const grammar::Grammar> g = grammars.get(gbnf);
    auto it = indexes.find(g->source_hash);
    if (it != indexes.end() && &it->second->grammar() == g.get()) return it->second;
    if (indexes.size() >= kMaxIndexes)  // drop those no sequence holds
      std::erase_if(indexes, [](const auto& e) { return e.second.use_count() == 1; });
    auto index = std::make_shared<grammar::GrammarIndex>(g, trie);
    indexes[g->source_hash] = index;
    return index;
  }

  // The first slice of a sequence this worker sees (or a restart) brings its sampling.
  void introduce(const wire::step::Slice& s) {
    const SamplingParams p = sampling_params(s.sampling());
    p.validate();
    SequenceSampler fresh{Sampler(p), {}, s.sampling()->logprobs(), std::nullopt, 0, true, false,
                          std::clamp(s.sampling()->top_logprobs(), 0, 20), std::nullopt};
    if (s.history()) fresh.history.assign(s.history()->begin(), s.history()->end());
    if (static_cast<int32_t>(fresh.history.size()) != s.start())
      throw std::invalid_argument(who(s.sequence_id()) + " starts at " + std::to_string(s.start()) + " with a history of " +
                                  std::to_string(fresh.history.size()) + " tokens");
    if (const auto* g = s.sampling()->grammar(); g && g->size() > 0) {
      if (s.sampling()->grammar_start() < 0) throw std::invalid_argument(who(s.sequence_id()) + " has a negative grammar_start");
      try {
        fresh.matcher.emplace(index_for(g->str()));
      } catch (const grammar::GrammarError& e) {
        // The service compiled it; a worker that cannot is told per sequence.
        fresh.blocked = true;
      }
      fresh.fed = static_cast<size_t>(s.sampling()->grammar_start());
      fresh.jump_forward = s.sampling()->jump_forward();
    }
    samplers->insert_or_assign(s.sequence_id(), std::move(fresh));
  }

  // The matcher takes what the history holds past what it has taken: the
  // replayed output of a sequence that moved here, or tokens computed by
  // this worker's last step.
  static void feed(SequenceSampler& ss) {
    if (!ss.matcher || ss.blocked) return;
    try {
      for (; ss.fed < ss.history.size(); ++ss.fed)
        if (!ss.matcher->accept(ss.history[ss.fed])) {
          ss.blocked = true;
          return;
        }
    } catch (const grammar::GrammarError&) {  // past its limits: this sequence ends
      ss.blocked = true;
    }
  }

  void read_slice(const wire::step::Slice& s, Batch& batch, std::vector<Wanting>& wanting) {
    if (!s.tokens() || !s.block_table() || s.tokens()->size() == 0)
      throw std::invalid_argument("slice of " + who(s.sequence_id()) + " has no tokens");
    const std::span<const int32_t> tokens(s.tokens()->data(), s.tokens()->size());
    const std::span<const int32_t> table = table_of(*s.block_table());
    if (s.sampling()) introduce(s);
    auto it = samplers->find(s.sequence_id());
    if (it == samplers->end()) throw std::invalid_argument(who(s.sequence_id()) + " continues but never started");
    const int32_t drafts = s.drafts();
    if (drafts < 0 || drafts >= static_cast<int32_t>(tokens.size()) || (drafts > 0 && !s.wants_token()))
      throw std::invalid_argument("slice of " + who(s.sequence_id()) + " has " + std::to_string(drafts) + " drafts");
    // Drafted tokens join the history only once accepted.
    it->second.history.insert(it->second.history.end(), tokens.begin(), tokens.end() - drafts);
    feed(it->second);
    if (s.evicted() < 0 || s.evicted() > s.start() || s.query_window() < 0 || s.query_window() > kMaxQueryWindow)
      throw std::invalid_argument("slice of " + who(s.sequence_id()) + " has " + std::to_string(s.evicted()) +
                                  " positions evicted and a query window of " + std::to_string(s.query_window()));
    batch.sequences.push_back({tokens, s.start() - s.evicted(), table,
                               drafts > 0 ? LogitsWanted::all : s.wants_token() ? LogitsWanted::last : LogitsWanted::none});
    batch.sequences.back().rope_offset = s.evicted();
    if (std::optional<QueryWindow>& q = it->second.queries; s.query_window() > 0) {
      if (!q || q->window() != s.query_window())
        q.emplace(backend->config().n_layer, backend->config().q_dim(), s.query_window());
      batch.sequences.back().queries = &*q;
    }
    if (s.wants_token())
      wanting.push_back({s.sequence_id(), drafts, tokens.subspan(tokens.size() - static_cast<size_t>(drafts)),
                         messages::read_draft_q(s.q_sizes(), s.q_tokens(), s.q_probs(), drafts, info.n_vocab)});
  }

  messages::SampledToken blocked(uint64_t seq) const {
    messages::SampledToken t{seq, 0, 0.0f, {}, {}, true, {}, {}, {}};
    return t;
  }

  // After the sequence's token (and any accepted drafts) were taken: the
  // tokens its grammar forces next, taken too (the next slice computes them).
  void jump_forward(SequenceSampler& ss, messages::SampledToken& t) {
    if (!ss.matcher || !ss.jump_forward || ss.matcher->finished()) return;
    t.forced = ss.matcher->forced_tokens(kMaxForced);
    for (int32_t f : t.forced) ss.matcher->accept(f);
    ss.fed += t.forced.size();
  }

  // The token's log-probability (and the most likely tokens) under `raw`,
  // the row as the model computed it.
  static void report(const SequenceSampler& ss, messages::SampledToken& t, std::span<const float> raw, int32_t token) {
    const RowLogprobs r = row_logprobs(raw, ss.top);
    t.logprobs.push_back(r.of(raw, token));
    t.logprob = t.logprobs.back();
    t.top_ids.insert(t.top_ids.end(), r.top_ids.begin(), r.top_ids.end());
    t.top_logprobs.insert(t.top_logprobs.end(), r.top_logprobs.begin(), r.top_logprobs.end());
  }

  messages::SampledToken sample_row(SequenceSampler& ss, uint64_t seq, std::span<float> row) {
    if (ss.blocked) return blocked(seq);
    if (ss.logprobs) original.assign(row.begin(), row.end());
    if (ss.matcher && !ss.matcher->apply(row)) return blocked(seq);
    const int32_t token = ss.sampler.sample(row, ss.history);
    messages::SampledToken t{seq, token, 0.0f, {}, {}, false, {}, {}, {}};
    if (ss.logprobs) report(ss, t, original, token);
    if (ss.matcher) {
      if (!ss.matcher->accept(token)) return blocked(seq);
      ++ss.fed;
      jump_forward(ss, t);
    }
    return t;
  }

  std::vector<messages::SampledToken> sample(std::vector<Wanting>& wanting) {
    std::vector<messages::SampledToken> sampled;
    sampled.reserve(wanting.size());
    int64_t next_row = 0;
    for (Wanting& w : wanting) {
      SequenceSampler& ss = samplers->at(w.sequence);
      const int64_t first = next_row;
      next_row += w.drafts + 1;
      // A grammar past its limits (grammar::StackMachine) ends its own
      // sequence, not the step.
      try {
        sampled.push_back(sample_one(ss, w, first));
      } catch (const grammar::GrammarError&) {
        ss.blocked = true;
        sampled.push_back(blocked(w.sequence));
      }
    }
    return sampled;
  }

  // The sequence's next token, or its verify window's accepted drafts and next token.
  messages::SampledToken sample_one(SequenceSampler& ss, Wanting& w, int64_t first) {
    if (w.drafts == 0) return sample_row(ss, w.sequence, logits.row(first));
    // Logprobs are the target model's: its rows as computed, before masks and sampling.
    std::vector<std::vector<float>> raw;
    if (ss.logprobs)
      for (int32_t i = 0; i <= w.drafts; ++i) raw.emplace_back(logits.row(first + i).begin(), logits.row(first + i).end());
    const int32_t drafts =
        ss.blocked ? -1
        : ss.matcher ? grammar::mask_window(*ss.matcher, w.window, [&](int32_t i) { return logits.row(first + i); })
                     : w.drafts;
    if (drafts < 0) return blocked(w.sequence);
    const std::span<const int32_t> window = w.window.first(static_cast<size_t>(drafts));
    const Acceptance a = accept_drafts(
        ss.sampler, window, [&](int32_t i) { return logits.row(first + i); }, ss.history, w.q.empty() ? nullptr : &w.q);
    ss.history.pop_back();  // `next` joins the history with the slice that carries it
    messages::SampledToken t{w.sequence, a.next, 0.0f,
                             std::vector<int32_t>(w.window.begin(), w.window.begin() + a.accepted), {}, false, {}, {}, {}};
    if (ss.logprobs) {
      for (int32_t i = 0; i < a.accepted; ++i) report(ss, t, raw[static_cast<size_t>(i)], w.window[static_cast<size_t>(i)]);
      report(ss, t, raw[static_cast<size_t>(a.accepted)], a.next);
    }
    if (ss.matcher) {
      bool ok = true;
      for (int32_t d : t.accepted) ok = ok && ss.matcher->accept(d);
      ok = ok && ss.matcher->accept(a.next);
      if (!ok) {
        ss.blocked = true;
        return blocked(w.sequence);
      }
      ss.fed = ss.history.size() + 1;
      jump_forward(ss, t);
    }
    return t;
  }

  // The share of the plan's front end; false (with `why`) when none is free.
  bool hold_share(uint64_t front, std::chrono::steady_clock::time_point now, std::string& why) {
    std::vector<uint64_t> evicted;
    const std::optional<FrontShares::Share> share = shares.hold(front, now, evicted, why);
    for (uint64_t gone : evicted) samplers_of.erase(gone);
    if (!share) return false;
    first_page = share->first_page;
    info.kv_pages = share->pages;
    info.instance = share->epoch;
    samplers = &samplers_of[front];
    return true;
  }

  std::string run(const std::string& bytes) {
    const auto* plan = messages::check_step_plan(bytes);
    if (!plan) return messages::step_result(0, {}, "malformed step plan", 0, info);
    const auto t0 = std::chrono::steady_clock::now();
    std::string why;
    if (!hold_share(plan->front(), t0, why)) {
      // No pages of this front end's here: a new instance, so it counts
      // the worker as lost (its requests move) until a share is free.
      messages::WorkerInfo none = info;
      none.instance = random_id();
      return messages::step_result(plan->step(), {}, why, 0, none);
    }
    tables.clear();
    std::string result = step(*plan, t0);
    shares.worked(std::chrono::steady_clock::now() - t0);
    // The front end is done with this worker (its shutdown, or a drain's end).
    if (plan->release()) {
      shares.release(plan->front());
      samplers_of.erase(plan->front());
    }
    return result;
  }

  std::string step(const StepPlan& p, std::chrono::steady_clock::time_point t0) {
    const StepPlan* plan = &p;
    try {
      if (plan->forget())
        for (uint64_t id : *plan->forget()) samplers->erase(id);
      std::vector<messages::PageBytes> exported, swapped;
      export_pages(*plan, exported, swapped);
      set_local_slots(*plan);
      import_pages(*plan);
      Batch batch;
      std::vector<Wanting> wanting;
      if (plan->slices())
        for (const auto* s : *plan->slices()) read_slice(*s, batch, wanting);
      if (plan->copies() && plan->copies()->size() > 0) {
        std::vector<PageCopy> copies;
        for (const auto* c : *plan->copies()) copies.push_back({page_of(c->src()), page_of(c->dst())});
        backend->copy_pages(copies);
      }
      shift(*plan);
      evict(*plan);
      if (!batch.sequences.empty()) backend->forward(batch, logits);
      const std::vector<messages::SampledToken> sampled = sample(wanting);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      info.expert_tokens = backend->expert_tokens();
      return messages::step_result(plan->step(), sampled, "", ms, info, exported, swapped);
    } catch (const std::exception& e) {
      return messages::step_result(plan->step(), {}, e.what(), 0, info);
    }
  }
};

StepRunner::StepRunner(std::shared_ptr<Backend> backend, int32_t fronts, std::chrono::milliseconds front_idle)
    : impl_(std::make_unique<Impl>(std::move(backend), fronts, front_idle)) {
  Backend& b = *impl_->backend;
  impl_->info = {impl_->shares.share_pages(), b.page_size(), static_cast<int32_t>(b.config().n_vocab), b.config().name,
                 b.can_copy_pages(), b.can_transfer_pages(), static_cast<uint8_t>(b.kv_type()), b.can_shift_kv(),
                 0, file_fingerprint(b.file())};
  impl_->info.process = random_id();
  impl_->info.kv_local_pages = b.pages().local_capacity();
  impl_->info.can_evict_kv = b.can_evict_kv();
  if (fronts > 1 && impl_->info.kv_local_pages > 0)
    throw std::invalid_argument("a worker shared by several front ends keeps every layer's KV in every page "
                                "(its local slots would be numbered by each front end at once)");
}
StepRunner::~StepRunner() = default;
std::string StepRunner::run(const std::string& plan_bytes) { return impl_->run(plan_bytes); }
void StepRunner::set_draining(bool draining) { impl_->info.draining = draining; }
uint64_t StepRunner::process() const { return impl_->info.process; }
int32_t StepRunner::fronts_held() const { return impl_->shares.held(); }

}  // namespace troupe::worker
