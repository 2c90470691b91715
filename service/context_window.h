#pragma once
// A session's context once it outgrows the window: which of its stored turns
// the next prompt keeps. The leading system messages always stay (they, and
// the first tokens they make, are the attention sinks); when the prompt
// outgrows its budget, whole turns are dropped from the front of the rest
// until it fills 3/4 of it (window) or half (summarize), so that the next
// turns append instead of moving the window again; the most recent turns and
// the new messages stay. A dropped turn stays out. Nothing is deleted: the
// dropped turns stay in the store, marked archived, or summarized when the
// summarize policy has a summary standing for them.
//
//   refuse     every turn, as before: a prompt over the context is refused
//   window     [system][kept turns][new messages]
//   summarize  [system][memory][kept turns][new messages]; the memory holds
//              the user's statements in the dropped turns, verbatim, and the
//              summary of turns 0..s; turns dropped past the summary ask for
//              a new one (written at batch priority in the background; until
//              it is stored their statements alone stand for them)
// Under window and summarize, the messages a client pinned in dropped turns
// stay in the memory verbatim (service/session_memory.h).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/chat_template.h"
#include "engine/chat_tools.h"
#include "engine/tokenizer.h"
#include "messages/client_frames.h"
#include "persistence/session_turns.h"

namespace troupe::service {

enum class ContextPolicy : uint8_t { refuse, window, summarize };

// The wire's choice against the default: window for session turns, refuse otherwise.
ContextPolicy resolve_policy(wire::ContextPolicy p, bool session);
const char* context_policy_name(ContextPolicy p);

struct ContextWindow {
  std::vector<int32_t> prompt;
  int32_t first_turn = 0;       // the first stored turn kept whole
  bool uses_summary = false;
  int32_t summarize_through = 0;  // > 0: turns [0, this) should be summarized anew
};

// The session turn's prompt within `budget` tokens (refuse: all of it).
ContextWindow fit_context(const Tokenizer& tokenizer, ChatFormat format, const persistence::SessionStart& start,
                          std::span<const ChatMessage> turn, int64_t budget, ContextPolicy policy,
                          std::span<const ToolSpec> tools = {});

// The messages of a request to summarize turns [from, through) (with the
// summary so far, and the user's statements past the verbatim cap), within
// `budget` tokens: the oldest turns give way first.
std::vector<ChatMessage> summary_request(const Tokenizer& tokenizer, ChatFormat format,
                                         const persistence::SessionStart& start, int32_t through, int64_t budget);

// The answers of stored turns [0, first_turn), which a prompt that keeps
// turns from first_turn no longer shows, tokenized, oldest first: the newest
// of them that fit in `max_tokens` (a session's suffix tree rebuilt where
// this server holds none: service/suffix_history.h).
std::vector<std::vector<int32_t>> answers_before(const Tokenizer& tokenizer, const persistence::SessionStart& start,
                                                 int32_t first_turn, int64_t max_tokens);

// How a new prompt reuses KV the session already computed: its positions
// [dst_begin, dst_begin + count) hold the tokens the stored history had at
// [src_begin, src_begin + count) (moved by a shift of their RoPE), and
// [0, dst_begin) the same tokens as the history. count 0: nothing to move.
struct KvReuse {
  int32_t src_begin = 0, dst_begin = 0, count = 0;
};
KvReuse find_reuse(std::span<const int32_t> prompt, std::span<const int32_t> history, int32_t page_size);

}  // namespace troupe::service
