#include "engine/generator.h"

#include <chrono>
#include <optional>
#include <stdexcept>

#include "engine/backend.h"
#include "engine/grammar/matcher.h"
#include "engine/kv_budget.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/speculation/acceptance.h"
#include "engine/speculation/model_drafter.h"
#include "engine/speculation/ngram_drafter.h"
#include "engine/speculation/suffix_tree.h"
#include "engine/stop_strings.h"
#include "engine/tokenizer.h"

namespace troupe {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::length: return "length";
    case FinishReason::end_of_generation: return "stop";
    case FinishReason::stop_string: return "stop_string";
    case FinishReason::context_full: return "context_full";
    case FinishReason::grammar_blocked: return "grammar_blocked";
  }
  return "unknown";
}

namespace {

// One sequence's generation: its KV, sampler, text stream and speculation.
class Generation {
 public:
  Generation(Backend& backend, const Tokenizer& tokenizer, std::span<const int32_t> prompt, const GenerateOptions& options,
             const GenerateCallbacks& callbacks)
      : backend_(backend), tokenizer_(tokenizer), options_(options), callbacks_(callbacks),
        seq_(backend.pages(), backend.page_size()), budget_(backend, options.eviction), history_(prompt.begin(), prompt.end()), sampler_(options.sampling),
        decoder_(tokenizer), stops_(options.stop),
        controller_(options.speculation, options.max_draft, options.drafter != nullptr) {
    result_.prompt_tokens = static_cast<int32_t>(prompt.size());
    if (options.grammar) matcher_.emplace(options.grammar);
    if (suffix_on()) own_.add(prompt);
  }

  void prefill(std::span<const int32_t> prompt) {
    const auto t0 = std::chrono::steady_clock::now();
    const int32_t n_prompt = static_cast<int32_t>(prompt.size());
    // Pages chunk by chunk: a sliding-window model gives its local slots
    // back as its window moves (engine/kv_cache.h), so a long prompt never
    // holds more of them than a window and a chunk.
    if (backend_.pages().local_capacity() == 0 && !seq_.reserve(n_prompt))
      throw std::runtime_error("the prompt does not fit in the KV cache");
    for (int32_t pos = 0; pos < n_prompt; pos += options_.prefill_chunk) {
      const int32_t len = std::min(options_.prefill_chunk, n_prompt - pos);
      if (!seq_.reserve(pos + len)) throw std::runtime_error("the prompt does not fit in the KV cache");
      Batch batch;
      batch.sequences.push_back({prompt.subspan(pos, len), pos, seq_.block_table(),
                                 pos + len == n_prompt ? LogitsWanted::last : LogitsWanted::none});
      budget_.mark(batch.sequences.back());
      backend_.forward(batch, logits_);
      drop_local(pos + len);
    }
    result_.prefill_seconds = seconds_since(t0);
  }

  GenerateResult decode() {
    const auto t1 = std::chrono::steady_clock::now();
    history_.reserve(history_.size() + static_cast<size_t>(options_.max_tokens) + 16);
    int32_t token = 0;
    if (sample(logits_.row(0), token))
      while (keep(token) && step(token)) {
      }
    result_.speculation = controller_.stats();
    result_.evictions = budget_.evictions();
    result_.evicted = budget_.evicted();
    if (options_.drafter) options_.drafter->forget(0);
    // Every kept token but the last has its K/V computed.
    if (callbacks_.on_kv) callbacks_.on_kv(seq_.block_table(), budget_.slot(static_cast<int32_t>(history_.size()) - 1));
    if (!stops_.stopped()) emit(stops_.push(decoder_.finish()) + stops_.finish());
    result_.decode_seconds = seconds_since(t1);
    return std::move(result_);
  }

 private:
  bool suffix_on() const { return drafts_from_suffix(options_.speculation); }

  // Room for `n` tokens after the last kept one: the slot the first takes,
  // or -1 (finish: context_full) when the model's positions or the cache
  // run out. An eviction under a budget comes first.
  int32_t room_for(int32_t n) {
    const int32_t pos = static_cast<int32_t>(history_.size()) - 1;  // the first one's position
    if (pos + n > backend_.config().context_limit()) {
      result_.finish = FinishReason::context_full;
      return -1;
    }
    budget_.make_room(seq_, budget_.slot(pos), n);
    const int32_t slot = budget_.slot(pos);
    if (!seq_.reserve(slot + n)) {
      result_.finish = FinishReason::context_full;
      return -1;
    }
    return slot;
  }

  // Local slots behind the window of the next query (at `next`) go back.
  void drop_local(int32_t next) {
    if (backend_.pages().local_capacity() > 0)
      seq_.drop_local_behind(next, static_cast<int32_t>(backend_.config().sliding_window));
  }

  void emit(const std::string& text) {
    if (!text.empty() && callbacks_.on_text) callbacks_.on_text(text);
  }

  // The next token from these logits, under the grammar if there is one;
  // false when the grammar allows none.
  bool sample(std::span<float> row, int32_t& token) {
    if (matcher_ && !matcher_->apply(row)) {
      result_.finish = FinishReason::grammar_blocked;
      return false;
    }
    token = sampler_.sample(row, history_);
    if (matcher_) matcher_->accept(token);
    return true;
  }

  // One token reaches the output; false when generation ends with it.
  bool keep(int32_t token) {
    if (tokenizer_.is_end_of_generation(token)) {
      result_.finish = FinishReason::end_of_generation;
      return false;
    }
    history_.push_back(token);
    if (suffix_on()) own_.append(token);
    result_.tokens.push_back(token);
    if (callbacks_.on_token) callbacks_.on_token(token);
    emit(stops_.push(decoder_.push(token)));
    if (stops_.stopped()) {
      result_.finish = FinishReason::stop_string;
      return false;
    }
    return static_cast<int32_t>(result_.tokens.size()) < options_.max_tokens;
  }

  // This step's drafts (none without speculation), as the controller chooses.
  SpeculationController::Choice choose_drafts() {
    const int32_t room = std::min(options_.max_draft, options_.max_tokens - static_cast<int32_t>(result_.tokens.size()) - 1);

    drafts_ = options_.speculation != SpeculationMode::off && room > 0 ? ngram_.propose(history_, room) : std::vector<int32_t>();
    SuffixDraft suffix;
    if (suffix_on() && room > 0) {
      const SuffixTree* trees[] = {&own_, options_.history};
      const size_t tail = std::min(history_.size(), static_cast<size_t>(own_.depth()));
      suffix = best_suffix_draft(trees, std::span(history_).last(tail), room, &own_);
    }
    const int64_t behind = options_.drafter ? static_cast<int64_t>(history_.size()) - options_.drafter->computed(0) : 0;
    const auto choice = controller_.choose({static_cast<int32_t>(drafts_.size()), static_cast<int32_t>(suffix.tokens.size())}, 1,
                                           cost_, options_.drafter ? options_.drafter->round_ms() : 0.0, 0, catch_up_.ms(behind));
    draft_dists_.clear();
    if (choice.source == DraftSource::suffix) drafts_ = std::move(suffix.tokens);
    if (choice.source == DraftSource::model) {
      const ModelDrafter::Request req{0, history_, choice.k, options_.sampling};
      auto proposal = std::move(options_.drafter->propose(std::span(&req, 1)).front());
      catch_up_.observe(options_.drafter->catch_up_ms(), behind);
      drafts_ = std::move(proposal.tokens);
      draft_dists_ = std::move(proposal.dists);
    }
    return choice;
  }

  // Jump-forward: `token` and the tokens the grammar forces after it in one
  // forward, with logits for the last only (they are certain: nothing to
  // verify). False when generation ends here.
  bool forced_step(int32_t& token, const std::vector<int32_t>& forced) {
    const auto n = static_cast<int32_t>(forced.size()) + 1;
    const int32_t at = room_for(n);  // where `token` goes: its slot
    if (at < 0) return false;
    window_.assign(1, token);
    window_.insert(window_.end(), forced.begin(), forced.end());
    Batch batch;
    batch.sequences.push_back({window_, at, seq_.block_table(), LogitsWanted::last});
    budget_.mark(batch.sequences.back());
    backend_.forward(batch, logits_);
    ++result_.forward_steps;
    drop_local(at + n);
    for (int32_t f : forced) {
      matcher_->accept(f);
      if (!keep(f)) return false;
    }
    return sample(logits_.row(0), token);
  }

  // One forward: `token` and any drafts after it. Sets `token` to the next
  // one to keep; false when generation ends here.
  bool step(int32_t& token) {
    if (matcher_) {
      const int32_t room = options_.max_tokens - static_cast<int32_t>(result_.tokens.size()) - 1;
      const std::vector<int32_t> forced = room > 0 ? matcher_->forced_tokens(static_cast<size_t>(room)) : std::vector<int32_t>();
      if (!forced.empty()) return forced_step(token, forced);
    }
    const auto choice = choose_drafts();
    const int32_t k = std::min(choice.k, static_cast<int32_t>(drafts_.size()));
    drafts_.resize(static_cast<size_t>(k));
    const int32_t pos = room_for(k + 1);  // where `token` goes: its slot
    if (pos < 0) return false;
    window_.assign(1, token);
    window_.insert(window_.end(), drafts_.begin(), drafts_.end());
    Batch batch;
    batch.sequences.push_back({window_, pos, seq_.block_table(), k > 0 ? LogitsWanted::all : LogitsWanted::last});
    budget_.mark(batch.sequences.back());
    const auto ts = std::chrono::steady_clock::now();
    backend_.forward(batch, logits_);
    cost_.observe(k + 1, seconds_since(ts) * 1000.0);
    ++result_.forward_steps;
    if (k == 0) {
      drop_local(pos + 1);
      return sample(logits_.row(0), token);
    }
    std::vector<int32_t> verified(history_);  // penalties see what is accepted as it is
    std::span<const int32_t> window = drafts_;
    if (matcher_) {
      const int32_t worth = grammar::mask_window(*matcher_, drafts_, [&](int32_t i) { return logits_.row(i); });
      if (worth < 0) {
        result_.finish = FinishReason::grammar_blocked;
        return false;
      }
      window = window.first(static_cast<size_t>(worth));
    }
    const Acceptance acc = accept_drafts(sampler_, window, [&](int32_t i) { return logits_.row(i); }, verified,
                                         draft_dists_.empty() ? nullptr : &draft_dists_);
    if (matcher_) {
      for (int32_t j = 0; j < acc.accepted; ++j) matcher_->accept(drafts_[static_cast<size_t>(j)]);
      matcher_->accept(acc.next);
    }
    controller_.observe(choice.source, k, acc.accepted);
    seq_.truncate(pos + 1 + acc.accepted);  // rejected positions: their pages go, their slots are rewritten later
    drop_local(pos + 1 + acc.accepted);
    for (int32_t j = 0; j < acc.accepted; ++j)
      if (!keep(drafts_[static_cast<size_t>(j)])) return false;
    token = acc.next;
    return true;
  }

  Backend& backend_;
  const Tokenizer& tokenizer_;
  const GenerateOptions& options_;
  const GenerateCallbacks& callbacks_;
  GenerateResult result_;
  KvSequence seq_;
  KvBudget budget_;
  std::vector<int32_t> history_;
  Sampler sampler_;
  StreamDecoder decoder_;
  StopStrings stops_;
  Logits logits_;
  NgramDrafter ngram_;
  SuffixTree own_;  // the request's prompt and output (modes suffix and auto)
  SpeculationController controller_;
  StepCostModel cost_;
  DraftCatchUpCost catch_up_;
  std::vector<int32_t> window_, drafts_;
  std::vector<Sampler::Distribution> draft_dists_;  // the draft model's q, when it samples
  std::optional<grammar::Matcher> matcher_;
};

}  // namespace

GenerateResult generate(Backend& backend, const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const GenerateCallbacks& callbacks) {
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty");
  if (options.prefill_chunk <= 0) throw std::invalid_argument("prefill chunk must be positive");
  if (options.speculation == SpeculationMode::draft && !options.drafter)
    throw std::invalid_argument("speculation with a draft model needs the draft model");
  Generation g(backend, tokenizer, prompt, options, callbacks);
  g.prefill(prompt);
  return g.decode();
}

}  // namespace troupe
