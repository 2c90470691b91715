#include "worker/draft_runner.h"

#include <exception>
#include <unordered_map>
#include <vector>

#include "engine/model_config.h"
#include "engine/speculation/model_drafter.h"
#include "engine/vocabulary.h"
#include "messages/draft_frames.h"
#include "worker/sequence_sampling.h"

namespace troupe::worker {

struct DraftRunner::Impl {
  struct Sequence {
    std::vector<int32_t> history;  // as of its last plan
    SamplingParams sampling;
    uint64_t used = 0;             // plan count when last drafted
  };
  // A front end that dies never says which sequences ended: beyond this
  // many, the least recently drafted are dropped (a plan for one of them
  // again gets `resync`).
  static constexpr size_t kMaxSequences = 4096;
  uint64_t plans = 0;
  std::shared_ptr<Backend> backend;
  std::unique_ptr<ModelDrafter> drafter;
  messages::DrafterInfo info;
  std::unordered_map<uint64_t, Sequence> sequences;

  // The sequence's history after this plan, or nullptr when it must resync
  // (we lost, or never had, the history before `start`).
  Sequence* update(const wire::draft::DraftSequence& d) {
    const std::string who = "draft sequence " + std::to_string(d.sequence_id());
    if (d.start() < 0) throw std::invalid_argument(who + " starts at " + std::to_string(d.start()));
    auto it = sequences.find(d.sequence_id());
    if (d.start() == 0) {
      if (!d.sampling()) throw std::invalid_argument(who + " starts without its sampling");
      const SamplingParams sp = sampling_params(d.sampling());
      sp.validate();
      it = sequences.insert_or_assign(d.sequence_id(), Sequence{{}, sp}).first;
    } else if (it == sequences.end() || static_cast<size_t>(d.start()) > it->second.history.size()) {
      return nullptr;
    }
    Sequence& s = it->second;
    s.used = plans;
    s.history.resize(static_cast<size_t>(d.start()));
    if (d.tokens())
      for (int32_t t : *d.tokens()) {
        if (t < 0 || t >= info.n_vocab) throw std::invalid_argument(who + " has token " + std::to_string(t));
        s.history.push_back(t);
      }
    if (s.history.empty()) throw std::invalid_argument(who + " has no tokens");
    return &s;
  }

  void evict_least_recent() {
    while (sequences.size() > kMaxSequences) {
      auto oldest = sequences.begin();
      for (auto it = sequences.begin(); it != sequences.end(); ++it)
        if (it->second.used < oldest->second.used) oldest = it;
      drafter->forget(oldest->first);
      sequences.erase(oldest);
    }
  }

  std::string run(const std::string& bytes) {
    const auto* plan = messages::check_draft_plan(bytes);
    if (!plan) return messages::draft_result(0, {}, "malformed draft plan", 0, drafter->round_ms(), info);
    ++plans;
    try {
      if (plan->forget())
        for (uint64_t id : *plan->forget()) {
          sequences.erase(id);
          drafter->forget(id);
        }
      std::vector<messages::DraftProposalFields> out;
      std::vector<ModelDrafter::Request> requests;
      std::vector<size_t> slot;  // request -> index in out
      if (plan->sequences())
        for (const auto* d : *plan->sequences()) {
          messages::DraftProposalFields p;
          p.sequence_id = d->sequence_id();
          if (Sequence* s = update(*d)) {
            requests.push_back({d->sequence_id(), s->history, d->k(), s->sampling});
            slot.push_back(out.size());
          } else {
            p.resync = true;  // ask for all of its history
          }
          out.push_back(std::move(p));
        }
      auto proposals = requests.empty() ? std::vector<ModelDrafter::Proposal>() : drafter->propose(requests);
      evict_least_recent();
      for (size_t i = 0; i < proposals.size(); ++i) {
        out[slot[i]].tokens = std::move(proposals[i].tokens);
        out[slot[i]].q = std::move(proposals[i].dists);
      }
      return messages::draft_result(plan->step(), out, "", requests.empty() ? 0 : drafter->last_ms(), drafter->round_ms(),
                                    info, requests.empty() ? 0 : drafter->catch_up_ms());
    } catch (const std::exception& e) {
      return messages::draft_result(plan->step(), {}, e.what(), 0, drafter->round_ms(), info);
    }
  }
};

DraftRunner::DraftRunner(std::shared_ptr<Backend> backend, std::string name) : impl_(std::make_unique<Impl>()) {
  impl_->backend = std::move(backend);
  impl_->drafter = std::make_unique<ModelDrafter>(*impl_->backend);
  impl_->drafter->calibrate();
  const Vocabulary v = load_vocabulary(impl_->backend->file());
  impl_->info = {name.empty() ? impl_->backend->config().name : std::move(name),
                 static_cast<int32_t>(impl_->backend->config().n_vocab), vocabulary_fingerprint(v)};
}
DraftRunner::~DraftRunner() = default;
std::string DraftRunner::run(const std::string& plan_bytes) { return impl_->run(plan_bytes); }

}  // namespace troupe::worker
