#pragma once
// The session turn policy, as the persistence actor applies it: one turn of
// a session at a time; a turn is acknowledged (its Done sent) only once it
// is durable; spilled KV pages stay valid for the prefix of the token
// history that later turns keep, under the model and layout that wrote them.
//
//   begin(id)     → the stored history (and stored KV pages, unless the
//                   session's pages are still in the server's memory); the
//                   session is busy until commit() or release()
//   commit(turn)  → turn + header in one sync batch, then the Done
//   spill(pages)  → pages of the current history, contiguous with those stored
//
// Sessions read or written are cached (the store is read once per session).
// Large KV transfers are logged on stderr, one line each (what operators and
// ops/bench/sessions.sh read).
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/chat_template.h"
#include "engine/model_identity.h"
#include "messages/client_frames.h"
#include "persistence/kv_pages.h"
#include "persistence/principal.h"
#include "persistence/sessions.h"

namespace troupe::persistence {

// The answer to begin(): the stored history (empty for a new session), or
// why the turn cannot start.
struct SessionStart {
  wire::ErrorCode error = wire::ErrorCode::none;
  std::string message;
  std::vector<std::vector<ChatMessage>> turns;  // each stored turn's messages (its new ones, then the answer)
  std::vector<std::vector<int32_t>> pinned;     // each turn's pinned messages (indices; may be shorter than turns)
  // The summary so far (SessionRecord): it stands for turns [0, summary_through).
  int32_t summary_through = 0;
  std::string context_summary;
  int32_t window_first_turn = 0;  // the first turn the last prompt kept (turns before it stay out)
  // Stored KV of the session's token history: kv_data[i] holds the page of
  // kv_tokens[i * page_size, (i + 1) * page_size). kv_data is empty when
  // the session's pages are still in memory, or none is stored for this
  // model and layout.
  std::vector<int32_t> kv_tokens;
  std::vector<std::string> kv_data;
  int32_t kv_stored = 0;  // stored pages of kv_tokens (kv_data may be empty)
  // Cascade routing (service/cascade.h): the tier that answered the last
  // turn, and how many turns escalated from a smaller tier to a larger one.
  std::string model;
  int32_t escalations = 0;
  // The session was just taken over from another front end and is stored
  // here (even if this turn then failed): the holder may let it go.
  bool adopted = false;
};

// A finished session turn, to be made durable before its Done is sent.
struct SessionCommit {
  std::string peer;
  uint64_t client_id = 0;
  std::string session_id;
  std::vector<ChatMessage> messages;  // the turn's new messages, then the answer
  std::vector<int32_t> pinned;        // of messages, those the client pinned (ascending)
  std::vector<int32_t> tokens;        // prompt + answer
  messages::SamplingFields sampling;
  messages::DoneFields done;
  int32_t window_first_turn = 0;  // the first stored turn this turn's prompt kept
  std::string model;       // the model tier that answered; empty: the server's model
  bool escalated = false;  // a smaller tier handed the turn to a larger one mid-stream
};

// Pages of a session's token history leaving memory for the store.
struct KvSpill {
  std::string session_id;
  std::vector<int32_t> tokens;    // the history its pages hold (full pages)
  int32_t first = 0;              // index of the first page in `data`
  std::vector<std::string> data;  // engine/kv_page_codec.h
};

// A session leaving this front end's store for another's (docs/SCALE_OUT.md,
// "A session's hand-off"), or why it cannot.
struct SessionHandOff {
  wire::ErrorCode error = wire::ErrorCode::none;
  std::string message;
  StoredSession records;
  std::vector<std::string> kv_data;  // its stored KV pages, the first of its token history's, in order
};

struct SessionPolicy {
  std::string model_name;  // recorded with each turn
  uint64_t model_fingerprint = 0;
  bool kv = false;  // spilled pages are kept and restored
  KvIdentity kv_identity;
  int32_t page_size = 16;
  int64_t page_bytes = 0;  // one encoded page
  // A session that ended a turn here more recently than this still has its
  // pages in memory (the server frees them after the same time).
  int64_t idle_ms = 300000;
  // Sessions kept decoded in memory, least recently used out first (every
  // turn is in the store already: an evicted session is read again).
  size_t max_cached = 1024;
};

class SessionTurns {
 public:
  SessionTurns(Store& store, SessionPolicy policy);

  // `now_ms`: a steady clock, for the in-memory window. A session `who`
  // may not use is refused (forbidden); a new one becomes who's.
  SessionStart begin(const std::string& id, int64_t now_ms, const Principal& who = {});
  void release(const std::string& id) { busy_.erase(id); }
  // The reply to send: the turn's Done once durable, else storage_failed
  // (the session then stays at its last acknowledged turn).
  messages::Bytes commit(SessionCommit turn, int64_t now_ms, int64_t unix_now_ms);
  // Pages stored (0 when none fit the session's current history).
  int32_t spill(const KvSpill& spill);

  // A summary of turns [0, through), written in the background:
  // kept when it covers more than the stored one (an empty one keeps the
  // stored text and moves `through`). False when the session is gone.
  bool summarize(const std::string& id, const std::string& summary, int32_t through);

  // Only the sessions `who` may use.
  messages::Bytes list(uint64_t request_id, const Principal& who = {});
  messages::Bytes show(uint64_t request_id, const std::string& id, const Principal& who = {});
  messages::Bytes remove(uint64_t request_id, const std::string& id, const Principal& who = {});
  // A hand-off to front end `to`, in two steps so that nothing is lost.
  // hand_off: the session's records and stored pages, and the session is
  // held (busy) for `to` until hand_off_done or hand_off_abort, or until
  // `hold_ms` pass (the taker is gone: it stays here). Refused while a turn
  // runs (session_busy), for another client (forbidden), or when there is
  // none (unknown_session).
  SessionHandOff hand_off(const std::string& id, const std::string& to, const Principal& who, int64_t now_ms,
                          int64_t hold_ms = 120000);
  // The taker stored it: its records and the pages only it lists leave this
  // store, and a marker of where it went takes their place, in one batch.
  // "" or why not (no hand-off of it to `to` is pending).
  std::string hand_off_done(const std::string& id, const std::string& to);
  void hand_off_abort(const std::string& id, const std::string& to);
  void expire_hand_offs(int64_t now_ms);
  // Takes a session another front end handed over, in one batch: "" or why
  // not (it holds one by that id already, or the records do not decode).
  std::string take(const std::string& id, const SessionHandOff& h);
  // Where a session this store handed over went ("" if it did not).
  std::string moved_to(const std::string& id) const;
  size_t cached() const { return cache_.size(); }
  bool busy(const std::string& id) const { return busy_.count(id) > 0; }
  // The store no longer holds session `id` (retention deleted it): nor may memory.
  void forget(const std::string& id) {
    cache_.erase(id);
    last_turn_ms_.erase(id);
    if (stored_ > 0) --stored_;
  }
  // Sessions in the store: counted once (a scan of the headers), then kept
  // by commit, remove and forget.
  int64_t stored();

 private:
  bool kv_valid(const SessionRecord& s) const;
  std::vector<std::string> unshared_pages(const SessionRecord& s) const;
  const SessionRecord* find(const std::string& id);
  // Caches the session's record as it now is; may evict others (never a busy one).
  const SessionRecord* remember(const std::string& id, SessionRecord record);

  Store& store_;
  SessionPolicy policy_;
  SessionBook sessions_;
  KvPageStore kv_;
  std::map<std::string, std::string> busy_;  // sessions with a turn running → who runs it
  struct Handing {
    std::string to;
    int64_t until_ms = 0;
  };
  std::map<std::string, Handing> handing_;  // sessions held for a taker (busy_ too)
  struct Cached {
    SessionRecord record;
    uint64_t used = 0;  // tick of the last use
  };
  std::unordered_map<std::string, Cached> cache_;
  uint64_t tick_ = 0;
  std::unordered_map<std::string, int64_t> last_turn_ms_;  // steady ms of each session's last turn here
  int64_t stored_ = -1;  // -1: not counted yet
};

// Leading full pages in which `a` and `b` hold the same tokens.
int32_t common_pages(std::span<const int32_t> a, std::span<const int32_t> b, int32_t page_size);

}  // namespace troupe::persistence
