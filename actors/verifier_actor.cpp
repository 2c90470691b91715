#include "actors/verifier_actor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <unordered_map>
#include <vector>

#include "actors/local_messages.h"
#include "actors/sequence_sampling.h"
#include "engine/kv_page_codec.h"
#include "engine/model_config.h"
#include "engine/page_pool.h"
#include "engine/sampler.h"
#include "engine/speculation/acceptance.h"
#include "messages/step_frames.h"

namespace troupe::actors {

struct StepRunner::Impl {
  struct SequenceSampler {
    Sampler sampler;
    std::vector<int32_t> history;
    bool logprobs = false;
  };
  std::shared_ptr<Backend> backend;
  messages::WorkerInfo info;
  std::unordered_map<uint64_t, SequenceSampler> samplers;
  Logits logits;
  std::vector<float> original;

  // A front end sized for another worker must not touch pages out of bounds.
  void check_page(int32_t page) const {
    if (page < 0 || page >= info.kv_pages)
      throw std::out_of_range("KV page " + std::to_string(page) + " outside this worker's " + std::to_string(info.kv_pages) +
                              " pages");
  }

  std::string run(const std::string& bytes) {
    const auto* plan = messages::check_step_plan(bytes);
    if (!plan) return messages::step_result(0, {}, "malformed step plan", 0, info);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      if (plan->forget())
        for (uint64_t id : *plan->forget()) samplers.erase(id);
      // Exports first: a page this step reuses still holds what was spilled.
      std::vector<messages::PageBytes> exported;
      if (plan->exports())
        for (int32_t page : *plan->exports()) {
          check_page(page);
          const auto codec = static_cast<KvPageCodec>(plan->export_codec());
          if (codec != KvPageCodec::int8 && codec != KvPageCodec::k8v4)
            throw std::invalid_argument("unknown KV export codec " + std::to_string(plan->export_codec()));
          exported.push_back({page, export_kv_page(*backend, page, codec)});
        }
      std::vector<messages::PageBytes> swapped;
      if (plan->swap_outs())
        for (int32_t page : *plan->swap_outs()) {
          check_page(page);
          swapped.push_back({page, export_kv_page(*backend, page, KvPageCodec::fp16)});
        }
      if (plan->imports())
        for (const auto* p : *plan->imports()) {
          check_page(p->page());
          const auto* d = p->data();
          if (!d || !import_kv_page(*backend, p->page(), std::string_view(reinterpret_cast<const char*>(d->data()), d->size())))
            throw std::invalid_argument("KV page " + std::to_string(p->page()) + " to restore is not in this model's layout");
        }
      Batch batch;
      std::vector<uint64_t> wanting;
      std::vector<int32_t> wanting_drafts;  // per wanting slice: its drafted tokens (0: plain)
      std::vector<std::span<const int32_t>> windows;
      std::vector<std::vector<Sampler::Distribution>> window_q;  // the draft model's q per window (empty: fixed drafts)
      if (plan->slices()) {
        for (const auto* s : *plan->slices()) {
          if (!s->tokens() || !s->block_table() || s->tokens()->size() == 0)
            throw std::invalid_argument("slice of sequence " + std::to_string(s->sequence_id()) + " has no tokens");
          const std::span<const int32_t> tokens(s->tokens()->data(), s->tokens()->size());
          const std::span<const int32_t> table(s->block_table()->data(), s->block_table()->size());
          for (int32_t page : table) check_page(page);
          if (s->sampling()) {  // the first slice of this sequence we see (or a restart)
            const SamplingParams p = sampling_params(s->sampling());
            p.validate();
            SequenceSampler fresh{Sampler(p), {}, s->sampling()->logprobs()};
            if (s->history()) fresh.history.assign(s->history()->begin(), s->history()->end());
            if (static_cast<int32_t>(fresh.history.size()) != s->start())
              throw std::invalid_argument("sequence " + std::to_string(s->sequence_id()) + " starts at " +
                                          std::to_string(s->start()) + " with a history of " +
                                          std::to_string(fresh.history.size()) + " tokens");
            samplers.insert_or_assign(s->sequence_id(), std::move(fresh));
          }
          auto it = samplers.find(s->sequence_id());
          if (it == samplers.end())
            throw std::invalid_argument("sequence " + std::to_string(s->sequence_id()) + " continues but never started");
          const int32_t drafts = s->drafts();
          if (drafts < 0 || drafts >= static_cast<int32_t>(tokens.size()) || (drafts > 0 && !s->wants_token()))
            throw std::invalid_argument("slice of sequence " + std::to_string(s->sequence_id()) + " has " +
                                        std::to_string(drafts) + " drafts");
          // Drafted tokens join the history only once accepted.
          it->second.history.insert(it->second.history.end(), tokens.begin(), tokens.end() - drafts);
          batch.sequences.push_back({tokens, s->start(), table,
                                     drafts > 0 ? LogitsWanted::all
                                                : s->wants_token() ? LogitsWanted::last : LogitsWanted::none});
          if (s->wants_token()) {
            wanting.push_back(s->sequence_id());
            wanting_drafts.push_back(drafts);
            windows.push_back(tokens.subspan(tokens.size() - static_cast<size_t>(drafts)));
            window_q.push_back(messages::read_draft_q(s->q_sizes(), s->q_tokens(), s->q_probs(), drafts, info.n_vocab));
          }
        }
      }
      if (plan->copies() && plan->copies()->size() > 0) {
        std::vector<PageCopy> copies;
        for (const auto* c : *plan->copies()) copies.push_back({c->src(), c->dst()});
        backend->copy_pages(copies);
      }
      if (!batch.sequences.empty()) backend->forward(batch, logits);
      std::vector<messages::SampledToken> sampled;
      sampled.reserve(wanting.size());
      int64_t next_row = 0;
      for (size_t r = 0; r < wanting.size(); ++r) {
        SequenceSampler& ss = samplers.at(wanting[r]);
        if (wanting_drafts[r] > 0) {
          const int64_t first = next_row;
          next_row += wanting_drafts[r] + 1;
          const Acceptance a = accept_drafts(
              ss.sampler, windows[r], [&](int32_t i) { return logits.row(first + i); }, ss.history,
              window_q[r].empty() ? nullptr : &window_q[r]);
          ss.history.pop_back();  // `next` joins the history with the slice that carries it
          sampled.push_back({wanting[r], a.next, 0.0f,
                             std::vector<int32_t>(windows[r].begin(), windows[r].begin() + a.accepted)});
          continue;
        }
        std::span<float> row = logits.row(next_row++);
        float logprob = 0;
        double lse = 0;
        if (ss.logprobs) {
          original.assign(row.begin(), row.end());
          const float mx = *std::max_element(row.begin(), row.end());
          for (float v : row) lse += std::exp(static_cast<double>(v - mx));
          lse = std::log(lse) + mx;
        }
        const int32_t token = ss.sampler.sample(row, ss.history);
        if (ss.logprobs) logprob = static_cast<float>(original[token] - lse);
        sampled.push_back({wanting[r], token, logprob, {}});
      }
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      return messages::step_result(plan->step(), sampled, "", ms, info, exported, swapped);
    } catch (const std::exception& e) {
      return messages::step_result(plan->step(), {}, e.what(), 0, info);
    }
  }
};

StepRunner::StepRunner(std::shared_ptr<Backend> backend) : impl_(std::make_unique<Impl>()) {
  impl_->backend = std::move(backend);
  Backend& b = *impl_->backend;
  impl_->info = {b.pages().capacity(), b.page_size(), static_cast<int32_t>(b.config().n_vocab), b.config().name,
                 b.can_copy_pages(), b.can_transfer_pages()};
}
StepRunner::~StepRunner() = default;
std::string StepRunner::run(const std::string& plan_bytes) { return impl_->run(plan_bytes); }

struct VerifierState {
  std::unique_ptr<StepRunner> runner;
};

caf::behavior verifier_actor(caf::stateful_actor<std::shared_ptr<VerifierState>>* self, std::shared_ptr<Backend> backend) {
  self->state = std::make_shared<VerifierState>();
  self->state->runner = std::make_unique<StepRunner>(std::move(backend));
  return {
      [self](step_atom, const std::string& plan) -> std::string { return self->state->runner->run(plan); },
  };
}

}  // namespace troupe::actors
