#include "service/context_window.h"

#include "service/session_memory.h"
#include "service/suffix_history.h"

#include <algorithm>

namespace troupe::service {
namespace {

std::vector<ChatMessage> system_sink(const persistence::SessionStart& s) {
  std::vector<ChatMessage> out;
  if (s.turns.empty()) return out;
  for (const ChatMessage& m : s.turns.front()) {
    if (m.role != "system") break;
    out.push_back(m);
  }
  return out;
}

constexpr std::string_view kSummaryInstruction =
    "Summarize this conversation in at most five sentences: the topics discussed, and what was decided or "
    "concluded. Name things as the conversation names them.";

// The user's statements are kept verbatim within a quarter of the prompt's
// budget (the summary and the kept turns share the rest): at --context 1024
// some twenty short facts.
int64_t fact_budget(int64_t prompt_budget) { return prompt_budget / 4; }

// A session's prompt for each choice of the first turn it keeps whole.
class PromptLayout {
 public:
  PromptLayout(const Tokenizer& tok, ChatFormat format, const persistence::SessionStart& s,
               std::span<const ChatMessage> turn, ContextPolicy policy, bool summary, int64_t budget,
               std::span<const ToolSpec> tools)
      : tok_(tok), format_(format), s_(s), turn_(turn), tools_(tools), sink_(system_sink(s)),
        src_{s.turns, s.pinned, sink_.size()}, summary_(summary ? s.context_summary : std::string()),
        summarized_(policy == ContextPolicy::summarize ? s.summary_through : 0), facts_cap_(fact_budget(budget)) {
    if (summarized_ > 0) statements_ = statements_of(tok, src_, summarized_);
  }

  // The sink, the memory of turns [0, first), those from `first`, the new messages.
  // (The turn's tools, if any, go into the system prompt.)
  std::vector<int32_t> prompt(int32_t first) const {
    std::vector<ChatMessage> all = sink_;
    if (auto m = memory_message(memory_before(src_, first, std::min(first, summarized_), statements_, facts_cap_, summary_)))
      all.push_back(std::move(*m));
    for (int32_t t = first; t < static_cast<int32_t>(s_.turns.size()); ++t) {
      const auto& msgs = s_.turns[static_cast<size_t>(t)];
      const size_t skip = t == 0 ? sink_.size() : 0;  // turn 0's system messages are the sink already
      all.insert(all.end(), msgs.begin() + static_cast<int64_t>(skip), msgs.end());
    }
    all.insert(all.end(), turn_.begin(), turn_.end());
    return encode_chat(tok_, format_, with_tools(format_, all, tools_, tok_.vocabulary().chat_template), true);
  }

 private:
  const Tokenizer& tok_;
  ChatFormat format_;
  const persistence::SessionStart& s_;
  std::span<const ChatMessage> turn_;
  std::span<const ToolSpec> tools_;
  std::vector<ChatMessage> sink_;
  MemorySource src_;
  std::string summary_;
  int32_t summarized_;  // statements of turns [0, this) are in the memory
  int64_t facts_cap_;
  std::vector<UserStatement> statements_;
};

}  // namespace

ContextPolicy resolve_policy(wire::ContextPolicy p, bool session) {
  switch (p) {
    case wire::ContextPolicy::refuse: return ContextPolicy::refuse;
    case wire::ContextPolicy::window: return ContextPolicy::window;
    case wire::ContextPolicy::summarize: return ContextPolicy::summarize;
    default: return session ? ContextPolicy::window : ContextPolicy::refuse;
  }
}

const char* context_policy_name(ContextPolicy p) {
  switch (p) {
    case ContextPolicy::refuse: return "refuse";
    case ContextPolicy::window: return "window";
    case ContextPolicy::summarize: return "summarize";
  }
  return "?";
}

ContextWindow fit_context(const Tokenizer& tok, ChatFormat format, const persistence::SessionStart& s,
                          std::span<const ChatMessage> turn, int64_t budget, ContextPolicy policy,
                          std::span<const ToolSpec> tools) {
  const auto n = static_cast<int32_t>(s.turns.size());
  const bool summary = policy == ContextPolicy::summarize && s.summary_through > 0 && !s.context_summary.empty();
  const int32_t low = summary ? std::min(s.summary_through, n) : 0;
  // A turn once dropped stays out: the window only moves forward, so the
  // KV of what it keeps is the history's and the next turns just append.
  const int32_t kept = policy == ContextPolicy::refuse ? 0 : std::clamp(s.window_first_turn, low, n);
  const PromptLayout layout(tok, format, s, turn, policy, summary, budget, tools);
  ContextWindow w;
  w.uses_summary = summary;
  w.first_turn = kept;
  w.prompt = layout.prompt(kept);
  if (policy == ContextPolicy::refuse || static_cast<int64_t>(w.prompt.size()) <= budget) return w;
  // Dropping costs a shift of everything kept (and, under summarize, a new
  // summary and one prefill of the window after it): drop to well under the
  // budget, so that the turns after this one only append.
  // What no drop removes (the system prompt, the memory, the new messages)
  // takes its room first: a large memory must not leave the window nothing.
  std::vector<int32_t> best = layout.prompt(n);
  const auto floor = static_cast<int64_t>(best.size());
  const int64_t room = std::max<int64_t>(0, budget - floor);
  const int64_t limit = std::min(budget, floor + (policy == ContextPolicy::summarize ? room / 2 : room * 3 / 4));
  // The fewest turns dropped to reach it: the prompt only shrinks as `first` grows.
  int32_t lo = kept + 1, hi = n;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    auto p = layout.prompt(mid);
    if (static_cast<int64_t>(p.size()) <= limit) {
      hi = mid;
      best = std::move(p);
    } else {
      lo = mid + 1;
    }
  }
  w.first_turn = hi;
  w.prompt = hi == n ? layout.prompt(n) : std::move(best);
  if (policy == ContextPolicy::summarize && w.first_turn > s.summary_through) w.summarize_through = w.first_turn;
  return w;
}

std::vector<ChatMessage> summary_request(const Tokenizer& tok, ChatFormat format, const persistence::SessionStart& s,
                                         int32_t through, int64_t budget) {
  const size_t sink = system_sink(s).size();
  // The user's statements past the verbatim cap are the summary's to keep.
  const MemorySource src{s.turns, s.pinned, sink};
  const std::vector<UserStatement> statements = statements_of(tok, src, through);
  const SessionMemory memory = memory_before(src, through, through, statements, fact_budget(budget), {});
  auto build = [&](int32_t from) {
    std::string text(kSummaryInstruction);
    text += memory.overflow.empty()
                ? " The user's own statements about themselves are kept apart, word for word: leave them out.\n\n"
                : " Keep the user's earlier statements listed below.\n\n";
    if (!s.context_summary.empty()) text += "Earlier summary: " + s.context_summary + "\n\n";
    if (!memory.overflow.empty()) {
      text += "Earlier statements of the user to keep:\n";
      for (const std::string& f : memory.overflow) text += "- " + f + "\n";
      text += "\n";
    }
    for (int32_t t = from; t < through && t < static_cast<int32_t>(s.turns.size()); ++t) {
      const auto& msgs = s.turns[static_cast<size_t>(t)];
      for (size_t i = t == 0 ? sink : 0; i < msgs.size(); ++i)
        text += (msgs[i].role == "assistant" ? "Assistant: " : "User: ") + msgs[i].content + "\n";
    }
    return std::vector<ChatMessage>{{"user", std::move(text)}};
  };
  int32_t from = std::min(s.summary_through, through);
  auto msgs = build(from);
  while (from + 1 < through && static_cast<int64_t>(encode_chat(tok, format, msgs, true).size()) > budget) msgs = build(++from);
  return msgs;
}

std::vector<std::vector<int32_t>> answers_before(const Tokenizer& tok, const persistence::SessionStart& s,
                                                 int32_t first_turn, int64_t max_tokens) {
  std::vector<std::string_view> newest_first;
  for (int32_t t = std::min(first_turn, static_cast<int32_t>(s.turns.size())) - 1; t >= 0; --t)
    for (auto m = s.turns[static_cast<size_t>(t)].rbegin(); m != s.turns[static_cast<size_t>(t)].rend(); ++m)
      if (m->role == "assistant") newest_first.push_back(m->content);
  return seed_from_texts(tok, newest_first, max_tokens);
}

KvReuse find_reuse(std::span<const int32_t> prompt, std::span<const int32_t> history, int32_t page_size) {
  KvReuse r;
  size_t same = 0;
  while (same < prompt.size() && same < history.size() && prompt[same] == history[same]) ++same;
  if (same == prompt.size()) return r;
  // The kept turns start right after the shared prefix in the prompt, and
  // somewhere later in the history: find where a probe of them recurs.
  const size_t probe = std::min<size_t>(32, prompt.size() - same);
  if (probe < 8) return r;
  const auto needle = prompt.subspan(same, probe);
  size_t best_at = 0, best_len = 0;
  for (size_t at = same + 1; at + probe <= history.size(); ++at) {
    if (!std::equal(needle.begin(), needle.end(), history.begin() + static_cast<int64_t>(at))) continue;
    size_t len = probe;
    while (same + len < prompt.size() && at + len < history.size() && prompt[same + len] == history[at + len]) ++len;
    if (len > best_len) best_at = at, best_len = len;
  }
  if (best_len < static_cast<size_t>(page_size)) return r;
  r.src_begin = static_cast<int32_t>(best_at);
  r.dst_begin = static_cast<int32_t>(same);
  r.count = static_cast<int32_t>(best_len);
  return r;
}

}  // namespace troupe::service
