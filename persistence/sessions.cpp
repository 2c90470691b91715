#include "persistence/sessions.h"

#include <algorithm>

#include "messages/store_generated.h"

namespace troupe::persistence {
namespace {

std::string session_header_key(std::string_view id) { return std::string(1, 'h').append(id); }
std::string turns_prefix(std::string_view id) { return std::string(1, 't').append(id).append(1, '\0'); }
std::string moved_key(std::string_view id) { return std::string(1, 'm').append(id); }

// FlatBuffers reads fields in place and needs them aligned: a value seen
// through a scan points into RocksDB's block, at any address, so it is
// copied (std::string storage is aligned) before it is read.
template <typename T>
const T* verified(const std::string& bytes) {
  flatbuffers::Verifier v(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (!v.VerifyBuffer<T>(nullptr)) return nullptr;
  return flatbuffers::GetRoot<T>(bytes.data());
}

SessionRecord decode_header(const std::string& bytes) {
  const auto* h = verified<store::SessionHeader>(bytes);
  if (!h) throw StoreError("a stored session header is corrupt");
  SessionRecord s;
  if (h->session_id()) s.id = h->session_id()->str();
  s.created_ms = h->created_ms();
  s.updated_ms = h->updated_ms();
  if (h->model()) s.model = h->model()->str();
  s.model_fingerprint = h->model_fingerprint();
  if (h->tokens()) s.tokens.assign(h->tokens()->begin(), h->tokens()->end());
  s.sampling = messages::read_sampling(h->sampling());
  // A count, not a size to allocate: a damaged header may claim 2^31 turns.
  s.header_turns = std::max(0, h->turns());
  s.kv_pages = std::max(0, h->kv_pages());
  s.kv_model = h->kv_model();
  s.kv_layout = h->kv_layout();
  s.window_first_turn = std::max(0, h->window_first_turn());
  s.summary_through = std::max(0, h->summary_through());
  if (h->context_summary()) s.context_summary = h->context_summary()->str();
  if (h->owner()) s.owner = h->owner()->str();
  s.escalations = h->escalations();
  return s;
}

SessionTurnRecord decode_turn(const std::string& bytes) {
  const auto* t = verified<store::SessionTurn>(bytes);
  if (!t) throw StoreError("a stored session turn is corrupt");
  SessionTurnRecord r;
  if (t->messages())
    for (const auto* m : *t->messages()) {
      if (m->pinned()) r.pinned.push_back(static_cast<int32_t>(r.messages.size()));
      r.messages.push_back({m->role() ? m->role()->str() : "", m->content() ? m->content()->str() : ""});
    }
  r.finish_reason = t->finish_reason();
  r.prompt_tokens = t->prompt_tokens();
  r.completion_tokens = t->completion_tokens();
  r.time_ms = t->time_ms();
  return r;
}

}  // namespace

std::vector<ChatMessage> SessionRecord::history() const {
  std::vector<ChatMessage> all;
  for (const auto& t : turns) all.insert(all.end(), t.messages.begin(), t.messages.end());
  return all;
}

std::vector<wire::TurnState> SessionRecord::turn_states() const {
  std::vector<wire::TurnState> out(turns.size(), wire::TurnState::window);
  for (int32_t i = 0; i < static_cast<int32_t>(turns.size()) && i < std::max(window_first_turn, summary_through); ++i)
    out[static_cast<size_t>(i)] = i < summary_through ? wire::TurnState::summarized : wire::TurnState::archived;
  return out;
}

messages::SessionSummaryFields SessionRecord::summary() const {
  messages::SessionSummaryFields f;
  f.session_id = id;
  f.turns = turns.empty() ? header_turns : static_cast<int32_t>(turns.size());
  f.tokens = static_cast<int32_t>(tokens.size());
  f.created_ms = created_ms;
  f.updated_ms = updated_ms;
  f.model = model;
  f.owner = owner;
  f.escalations = escalations;
  return f;
}

std::string encode_session_header(const SessionRecord& s) {
  flatbuffers::FlatBufferBuilder fbb(256 + 4 * s.tokens.size());
  const auto id = fbb.CreateString(s.id);
  const auto model = fbb.CreateString(s.model);
  const auto tokens = fbb.CreateVector(s.tokens.data(), s.tokens.size());
  const auto sampling = messages::build_sampling(fbb, s.sampling);
  const auto summary = s.context_summary.empty() ? 0 : fbb.CreateString(s.context_summary);
  const auto owner = s.owner.empty() ? 0 : fbb.CreateString(s.owner);
  fbb.Finish(store::CreateSessionHeader(fbb, id, s.created_ms, s.updated_ms, static_cast<int32_t>(s.turns.size()), model,
                                        s.model_fingerprint, tokens, sampling, s.kv_pages, s.kv_model, s.kv_layout,
                                        s.window_first_turn, s.summary_through, summary, owner, s.escalations));
  return messages::finish_bytes(fbb);
}

std::string encode_session_turn(const SessionTurnRecord& t) {
  flatbuffers::FlatBufferBuilder fbb(256);
  std::vector<flatbuffers::Offset<wire::ChatMessage>> msgs;
  for (size_t i = 0; i < t.messages.size(); ++i) {
    const bool pinned = std::binary_search(t.pinned.begin(), t.pinned.end(), static_cast<int32_t>(i));
    msgs.push_back(wire::CreateChatMessage(fbb, fbb.CreateString(t.messages[i].role),
                                           fbb.CreateString(t.messages[i].content), 0, 0, pinned));
  }
  const auto v = fbb.CreateVector(msgs.data(), msgs.size());
  fbb.Finish(store::CreateSessionTurn(fbb, v, t.finish_reason, t.prompt_tokens, t.completion_tokens, t.time_ms));
  return messages::finish_bytes(fbb);
}

std::optional<SessionRecord> SessionBook::load(std::string_view id) const {
  const auto header = store_.get(Family::sessions, session_header_key(id));
  if (!header) return std::nullopt;
  SessionRecord s = decode_header(*header);
  const auto turns = static_cast<size_t>(s.header_turns);
  const std::string prefix = turns_prefix(id);
  store_.scan(Family::sessions, prefix, [&](std::string_view key, std::string_view value) {
    if (read_be32(key.substr(prefix.size())) >= turns) return false;  // never past the header's count
    s.turns.push_back(decode_turn(std::string(value)));
    return true;
  });
  if (s.turns.size() != turns)
    throw StoreError("session '" + std::string(id) + "' lists " + std::to_string(turns) + " turns; the store holds " +
                     std::to_string(s.turns.size()));
  return s;
}

std::vector<messages::SessionSummaryFields> SessionBook::list(std::string* damage) const {
  std::vector<messages::SessionSummaryFields> out;
  ScanDamage blocks;
  int64_t bad_records = 0;
  store_.scan(Family::sessions, "h", [&](std::string_view key, std::string_view value) {
    try {
      out.push_back(decode_header(std::string(value)).summary());
    } catch (const StoreError& e) {
      if (!damage) throw;
      if (bad_records++ == 0 && !blocks) *damage = "session '" + std::string(key.substr(1)) + "': " + e.what();
    }
    return true;
  }, damage ? &blocks : nullptr);
  if (blocks) *damage = blocks.first;
  if (damage && !damage->empty())
    *damage += " (" + std::to_string(blocks.blocks) + " damaged blocks, " + std::to_string(bad_records) +
               " unreadable records skipped)";
  return out;
}

void SessionBook::write_header(const SessionRecord& s, Batch& b) {
  b.put(Family::sessions, session_header_key(s.id), encode_session_header(s));
}

void SessionBook::append_last_turn(const SessionRecord& s) {
  if (s.turns.empty()) throw StoreError("session '" + s.id + "' has no turn to store");
  Batch b;
  b.put(Family::sessions, turns_prefix(s.id) + be32(static_cast<uint32_t>(s.turns.size() - 1)),
        encode_session_turn(s.turns.back()));
  b.put(Family::sessions, session_header_key(s.id), encode_session_header(s));
  store_.write(b, true);
}

bool SessionBook::remove(std::string_view id) {
  if (!store_.get(Family::sessions, session_header_key(id))) return false;
  Batch b;
  b.erase(Family::sessions, session_header_key(id));
  store_.scan(Family::sessions, turns_prefix(id), [&](std::string_view key, std::string_view) {
    b.erase(Family::sessions, std::string(key));
    return true;
  });
  store_.write(b, true);
  return true;
}

std::optional<SessionRecord> SessionBook::header(std::string_view id) const {
  const auto bytes = store_.get(Family::sessions, session_header_key(id));
  if (!bytes) return std::nullopt;
  try {
    return decode_header(*bytes);
  } catch (const StoreError&) {
    return std::nullopt;
  }
}

std::vector<SessionRecord> SessionBook::headers(std::string_view after, size_t max) const {
  std::vector<SessionRecord> out;
  store_.scan_after(Family::sessions, "h", after.empty() ? "" : session_header_key(after), [&](std::string_view, std::string_view v) {
    try {
      out.push_back(decode_header(std::string(v)));
    } catch (const StoreError&) {
      // `troupe store check` reports it; retention leaves what it cannot read.
    }
    return out.size() < max;
  });
  return out;
}

int64_t SessionBook::count() const {
  int64_t n = 0;
  store_.scan(Family::sessions, "h", [&](std::string_view, std::string_view) {
    ++n;
    return true;
  });
  return n;
}

int64_t SessionBook::erase(std::string_view id, Batch& b) const {
  int64_t bytes = 0;
  const std::string key = session_header_key(id);
  if (const auto header = store_.get(Family::sessions, key)) bytes += static_cast<int64_t>(key.size() + header->size());
  b.erase(Family::sessions, key);
  store_.scan(Family::sessions, turns_prefix(id), [&](std::string_view k, std::string_view v) {
    bytes += static_cast<int64_t>(k.size() + v.size());
    b.erase(Family::sessions, std::string(k));
    return true;
  });
  return bytes;
}

std::optional<StoredSession> SessionBook::stored(std::string_view id) const {
  const auto header = store_.get(Family::sessions, session_header_key(id));
  if (!header) return std::nullopt;
  StoredSession out{*header, {}};
  const auto turns = static_cast<size_t>(decode_header(*header).header_turns);
  const std::string prefix = turns_prefix(id);
  store_.scan(Family::sessions, prefix, [&](std::string_view key, std::string_view value) {
    if (read_be32(key.substr(prefix.size())) >= turns) return false;
    out.turns.emplace_back(value);
    decode_turn(out.turns.back());  // throws when damaged
    return true;
  });
  if (out.turns.size() != turns)
    throw StoreError("session '" + std::string(id) + "' lists " + std::to_string(turns) + " turns; the store holds " +
                     std::to_string(out.turns.size()));
  return out;
}

SessionRecord SessionBook::adopt(std::string_view id, const StoredSession& s, Batch& b) const {
  SessionRecord r;
  try {
    r = decode_header(s.header);
    for (const std::string& t : s.turns) r.turns.push_back(decode_turn(t));
  } catch (const StoreError& e) {
    throw StoreError("session '" + std::string(id) + "' handed over: " + e.what());
  }
  if (r.id != id) throw StoreError("session '" + std::string(id) + "' handed over under the id '" + r.id + "'");
  if (static_cast<size_t>(r.header_turns) != s.turns.size())
    throw StoreError("session '" + std::string(id) + "' handed over with " + std::to_string(s.turns.size()) +
                     " turns; its header counts " + std::to_string(r.header_turns));
  b.put(Family::sessions, session_header_key(id), s.header);
  for (size_t i = 0; i < s.turns.size(); ++i)
    b.put(Family::sessions, turns_prefix(id) + be32(static_cast<uint32_t>(i)), s.turns[i]);
  b.erase(Family::sessions, moved_key(id));
  return r;
}

void SessionBook::mark_moved(std::string_view id, std::string_view to, Batch& b) const {
  b.put(Family::sessions, moved_key(id), std::string(to));
}

std::optional<std::string> SessionBook::moved_to(std::string_view id) const {
  return store_.get(Family::sessions, moved_key(id));
}

}  // namespace troupe::persistence
