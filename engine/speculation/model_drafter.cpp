#include "engine/speculation/model_drafter.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/vocabulary.h"

namespace troupe {

struct ModelDrafter::Sequence {
  Sequence(PagePool& pool, int32_t page_size, const SamplingParams& p) : kv(pool, page_size), params(p), sampler(p) {}
  KvSequence kv;
  std::vector<int32_t> cached;  // the tokens at positions [0, cached.size()), whose K/V are computed
  SamplingParams params;
  Sampler sampler;
  uint64_t used = 0;
};

namespace {

// The draft's own generator: its draws must not be correlated with the
// target's, which uses the request's seed as is.
SamplingParams draft_params(SamplingParams p) {
  p.seed ^= 0x9e3779b97f4a7c15ULL;
  return p;
}

bool same_sampling(const SamplingParams& a, const SamplingParams& b) {
  return a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p && a.min_p == b.min_p &&
         a.repetition_penalty == b.repetition_penalty && a.presence_penalty == b.presence_penalty &&
         a.frequency_penalty == b.frequency_penalty && a.penalty_last_n == b.penalty_last_n && a.seed == b.seed &&
         a.logit_bias == b.logit_bias;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

std::string draft_pair_mismatch(const Vocabulary& target, const Vocabulary& draft) {
  if (target.tokens.size() != draft.tokens.size())
    return "the draft model has " + std::to_string(draft.tokens.size()) + " tokens, the target " +
           std::to_string(target.tokens.size());
  for (size_t i = 0; i < target.tokens.size(); ++i)
    if (target.tokens[i] != draft.tokens[i])
      return "token " + std::to_string(i) + " differs between the draft model and the target";
  return "";
}

uint64_t vocabulary_fingerprint(const Vocabulary& v) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  auto mix = [&](unsigned char c) { h = (h ^ c) * 0x100000001b3ULL; };
  for (const std::string& t : v.tokens) {
    for (char c : t) mix(static_cast<unsigned char>(c));
    mix(0xff);  // not a byte of UTF-8 text: separates tokens
  }
  return h;
}

ModelDrafter::ModelDrafter(Backend& backend, int64_t max_batch_tokens)
    : backend_(backend), max_batch_tokens_(std::max<int64_t>(16, max_batch_tokens)) {}
ModelDrafter::~ModelDrafter() = default;

void ModelDrafter::forget(uint64_t id) { sequences_.erase(id); }

int32_t ModelDrafter::computed(uint64_t id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? 0 : static_cast<int32_t>(it->second->cached.size());
}

ModelDrafter::Sequence& ModelDrafter::sequence(const Request& r) {
  auto& slot = sequences_[r.id];
  const SamplingParams p = draft_params(r.sampling);
  if (!slot) {
    slot = std::make_unique<Sequence>(backend_.pages(), backend_.page_size(), p);
  } else if (!same_sampling(slot->params, p)) {
    // The id now names another request (its caller restarted): its own draws.
    slot->params = p;
    slot->sampler = Sampler(p);
  }
  return *slot;
}

// Pages for `tokens` positions of s, evicting the least recently used
// sequences that are not part of this call when the pool is short.
bool ModelDrafter::make_room(Sequence& s, int32_t tokens, std::span<const Request> keep) {
  while (!s.kv.reserve(tokens)) {
    auto victim = sequences_.end();
    for (auto it = sequences_.begin(); it != sequences_.end(); ++it) {
      if (it->second.get() == &s || it->second->used == clock_) continue;
      if (std::any_of(keep.begin(), keep.end(), [&](const Request& r) { return r.id == it->first; })) continue;
      if (victim == sequences_.end() || it->second->used < victim->second->used) victim = it;
    }
    if (victim == sequences_.end()) return false;
    sequences_.erase(victim);
  }
  return true;
}

void ModelDrafter::calibrate() {
  constexpr uint64_t kId = ~uint64_t{0};
  const std::vector<int32_t> history{0, 0};
  SamplingParams greedy;
  greedy.temperature = 0;
  const Request r{kId, history, 4, greedy};
  propose(std::span(&r, 1));
  forget(kId);
}

// A sequence's drafting within one call.
struct ModelDrafter::Work {
  Sequence* s = nullptr;
  const Request* r = nullptr;
  size_t slot = 0;  // its Proposal
  int32_t k = 0;
  std::vector<int32_t> feed;     // history not yet computed
  size_t fed = 0;
  std::vector<int32_t> context;  // history and drafts so far: what the penalties see
  int32_t advance = 0;           // tokens this round feeds
};

void ModelDrafter::check(std::span<const Request> requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (r.history.empty()) throw std::invalid_argument("draft request for sequence " + std::to_string(r.id) + " has no tokens");
    if (r.k < 1 || r.k > kMaxDraft)
      throw std::invalid_argument("draft request for sequence " + std::to_string(r.id) + " asks for " + std::to_string(r.k) +
                                  " tokens (1 to " + std::to_string(kMaxDraft) + ")");
    for (size_t j = 0; j < i; ++j)
      if (requests[j].id == r.id) throw std::invalid_argument("sequence " + std::to_string(r.id) + " asked twice in one call");
    r.sampling.validate();
    if (auto it = sequences_.find(r.id); it != sequences_.end()) it->second->used = clock_;
  }
}

// Each request's sequence keeps the longest prefix it has computed and gets
// pages for the rest and its drafts; one that cannot gets no drafts.
std::vector<ModelDrafter::Work> ModelDrafter::prepare(std::span<const Request> requests, std::vector<Proposal>& out) {
  std::vector<Work> work;
  work.reserve(requests.size());
  const int64_t n_ctx = backend_.config().context_limit();
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    out[i].id = r.id;
    const auto n = static_cast<int64_t>(r.history.size());
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(r.k, n_ctx - n));
    if (k < 1) continue;
    Sequence& s = sequence(r);
    s.used = clock_;
    // Keep the longest computed prefix; at least the last token is fed again for its logits.
    size_t common = 0;
    const size_t limit = std::min(s.cached.size(), r.history.size() - 1);
    while (common < limit && s.cached[common] == r.history[common]) ++common;
    s.cached.resize(common);
    s.kv.truncate(static_cast<int32_t>(common));
    if (!make_room(s, static_cast<int32_t>(n + k - 1), requests)) {
      s.cached.clear();
      s.kv.clear();
      continue;  // no pages: no drafts for it this time
    }
    out[i].tokens.reserve(static_cast<size_t>(k));  // spans into it feed the next rounds
    Work w;
    w.s = &s;
    w.r = &r;
    w.slot = i;
    w.k = k;
    w.feed.assign(r.history.begin() + static_cast<int64_t>(common), r.history.end());
    w.context.assign(r.history.begin(), r.history.end());
    work.push_back(std::move(w));
  }
  return work;
}

bool ModelDrafter::round(std::vector<Work>& work, std::vector<Proposal>& out, double& drafting_ms, int32_t& drafting_rounds) {
  Batch batch;
  std::vector<Work*> rows;  // the sequence of each logits row
  int64_t budget = max_batch_tokens_;
  bool catch_up = false;
  for (Work& w : work) {
    w.advance = 0;
    Proposal& p = out[w.slot];
    if (static_cast<int32_t>(p.tokens.size()) >= w.k) continue;
    const int32_t start = static_cast<int32_t>(w.s->cached.size());
    std::span<const int32_t> tokens;
    bool wants = true;
    if (w.fed < w.feed.size()) {
      if (budget <= 0) continue;
      const size_t n = std::min<size_t>(w.feed.size() - w.fed, static_cast<size_t>(budget));
      tokens = std::span<const int32_t>(w.feed).subspan(w.fed, n);
      wants = w.fed + n == w.feed.size();
      catch_up = catch_up || n > 2;  // steady state feeds the last accepted token and the next
    } else {
      tokens = std::span<const int32_t>(p.tokens).last(1);  // the last draft, to draft the next
    }
    budget -= static_cast<int64_t>(tokens.size());
    w.advance = static_cast<int32_t>(tokens.size());
    batch.sequences.push_back({tokens, start, w.s->kv.block_table(), wants ? LogitsWanted::last : LogitsWanted::none});
    if (wants) rows.push_back(&w);
  }
  if (batch.sequences.empty()) return false;
  const auto tr = std::chrono::steady_clock::now();
  backend_.forward(batch, logits_);
  if (!catch_up) drafting_ms += ms_since(tr), ++drafting_rounds;
  for (Work& w : work) {
    if (w.advance == 0) continue;
    if (w.fed < w.feed.size()) {
      w.s->cached.insert(w.s->cached.end(), w.feed.begin() + static_cast<int64_t>(w.fed),
                         w.feed.begin() + static_cast<int64_t>(w.fed) + w.advance);
      w.fed += static_cast<size_t>(w.advance);
    } else {
      w.s->cached.push_back(out[w.slot].tokens.back());
    }
  }
  for (size_t row = 0; row < rows.size(); ++row) {
    Work& w = *rows[row];
    Proposal& p = out[w.slot];
    const Sampler::Distribution& d = w.s->sampler.distribution(logits_.row(static_cast<int64_t>(row)), w.context);
    int32_t token = d[0].first;
    if (!w.s->sampler.greedy()) {
      Sampler::Distribution q(d.begin(), d.begin() + static_cast<int64_t>(std::min(d.size(), kMaxSupport)));
      float total = 0;
      for (const auto& e : q) total += e.second;
      for (auto& e : q) e.second /= total;
      token = w.s->sampler.draw(q);
      p.dists.push_back(std::move(q));
    }
    p.tokens.push_back(token);
    w.context.push_back(token);
  }
  return true;
}

std::vector<ModelDrafter::Proposal> ModelDrafter::propose(std::span<const Request> requests) {
  const auto t0 = std::chrono::steady_clock::now();
  ++clock_;
  check(requests);
  std::vector<Proposal> out(requests.size());
  std::vector<Work> work = prepare(requests, out);
  double drafting_ms = 0;
  int32_t drafting_rounds = 0;
  while (round(work, out, drafting_ms, drafting_rounds)) {
  }
  if (drafting_rounds > 0) round_ms_ = drafting_ms / drafting_rounds;
  last_ms_ = ms_since(t0);
  catch_up_ms_ = std::max(0.0, last_ms_ - drafting_ms);
  return out;
}

}  // namespace troupe
