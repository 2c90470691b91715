#include "service/kv_transfers.h"

#include <unordered_map>
#include <utility>

namespace troupe::service {
namespace {

std::string page_data(const wire::step::PageData* p) {
  const auto* d = p ? p->data() : nullptr;
  return d ? std::string(reinterpret_cast<const char*>(d->data()), d->size()) : std::string();
}

// A result's pages with data, by page id: each transfer finds its own pages
// whatever the order, and one page missing or foreign spoils only its own.
template <typename Pages>
std::unordered_map<int32_t, const wire::step::PageData*> by_page(const Pages* pages) {
  std::unordered_map<int32_t, const wire::step::PageData*> out;
  if (pages)
    for (const auto* p : *pages)
      if (p->data()) out.emplace(p->page(), p);
  return out;
}

// The data of every page of `wanted`, or nothing if any did not come back.
std::vector<std::string> whole(const std::vector<int32_t>& wanted,
                               const std::unordered_map<int32_t, const wire::step::PageData*>& got) {
  std::vector<std::string> data;
  for (int32_t page : wanted) {
    auto it = got.find(page);
    if (it == got.end()) return {};
    data.push_back(page_data(it->second));
  }
  return data;
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
    for (const auto& m : sh.moves)
      out.shifts.push_back({sh.source, m.src_start, std::span(&m.dst_page, 1), m.dst_start, m.count, m.delta});
  return out;
}

std::vector<persistence::KvSpill> KvTransfers::exported(const wire::step::StepResult& result) {
  std::vector<persistence::KvSpill> out;
  const auto got = by_page(result.exported());
  for (auto& sp : spills_in_step_) {
    std::vector<std::string> data = whole(sp.pages, got);
    if (data.size() == sp.pages.size())
      out.push_back({sp.session_id, std::move(sp.tokens), sp.first, std::move(data)});
  }
  return out;
}

std::vector<SwappedPages> KvTransfers::swapped(const wire::step::StepResult& result) {
  std::vector<SwappedPages> out;
  const auto got = by_page(result.swapped());
  for (auto& sw : swaps_in_step_) {
    std::vector<std::string> data = whole(sw.pages, got);
    if (data.size() == sw.pages.size()) out.push_back({sw.id, std::move(sw.tokens), std::move(data)});
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
