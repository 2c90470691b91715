#pragma once
// Chat sessions in the store's `sessions` column family:
//
//   'h' <session_id>                  → store.SessionHeader (messages/store.fbs)
//   't' <session_id> 0x00 <turn be32> → store.SessionTurn, turn 0, 1, …
//   'm' <session_id>                  → the front end it was handed to (text),
//                                       after a hand-off (docs/SCALE_OUT.md)
//
// Session ids hold only [A-Za-z0-9._-] (messages/client_validation), so
// 0x00 cannot occur in one and "t<id>\0" is exactly one session's turns.
// A turn and the header it updates are one sync WriteBatch: after a crash a
// session is at its last acknowledged turn, never between two.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "messages/client_frames.h"
#include "messages/session_frames.h"
#include "persistence/store.h"

namespace troupe::persistence {

struct SessionTurnRecord {
  std::vector<ChatMessage> messages;  // the turn's new messages, then the assistant's answer
  std::vector<int32_t> pinned;        // of messages, those the client pinned (ascending)
  wire::FinishReason finish_reason = wire::FinishReason::stop;
  int32_t prompt_tokens = 0, completion_tokens = 0;
  int64_t time_ms = 0;
};

struct SessionRecord {
  std::string id;
  std::string owner;  // persistence/principal.h
  int64_t created_ms = 0, updated_ms = 0;
  std::string model;               // the model that answered the last turn
  uint64_t model_fingerprint = 0;  // its file's identity
  std::vector<int32_t> tokens;     // the last turn's prompt + answer, as that model saw them
  messages::SamplingFields sampling;
  std::vector<SessionTurnRecord> turns;  // empty from a header-only read
  int32_t header_turns = 0;              // the count its stored header gives
  // The first kv_pages full pages of `tokens` are in the kv_pages family,
  // under the identity (kv_model, kv_layout): engine/model_identity.h.
  int32_t kv_pages = 0;
  uint64_t kv_model = 0, kv_layout = 0;
  // The context window as the last turn used it (service/context_window.h):
  // the leading system messages always stay (the attention sinks); turns
  // [0, summary_through) are stood for by context_summary; the others
  // before window_first_turn are archived (out of the context, still stored).
  int32_t window_first_turn = 0, summary_through = 0;
  std::string context_summary;
  int32_t escalations = 0;  // turns a smaller model tier handed to a larger one (service/cascade.h)

  std::vector<ChatMessage> history() const;  // every turn's messages, in order
  std::vector<wire::TurnState> turn_states() const;
  messages::SessionSummaryFields summary() const;
};

// A session's records as the store holds them (store.fbs bytes): what one
// front end's store hands to another's.
struct StoredSession {
  std::string header;
  std::vector<std::string> turns;
};

class SessionBook {
 public:
  explicit SessionBook(Store& store) : store_(store) {}

  std::optional<SessionRecord> load(std::string_view id) const;
  // Every session's summary. With `damage`, damaged blocks and records that
  // do not decode are skipped (and said why there); without, they throw.
  std::vector<messages::SessionSummaryFields> list(std::string* damage = nullptr) const;
  // Writes `session`'s header and its last turn, durably. Throws StoreError.
  void append_last_turn(const SessionRecord& session);
  // Adds the header's write to `b` (the KV spill updates kv_pages with its pages).
  void write_header(const SessionRecord& session, Batch& b);
  // Deletes the header and every turn; false if there was no such session.
  bool remove(std::string_view id);
  // The header alone (turns not read: `header_turns` counts them); nullopt if none or corrupt.
  std::optional<SessionRecord> header(std::string_view id) const;
  // Up to `max` headers (turns not read: `header_turns` counts them), in id order,
  // after session `after` ("": from the first). Corrupt ones are skipped.
  std::vector<SessionRecord> headers(std::string_view after, size_t max) const;
  // How many sessions the store holds (headers counted, none decoded).
  int64_t count() const;
  // Adds the deletes of the header and every turn to `b`; the bytes they hold (keys and values).
  int64_t erase(std::string_view id, Batch& b) const;
  // The session's records as stored; nullopt if there is none. Throws
  // StoreError when they do not decode (a hand-off never passes on damage).
  std::optional<StoredSession> stored(std::string_view id) const;
  // Adds the writes of a session handed over from another store to `b`
  // (and clears its moved marker): the records must decode, name `id`, and
  // be as many turns as the header counts. Returns the record; throws
  // StoreError naming what is wrong.
  SessionRecord adopt(std::string_view id, const StoredSession& s, Batch& b) const;
  // The session went to front end `to`: a marker in place of its records.
  void mark_moved(std::string_view id, std::string_view to, Batch& b) const;
  std::optional<std::string> moved_to(std::string_view id) const;

 private:
  Store& store_;
};

// The encodings, for tests and tools.
std::string encode_session_header(const SessionRecord& s);
std::string encode_session_turn(const SessionTurnRecord& t);

}  // namespace troupe::persistence
