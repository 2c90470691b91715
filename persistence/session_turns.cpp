#include "persistence/session_turns.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "messages/session_frames.h"

namespace troupe::persistence {
namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void log_transfer(const char* verb, const std::string& session, const std::vector<std::string>& data, int64_t us) {
  size_t bytes = 0;
  for (const auto& d : data) bytes += d.size();
  std::fprintf(stderr, "troupe serve: kv: session '%s' %s %zu pages (%.2f MiB) in %.1f ms\n", session.c_str(), verb,
               data.size(), static_cast<double>(bytes) / (1 << 20), static_cast<double>(us) / 1000.0);
}

std::vector<messages::RoleContent> role_content(const std::vector<ChatMessage>& history) {
  std::vector<messages::RoleContent> out;
  out.reserve(history.size());
  for (const auto& m : history) out.emplace_back(m.role, m.content);
  return out;
}

}  // namespace

int32_t common_pages(std::span<const int32_t> a, std::span<const int32_t> b, int32_t page_size) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return static_cast<int32_t>(n / static_cast<size_t>(page_size));
}

SessionTurns::SessionTurns(Store& store, SessionPolicy policy)
    : store_(store),
      policy_(std::move(policy)),
      sessions_(store),
      kv_(store, policy_.kv_identity, policy_.page_size, policy_.page_bytes) {}

bool SessionTurns::kv_valid(const SessionRecord& s) const {
  return policy_.kv && s.kv_pages > 0 && s.kv_model == policy_.kv_identity.model &&
         s.kv_layout == policy_.kv_identity.layout;
}

const SessionRecord* SessionTurns::find(const std::string& id) {
  if (auto it = cache_.find(id); it != cache_.end()) {
    it->second.used = ++tick_;
    return &it->second.record;
  }
  auto loaded = sessions_.load(id);
  if (!loaded) return nullptr;
  return remember(id, std::move(*loaded));
}

const SessionRecord* SessionTurns::remember(const std::string& id, SessionRecord record) {
  Cached& c = cache_[id];
  c.record = std::move(record);
  c.used = ++tick_;
  while (cache_.size() > policy_.max_cached) {
    auto oldest = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->first != id && !busy_.count(it->first) && (oldest == cache_.end() || it->second.used < oldest->second.used))
        oldest = it;
    if (oldest == cache_.end()) break;  // every other one is busy
    cache_.erase(oldest);
  }
  return &c.record;
}

SessionStart SessionTurns::begin(const std::string& id, int64_t now_ms, const Principal& who) {
  SessionStart start;
  if (auto b = busy_.find(id); b != busy_.end()) {
    start.error = who.may_use(b->second) ? wire::ErrorCode::session_busy : wire::ErrorCode::forbidden;
    start.message = start.error == wire::ErrorCode::forbidden
                        ? "session '" + id + "' belongs to another client"
                        : "session '" + id + "' has a turn running; send the next turn after its Done";
    return start;
  }
  try {
    if (const SessionRecord* s = find(id)) {
      if (!who.may_use(s->owner)) {
        start.error = wire::ErrorCode::forbidden;
        start.message = "session '" + id + "' belongs to another client";
        return start;
      }
      for (const auto& t : s->turns) {
        start.turns.push_back(t.messages);
        start.pinned.push_back(t.pinned);
      }
      start.summary_through = s->summary_through;
      start.context_summary = s->context_summary;
      start.window_first_turn = s->window_first_turn;
      start.model = s->model;
      start.escalations = s->escalations;
      if (kv_valid(*s)) {
        start.kv_stored = s->kv_pages;
        start.kv_tokens = s->tokens;
        auto last = last_turn_ms_.find(id);
        const bool in_memory = last != last_turn_ms_.end() && now_ms - last->second < policy_.idle_ms;
        if (!in_memory) {
          const int64_t t0 = now_us();
          start.kv_data = kv_.get(s->tokens, s->kv_pages);
          if (!start.kv_data.empty()) log_transfer("read", id, start.kv_data, now_us() - t0);
        }
      }
    }
  } catch (const std::exception& e) {
    start = SessionStart{};
    start.error = wire::ErrorCode::storage_failed;
    start.message = "session '" + id + "' cannot be read: " + e.what();
    return start;
  }
  busy_.emplace(id, who.name);
  return start;
}

messages::Bytes SessionTurns::commit(SessionCommit c, int64_t now_ms, int64_t unix_now_ms) {
  std::string owner;
  if (auto b = busy_.find(c.session_id); b != busy_.end()) owner = b->second, busy_.erase(b);
  SessionRecord next;
  bool unreadable = false;
  try {
    if (const SessionRecord* s = find(c.session_id)) next = *s;
  } catch (const std::exception&) {
    unreadable = true;  // begin answered the same: write a fresh session over it
  }
  const bool created = next.id.empty() && !unreadable;
  if (next.id.empty()) {
    next.id = c.session_id;
    next.owner = owner;
    next.created_ms = unix_now_ms;
  }
  next.updated_ms = unix_now_ms;
  // Stored pages stay valid for the prefix the new history shares.
  next.kv_pages = kv_valid(next) ? std::min(next.kv_pages, common_pages(next.tokens, c.tokens, policy_.page_size)) : 0;
  next.kv_model = policy_.kv_identity.model;
  next.kv_layout = policy_.kv_identity.layout;
  next.model = c.model.empty() ? policy_.model_name : c.model;
  if (c.escalated) ++next.escalations;
  next.model_fingerprint = policy_.model_fingerprint;
  next.tokens = std::move(c.tokens);
  next.sampling = std::move(c.sampling);
  next.window_first_turn = c.window_first_turn;
  SessionTurnRecord turn;
  turn.messages = std::move(c.messages);
  turn.pinned = std::move(c.pinned);
  turn.finish_reason = c.done.reason;
  turn.prompt_tokens = c.done.prompt_tokens;
  turn.completion_tokens = c.done.completion_tokens;
  turn.time_ms = unix_now_ms;
  next.turns.push_back(std::move(turn));
  try {
    sessions_.append_last_turn(next);
  } catch (const std::exception& e) {
    return messages::error_response(c.client_id, wire::ErrorCode::storage_failed,
                                    "the turn was not saved, session '" + c.session_id + "' is unchanged: " + e.what());
  }
  if (created && stored_ >= 0) ++stored_;
  last_turn_ms_[c.session_id] = now_ms;
  if (last_turn_ms_.size() > policy_.max_cached)  // past the idle time a session's pages are freed anyway
    std::erase_if(last_turn_ms_, [&](const auto& e) { return now_ms - e.second >= policy_.idle_ms; });
  remember(c.session_id, std::move(next));
  return messages::done_response(c.client_id, c.done);
}

int32_t SessionTurns::spill(const KvSpill& spill) {
  if (!policy_.kv || spill.data.empty()) return 0;
  try {
    const SessionRecord* s = find(spill.session_id);
    if (!s) return 0;  // deleted meanwhile
    SessionRecord next = *s;
    // Only pages of the history the session has now, contiguous with what is stored.
    const int32_t valid = common_pages(next.tokens, spill.tokens, policy_.page_size);
    const int32_t have = kv_valid(next) ? next.kv_pages : 0;
    if (spill.first > have) return 0;
    Batch b;
    kv_.put(spill.tokens, spill.first, spill.data, b);
    next.kv_pages = std::max(have, std::min(valid, spill.first + static_cast<int32_t>(spill.data.size())));
    next.kv_model = policy_.kv_identity.model;
    next.kv_layout = policy_.kv_identity.layout;
    sessions_.write_header(next, b);
    const int64_t t0 = now_us();
    store_.write(b, false);  // a page lost in a crash is recomputed
    if (spill.data.size() >= 32) log_transfer("wrote", spill.session_id, spill.data, now_us() - t0);
    remember(spill.session_id, std::move(next));
    return static_cast<int32_t>(spill.data.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe serve: KV pages of session '%s' not spilled: %s\n", spill.session_id.c_str(), e.what());
    return 0;
  }
}

bool SessionTurns::summarize(const std::string& id, const std::string& summary, int32_t through) {
  try {
    const SessionRecord* s = find(id);
    if (!s) return false;
    if (through <= s->summary_through || through > static_cast<int32_t>(s->turns.size())) return true;
    SessionRecord next = *s;
    // An empty summary (the model wrote nothing) keeps the earlier text; the
    // turns it covers still count as summarized (their statements join the memory).
    if (!summary.empty()) next.context_summary = summary;
    next.summary_through = through;
    Batch b;
    sessions_.write_header(next, b);
    store_.write(b, false);  // lost in a crash: written again when next needed
    remember(id, std::move(next));
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe serve: the summary of session '%s' was not stored: %s\n", id.c_str(), e.what());
    return false;
  }
}

messages::Bytes SessionTurns::list(uint64_t request_id, const Principal& who) {
  try {
    std::string damage;
    auto all = sessions_.list(&damage);
    std::erase_if(all, [&](const messages::SessionSummaryFields& s) { return !who.may_use(s.owner); });
    if (!damage.empty())
      std::fprintf(stderr, "troupe serve: listing sessions skipped damage: %s; run `troupe store check`\n", damage.c_str());
    return messages::session_list_response(request_id, all);
  } catch (const std::exception& e) {
    return messages::error_response(request_id, wire::ErrorCode::storage_failed, e.what());
  }
}

messages::Bytes SessionTurns::show(uint64_t request_id, const std::string& id, const Principal& who) {
  try {
    const SessionRecord* s = find(id);
    if (!s) return messages::error_response(request_id, wire::ErrorCode::unknown_session, "no session '" + id + "'");
    if (!who.may_use(s->owner))
      return messages::error_response(request_id, wire::ErrorCode::forbidden, "session '" + id + "' belongs to another client");
    const auto msgs = role_content(s->history());
    const auto states = s->turn_states();
    std::vector<int32_t> sizes;
    std::vector<wire::TurnUsage> usage;
    std::vector<int32_t> pinned;
    int32_t at = 0;
    for (const auto& t : s->turns) {
      for (int32_t i : t.pinned) pinned.push_back(at + i);
      at += static_cast<int32_t>(t.messages.size());
      sizes.push_back(static_cast<int32_t>(t.messages.size()));
      usage.emplace_back(t.time_ms, t.prompt_tokens, t.completion_tokens, t.finish_reason);
    }
    return messages::session_response(request_id, s->summary(), msgs, states, s->context_summary, sizes, usage, pinned);
  } catch (const std::exception& e) {
    return messages::error_response(request_id, wire::ErrorCode::storage_failed, e.what());
  }
}

// Its stored pages that no other stored session lists: a prefix shared
// with another session (one system prompt) keeps its pages for that one.
std::vector<std::string> SessionTurns::unshared_pages(const SessionRecord& s) const {
  std::vector<std::string> mine = kv_page_keys({s.kv_model, s.kv_layout}, s.tokens, s.kv_pages, policy_.page_size);
  std::set<std::string> shared;
  for (std::string after;;) {
    const std::vector<SessionRecord> batch = sessions_.headers(after, 256);
    if (batch.empty()) break;
    for (const SessionRecord& other : batch) {
      if (other.id == s.id || other.kv_pages <= 0) continue;
      for (auto& k : kv_page_keys({other.kv_model, other.kv_layout}, other.tokens, other.kv_pages, policy_.page_size))
        shared.insert(std::move(k));
    }
    after = batch.back().id;
  }
  std::erase_if(mine, [&](const std::string& k) { return shared.count(k) > 0; });
  return mine;
}

int64_t SessionTurns::stored() {
  if (stored_ < 0) stored_ = sessions_.count();
  return stored_;
}

messages::Bytes SessionTurns::remove(uint64_t request_id, const std::string& id, const Principal& who) {
  try {
    const SessionRecord* s = find(id);
    if (s && !who.may_use(s->owner))
      return messages::error_response(request_id, wire::ErrorCode::forbidden, "session '" + id + "' belongs to another client");
    if (busy_.count(id))
      return messages::error_response(request_id, wire::ErrorCode::session_busy, "session '" + id + "' has a turn running");
    if (s && s->kv_pages > 0) {
      Batch b;
      for (const auto& key : unshared_pages(*s)) b.erase(Family::kv_pages, key);
      store_.write(b, false);
    }
    if (!sessions_.remove(id))
      return messages::error_response(request_id, wire::ErrorCode::unknown_session, "no session '" + id + "'");
    cache_.erase(id);
    last_turn_ms_.erase(id);
    if (stored_ > 0) --stored_;
    return messages::ack_response(request_id, "deleted session '" + id + "'");
  } catch (const std::exception& e) {
    return messages::error_response(request_id, wire::ErrorCode::storage_failed, e.what());
  }
}

SessionHandOff SessionTurns::hand_off(const std::string& id, const std::string& to, const Principal& who, int64_t now_ms,
                                      int64_t hold_ms) {
  SessionHandOff h;
  try {
    const SessionRecord* s = find(id);
    if (!s) {
      h.error = wire::ErrorCode::unknown_session;
      h.message = "no session '" + id + "'";
      return h;
    }
    if (!who.may_use(s->owner)) {
      h.error = wire::ErrorCode::forbidden;
      h.message = "session '" + id + "' belongs to another client";
      return h;
    }
    if (busy_.count(id)) {
      h.error = wire::ErrorCode::session_busy;
      h.message = "session '" + id + "' has a turn running here (or is being handed over); send the next turn after its Done";
      return h;
    }
    auto records = sessions_.stored(id);
    if (!records) throw StoreError("session '" + id + "' is gone");
    h.records = std::move(*records);
    if (s->kv_pages > 0) h.kv_data = kv_.get(s->tokens, s->kv_pages);
    busy_.emplace(id, s->owner);
    handing_[id] = {to, now_ms + hold_ms};
  } catch (const std::exception& e) {
    h = SessionHandOff{};
    h.error = wire::ErrorCode::storage_failed;
    h.message = "session '" + id + "' cannot be handed over: " + e.what();
  }
  return h;
}

std::string SessionTurns::hand_off_done(const std::string& id, const std::string& to) {
  auto it = handing_.find(id);
  if (it == handing_.end() || it->second.to != to) return "no hand-off of session '" + id + "' to " + to + " is pending";
  try {
    const SessionRecord* s = find(id);
    Batch b;
    if (s)
      for (const auto& key : unshared_pages(*s)) b.erase(Family::kv_pages, key);
    sessions_.erase(id, b);
    sessions_.mark_moved(id, to, b);
    store_.write(b, true);
    handing_.erase(it);
    busy_.erase(id);
    forget(id);
    std::fprintf(stderr, "troupe serve: session '%s' handed to the front end at %s\n", id.c_str(), to.c_str());
    return "";
  } catch (const std::exception& e) {
    // Still here, and still held until the hand-off expires: the taker has a copy too.
    return "session '" + id + "' stays here: " + e.what();
  }
}

void SessionTurns::hand_off_abort(const std::string& id, const std::string& to) {
  auto it = handing_.find(id);
  if (it == handing_.end() || it->second.to != to) return;
  handing_.erase(it);
  busy_.erase(id);
}

void SessionTurns::expire_hand_offs(int64_t now_ms) {
  for (auto it = handing_.begin(); it != handing_.end();) {
    if (it->second.until_ms > now_ms) {
      ++it;
      continue;
    }
    std::fprintf(stderr, "troupe serve: the hand-off of session '%s' to %s was never confirmed; it stays here\n",
                 it->first.c_str(), it->second.to.c_str());
    busy_.erase(it->first);
    it = handing_.erase(it);
  }
}

std::string SessionTurns::take(const std::string& id, const SessionHandOff& h) {
  try {
    if (find(id)) return "this front end holds a session '" + id + "' already";
    Batch b;
    SessionRecord r = sessions_.adopt(id, h.records, b);
    // Pages written under another model or layout would never be read: dropped.
    if (!h.kv_data.empty() && kv_valid(r)) {
      const int32_t pages = std::min<int32_t>(r.kv_pages, static_cast<int32_t>(h.kv_data.size()));
      kv_.put(r.tokens, 0, std::span<const std::string>(h.kv_data).first(static_cast<size_t>(pages)), b);
      if (pages < r.kv_pages) {
        r.kv_pages = pages;
        sessions_.write_header(r, b);
      }
    } else if (r.kv_pages > 0) {
      r.kv_pages = 0;
      sessions_.write_header(r, b);
    }
    store_.write(b, true);
    if (stored_ >= 0) ++stored_;
    remember(id, std::move(r));
    std::fprintf(stderr, "troupe serve: session '%s' taken over from another front end (%zu turns, %zu KV pages)\n",
                 id.c_str(), h.records.turns.size(), h.kv_data.size());
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string SessionTurns::moved_to(const std::string& id) const {
  try {
    return sessions_.moved_to(id).value_or("");
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace troupe::persistence
