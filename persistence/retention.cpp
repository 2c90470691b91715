#include "persistence/retention.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "persistence/kv_pages.h"

namespace troupe::persistence {

int64_t default_sweep_interval_ms(const RetentionPolicy& p) {
  constexpr int64_t kMin = 1000, kMax = 60000;
  int64_t shortest = kMax * 10;
  for (const int64_t ttl : {p.session_ttl_ms, p.job_ttl_ms})
    if (ttl > 0) shortest = std::min(shortest, ttl);
  return std::clamp(shortest / 10, kMin, kMax);
}

Sweeper::Sweeper(Store& store, RetentionPolicy policy, std::function<bool(const std::string&)> busy)
    : store_(store), policy_(policy), busy_(std::move(busy)), sessions_(store), jobs_(store) {}

std::string cap_beyond_disk(const std::string& dir, int64_t cap, int64_t stored) {
  std::error_code ec;
  const auto space = std::filesystem::space(dir, ec);
  if (cap <= 0 || ec) return {};
  const int64_t room = static_cast<int64_t>(std::min<uintmax_t>(space.available, INT64_MAX / 2)) + stored;
  if (room >= cap) return {};
  char why[512];
  std::snprintf(why, sizeof why,
                "--max-store-bytes is %.1f MiB but the disk under %s has room for %.1f MiB (the store included): "
                "it will fill first",
                static_cast<double>(cap) / (1 << 20), dir.c_str(), static_cast<double>(room) / (1 << 20));
  return why;
}

void Sweeper::count(const SessionRecord& s, int delta, std::vector<std::string>* keys) {
  if (s.kv_pages <= 0) return;
  const KvIdentity identity{s.kv_model, s.kv_layout};
  for (auto& k : kv_page_keys(identity, s.tokens, s.kv_pages, policy_.page_size)) {
    refs_[k] += delta;
    if (keys) keys->push_back(std::move(k));
  }
}

void Sweeper::start(int64_t now) {
  now_ = now;
  counts_ = {};
  cursor_.clear();
  if (policy_.max_store_bytes > 0) {
    counts_.store_bytes = store_.approximate_bytes();
    counts_.over_cap = counts_.store_bytes > policy_.max_store_bytes;
  }
  phase_ = policy_.session_ttl_ms > 0 || counts_.over_cap ? Phase::read_sessions : Phase::read_jobs;
}

void Sweeper::read_sessions() {
  const auto headers = sessions_.headers(cursor_, policy_.slice);
  for (const auto& s : headers) {
    SessionSeen& seen = seen_sessions_[s.id];
    seen.updated_ms = s.updated_ms;
    count(s, +1, &seen.pages);
  }
  if (headers.size() < policy_.slice) {
    cursor_.clear();
    phase_ = Phase::read_jobs;
  } else {
    cursor_ = headers.back().id;
  }
}

void Sweeper::read_jobs() {
  if (policy_.job_ttl_ms <= 0 && !counts_.over_cap) return decide();
  const auto stamps = jobs_.stamps(cursor_, policy_.slice);
  for (const auto& j : stamps)
    if (j.state != wire::JobState::running) seen_jobs_[j.id] = j;  // a running job is never swept
  if (stamps.size() < policy_.slice) decide();
  else cursor_ = stamps.back().id;
}

void Sweeper::decide() {
  const auto expired = [&](int64_t updated_ms, int64_t ttl) { return ttl > 0 && now_ - updated_ms >= ttl; };
  for (const auto& [id, s] : seen_sessions_)
    (expired(s.updated_ms, policy_.session_ttl_ms) ? expired_ : evictable_).push_back({s.updated_ms, false, id});
  for (const auto& [id, j] : seen_jobs_)
    (expired(j.updated_ms, policy_.job_ttl_ms) ? expired_ : evictable_).push_back({j.updated_ms, true, id});
  if (!counts_.over_cap) evictable_.clear();
  // Newest first: the oldest is taken from the back.
  const auto newest_first = [](const Candidate& a, const Candidate& b) { return b < a; };
  std::sort(expired_.begin(), expired_.end(), newest_first);
  std::sort(evictable_.begin(), evictable_.end(), newest_first);
  cursor_.clear();
  phase_ = Phase::expire;
}

bool Sweeper::delete_session(const std::string& id, Batch& b) {
  auto it = seen_sessions_.find(id);
  if (it == seen_sessions_.end() || written_.count(id) || busy_(id)) return false;
  counts_.bytes += sessions_.erase(id, b);
  for (const auto& key : it->second.pages) {
    auto ref = refs_.find(key);
    if (ref == refs_.end() || --ref->second > 0) continue;
    refs_.erase(ref);
    if (const auto page = store_.get(Family::kv_pages, key)) {
      counts_.bytes += static_cast<int64_t>(key.size() + page->size());
      ++counts_.pages;
      b.erase(Family::kv_pages, key);
    }
  }
  seen_sessions_.erase(it);
  ++counts_.sessions;
  return true;
}

bool Sweeper::delete_job(const std::string& id, Batch& b) {
  auto it = seen_jobs_.find(id);
  if (it == seen_jobs_.end()) return false;
  // Jobs are written by the job actor, not through session_written: read
  // the header again, so one written since (say, cancelled) is left alone.
  const auto now = jobs_.stamp(id);
  if (!now || now->state == wire::JobState::running || now->updated_ms != it->second.updated_ms) return false;
  counts_.bytes += jobs_.erase(id, b);
  seen_jobs_.erase(it);
  ++counts_.jobs;
  return true;
}

void Sweeper::delete_some(std::vector<Candidate>& from, SweepStep& out, const std::function<bool()>& enough) {
  Batch b;
  size_t deleted = 0;
  while (!from.empty() && deleted < policy_.slice && !enough()) {
    const Candidate c = std::move(from.back());
    from.pop_back();
    if (!(c.job ? delete_job(c.id, b) : delete_session(c.id, b))) continue;
    (c.job ? out.jobs : out.sessions).push_back(c.id);
    ++deleted;
  }
  if (!b.empty()) store_.write(b, false);
}

void Sweeper::orphans() {
  Batch b;
  size_t read = 0;
  std::string last;
  store_.scan_after(Family::kv_pages, "", cursor_, [&](std::string_view key, std::string_view value) {
    last.assign(key);
    if (!refs_.count(last)) {
      counts_.bytes += static_cast<int64_t>(key.size() + value.size());
      ++counts_.pages;
      b.erase(Family::kv_pages, last);
    }
    return ++read < policy_.slice && !freed_enough();
  });
  if (!b.empty()) store_.write(b, false);
  cursor_ = last;
  if (read < policy_.slice || freed_enough()) phase_ = Phase::evict;
}

void Sweeper::end_pass() {
  phase_ = Phase::idle;
  seen_sessions_.clear(), seen_jobs_.clear(), written_.clear(), refs_.clear(), expired_.clear(), evictable_.clear();
}

void Sweeper::session_written(const std::string& id) {
  if (!running()) return;
  written_.insert(id);
  // Pages it lists now may be ones another session being deleted lists too.
  if (const auto s = sessions_.header(id)) count(*s, +1);
}

SweepStep Sweeper::step(int64_t unix_now_ms) {
  SweepStep out;
  try {
    if (phase_ == Phase::idle) start(unix_now_ms);
    switch (phase_) {
      case Phase::read_sessions: read_sessions(); break;
      case Phase::read_jobs: read_jobs(); break;
      case Phase::expire:
        delete_some(expired_, out, [] { return false; });
        if (expired_.empty()) phase_ = counts_.over_cap && !freed_enough() ? Phase::orphans : Phase::evict;
        break;
      case Phase::orphans: orphans(); break;
      case Phase::evict:
        delete_some(evictable_, out, [this] { return !counts_.over_cap || freed_enough(); });
        if (evictable_.empty() || !counts_.over_cap || freed_enough()) phase_ = Phase::idle;
        break;
      case Phase::idle: break;
    }
  } catch (...) {
    end_pass();
    throw;
  }
  if (phase_ == Phase::idle) {
    out.done = true;
    out.counts = counts_;
    out.compact = counts_.over_cap && counts_.any();
    end_pass();
  }
  return out;
}

}  // namespace troupe::persistence
