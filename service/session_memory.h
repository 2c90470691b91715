#pragma once
// What a session keeps of the turns its prompt no longer shows
// (docs/PROTOCOL.md, "Session memory"): one system message right after the
// system prompt, holding
//   - the messages the client pinned, verbatim (every context policy);
//   - under summarize, the user's own statements about themselves and the
//     task (names, numbers, preferences, decisions) in the summarized turns,
//     verbatim, picked by rule from the user's messages, not by the model: a
//     small model's summary keeps the topics and drops exactly these
//     (docs/DECISIONS.md, "Session memory");
//   - under summarize, the summarizer's summary of the topics.
// Everything here is a function of the stored turns, so it needs no record
// of its own and reads the same after a restart or a hand-off.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_template.h"
#include "engine/tokenizer.h"

namespace troupe::service {

// The sentences of a user's message that state something about the user or
// the task (not questions, requests for an explanation, thanks or code), in
// order, trimmed.
std::vector<std::string> user_statements(std::string_view text);

// A statement and the turn it was made in.
struct UserStatement {
  int32_t turn = 0;
  std::string text;
  int32_t tokens = 0;
};

// The stored turns as session memory reads them.
struct MemorySource {
  std::span<const std::vector<ChatMessage>> turns;
  std::span<const std::vector<int32_t>> pinned;  // each turn's pinned messages (may be shorter than turns)
  size_t sink = 0;                               // turn 0's leading system messages (always in the prompt)
};

// Every distinct user statement of turns [0, through), oldest first (a
// repeated one counts where it was first said). Only the summarized turns
// are read: the later ones' statements are not in any prompt yet.
std::vector<UserStatement> statements_of(const Tokenizer& tok, const MemorySource& src, int32_t through);

struct SessionMemory {
  std::vector<ChatMessage> pinned;   // pinned messages of the turns left out, in order
  std::vector<std::string> facts;    // the user's statements in the turns left out, oldest first, within the cap
  std::vector<std::string> overflow; // those past the cap: handed to the summarizer instead
  std::string summary;
  bool empty() const { return pinned.empty() && facts.empty() && summary.empty(); }
};

// The memory of a prompt that keeps turns from `first`: the pinned messages
// of turns [0, first), and the statements among `statements` made in turns
// [0, summarized) (their tokens within `fact_tokens`, the oldest kept first).
// The statements join with the summary that stands for their turns, not
// when the window drops them: the memory then changes only when a summary
// lands (one prefill of the window, as the summary costs anyway), and a
// window move keeps shifting the kept turns' KV instead of computing it.
SessionMemory memory_before(const MemorySource& src, int32_t first, int32_t summarized,
                            std::span<const UserStatement> statements, int64_t fact_tokens, std::string summary);

// The system message that carries it; nullopt when it is empty.
std::optional<ChatMessage> memory_message(const SessionMemory& m);

}  // namespace troupe::service
