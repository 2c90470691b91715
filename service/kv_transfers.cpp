#include "service/kv_transfers.h"

#include <utility>

namespace troupe::service {
namespace {

std::string page_data(const wire::step::PageData* p) {
  const auto* d = p ? p->data() : nullptr;
  return d ? std::string(reinterpret_cast<const char*>(d->data()), d->size()) : std::string();
}

}  // namespace

int64_t SwappedPages::bytes() const {
  int64_t n = 0;
  for (const auto& d : data) n += static_cast<int64_t>(d.size());
  return n;
}

void KvTransfers::spill(std::string session_id, std::vector<int32_t> tokens, int32_t first, std::vector<int32_t> pages) {
  spills_.push_back({std::move(session_id), std::move(tokens), first, std::move(pages)});
}

void KvTransfers::restore(std::vector<int32_t> tokens, std::vector<messages::PageBytes> pages) {
  if (!pages.empty()) restores_.push_back({std::move(tokens), std::move(pages)});
}

StepPages KvTransfers::take(std::vector<PreemptedPages> swaps) {
  StepPages out;
  for (const auto& s : spills_) out.exports.insert(out.exports.end(), s.pages.begin(), s.pages.end());
  for (auto& r : restores_)
    for (auto& p : r.pages) out.imports.push_back(std::move(p));
  for (const auto& s : swaps) out.swap_outs.insert(out.swap_outs.end(), s.pages.begin(), s.pages.end());
  spills_in_step_ = std::exchange(spills_, {});
  restores_in_step_ = std::exchange(restores_, {});
  shifts_in_step_ = std::exchange(shifts_, {});
  swaps_in_step_ = std::move(swaps);
  for (const PlannedShift& sh : shifts_in_step_)
    for (const auto& m : sh.moves) out.shifts.push_back({sh.source, m.src_start, m.dst_table, m.dst_start, m.count, m.delta});
  return out;
}

std::vector<persistence::KvSpill> KvTransfers::exported(const wire::step::StepResult& result) {
  std::vector<persistence::KvSpill> out;
  const auto* pages = result.exported();
  uint32_t next = 0;
  for (auto& sp : spills_in_step_) {
    persistence::KvSpill k{sp.session_id, std::move(sp.tokens), sp.first, {}};
    for (size_t i = 0; i < sp.pages.size() && pages && next < pages->size(); ++i, ++next) {
      const auto* p = pages->Get(next);
      if (p->page() != sp.pages[i] || !p->data()) break;
      k.data.push_back(page_data(p));
    }
    if (k.data.size() == sp.pages.size()) out.push_back(std::move(k));
  }
  return out;
}

std::vector<SwappedPages> KvTransfers::swapped(const wire::step::StepResult& result) {
  std::vector<SwappedPages> out;
  const auto* pages = result.swapped();
  uint32_t next = 0;
  for (auto& sw : swaps_in_step_) {
    SwappedPages s{sw.id, std::move(sw.tokens), {}};
    for (size_t i = 0; i < sw.pages.size() && pages && next < pages->size(); ++i, ++next) {
      if (!pages->Get(next)->data()) break;
      s.data.push_back(page_data(pages->Get(next)));
    }
    if (s.data.size() == sw.pages.size()) out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::vector<int32_t>> KvTransfers::unwritten() const {
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : restores_in_step_) out.push_back(r.tokens);
  for (const auto& s : shifts_in_step_) out.push_back(s.tokens);
  return out;
}

std::vector<int32_t> KvTransfers::step_done() {
  std::vector<int32_t> held;
  for (auto& s : shifts_in_step_) held.insert(held.end(), s.source.begin(), s.source.end());
  spills_in_step_.clear();
  restores_in_step_.clear();
  shifts_in_step_.clear();
  swaps_in_step_.clear();
  return held;
}

bool SwapLedger::fits(size_t pages, int64_t page_bytes) const {
  const int64_t need = static_cast<int64_t>(pages) * page_bytes * 3;  // FP16: at most 2.5x a spilled page
  return bytes_ + need <= budget_;
}

void SwapLedger::add(uint64_t seq, std::vector<int32_t> tokens, int32_t pages, int64_t bytes) {
  erase(seq);
  bytes_ += bytes;
  entries_.emplace(seq, Entry{std::move(tokens), pages, bytes});
}

bool SwapLedger::erase(uint64_t seq) {
  auto it = entries_.find(seq);
  if (it == entries_.end()) return false;
  bytes_ -= it->second.bytes;
  entries_.erase(it);
  return true;
}

}  // namespace troupe::service
