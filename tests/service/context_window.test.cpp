// A session's context past its window: which turns the prompt keeps, the
// memory standing for dropped ones (pinned messages, the user's statements,
// the summary), and where the kept turns' KV was.
#include <catch2/catch.hpp>

#include "service/context_window.h"
#include "service/session_memory.h"
#include "tests/service/harness.h"

using namespace troupe;
using namespace troupe::service;

namespace {

persistence::SessionStart session(int turns, bool system = true) {
  persistence::SessionStart s;
  for (int t = 0; t < turns; ++t) {
    std::vector<ChatMessage> msgs;
    if (t == 0 && system) msgs.push_back({"system", "you are terse"});
    msgs.push_back({"user", "what about the weather in city number " + std::to_string(t)});
    msgs.push_back({"assistant", "answer number " + std::to_string(t) + ": it rains, as it always does there"});
    s.turns.push_back(std::move(msgs));
  }
  return s;
}

const std::vector<ChatMessage> kTurn{{"user", "and tomorrow?"}};

std::vector<int32_t> encode(const std::vector<ChatMessage>& m) {
  return encode_chat(*test::synthetic_tokenizer(), ChatFormat::chatml, m, true);
}

}  // namespace

TEST_CASE("under the window policy the oldest turns go first, and the system prompt and the new turn always stay") {
  const auto tok = test::synthetic_tokenizer();
  const auto s = session(20);
  const auto all = fit_context(*tok, ChatFormat::chatml, s, kTurn, 1 << 20, ContextPolicy::window);
  CHECK(all.first_turn == 0);
  const int64_t budget = static_cast<int64_t>(all.prompt.size()) / 2;
  const auto w = fit_context(*tok, ChatFormat::chatml, s, kTurn, budget, ContextPolicy::window);
  CHECK(static_cast<int64_t>(w.prompt.size()) <= budget);
  CHECK(w.first_turn > 0);
  // It is exactly the system prompt, turns [first_turn, 20) and the new turn.
  std::vector<ChatMessage> want{{"system", "you are terse"}};
  for (int t = w.first_turn; t < 20; ++t) {
    const auto& m = s.turns[static_cast<size_t>(t)];
    want.insert(want.end(), m.begin() + (t == 0 ? 1 : 0), m.end());
  }
  want.push_back(kTurn[0]);
  CHECK(w.prompt == encode(want));
  // Dropped to 3/4 of the room the system prompt and the new turn leave (room
  // for the next turns), and no further.
  const auto floor = static_cast<int64_t>(encode({want.front(), want.back()}).size());
  const int64_t target = floor + (budget - floor) * 3 / 4;
  CHECK(static_cast<int64_t>(w.prompt.size()) <= target);
  auto one_more = want;
  const auto& prev = s.turns[static_cast<size_t>(w.first_turn - 1)];
  one_more.insert(one_more.begin() + 1, prev.begin(), prev.end());
  CHECK(static_cast<int64_t>(encode(one_more).size()) > target);
}

TEST_CASE("a dropped turn stays out, and the window moves again only when the budget is reached") {
  const auto tok = test::synthetic_tokenizer();
  auto s = session(20);
  const auto all = fit_context(*tok, ChatFormat::chatml, s, kTurn, 1 << 20, ContextPolicy::window);
  const int64_t budget = static_cast<int64_t>(all.prompt.size()) / 2;
  const auto w = fit_context(*tok, ChatFormat::chatml, s, kTurn, budget, ContextPolicy::window);
  REQUIRE(w.first_turn > 0);
  s.window_first_turn = w.first_turn;
  // Two more turns fit in the room left: nothing else is dropped.
  for (int t = 20; t < 22; ++t) {
    s.turns.push_back({{"user", "one more"}, {"assistant", "sure"}});
    const auto next = fit_context(*tok, ChatFormat::chatml, s, kTurn, budget, ContextPolicy::window);
    CHECK(next.first_turn == w.first_turn);
    CHECK(static_cast<int64_t>(next.prompt.size()) <= budget);
  }
  // Even with room for them, turns before the window do not come back.
  CHECK(fit_context(*tok, ChatFormat::chatml, s, kTurn, 1 << 20, ContextPolicy::window).first_turn == w.first_turn);
  // Refuse sees every turn again (a policy is chosen per turn).
  CHECK(fit_context(*tok, ChatFormat::chatml, s, kTurn, 1 << 20, ContextPolicy::refuse).first_turn == 0);
}

TEST_CASE("refuse keeps every turn, and a turn that fits keeps every turn under any policy") {
  const auto tok = test::synthetic_tokenizer();
  const auto s = session(6);
  const auto all = fit_context(*tok, ChatFormat::chatml, s, kTurn, 1 << 20, ContextPolicy::window);
  CHECK(fit_context(*tok, ChatFormat::chatml, s, kTurn, 10, ContextPolicy::refuse).prompt == all.prompt);
  CHECK(fit_context(*tok, ChatFormat::chatml, s, kTurn, 1 << 20, ContextPolicy::summarize).prompt == all.prompt);
}

TEST_CASE("under summarize a stored summary stands for its turns, and turns dropped past it ask for a new one") {
  const auto tok = test::synthetic_tokenizer();
  auto s = session(20);
  s.context_summary = "they talked about rain";
  s.summary_through = 5;
  const auto full = fit_context(*tok, ChatFormat::chatml, s, kTurn, 1 << 20, ContextPolicy::summarize);
  CHECK(full.uses_summary);
  CHECK(full.first_turn == 5);
  CHECK(full.summarize_through == 0);
  std::vector<ChatMessage> want{{"system", "you are terse"}, {"system", "Summary of the conversation so far: they talked about rain"}};
  for (int t = 5; t < 20; ++t) want.insert(want.end(), s.turns[static_cast<size_t>(t)].begin(), s.turns[static_cast<size_t>(t)].end());
  want.push_back(kTurn[0]);
  CHECK(full.prompt == encode(want));
  const auto tight = fit_context(*tok, ChatFormat::chatml, s, kTurn, static_cast<int64_t>(full.prompt.size()) / 2,
                                 ContextPolicy::summarize);
  CHECK(tight.first_turn > 5);
  CHECK(tight.summarize_through == tight.first_turn);
  // Half the room that the system prompt, the summary and the new turn leave.
  const auto floor = static_cast<int64_t>(encode({want[0], want[1], kTurn[0]}).size());
  const int64_t budget = static_cast<int64_t>(full.prompt.size()) / 2;
  CHECK(static_cast<int64_t>(tight.prompt.size()) <= floor + (budget - floor) / 2);
  const auto request = summary_request(*tok, ChatFormat::chatml, s, tight.first_turn, 1 << 20);
  REQUIRE(request.size() == 1);
  CHECK_THAT(request[0].content, Catch::Contains("Earlier summary: they talked about rain"));
  CHECK_THAT(request[0].content, Catch::Contains("city number 5\n"));
  CHECK_THAT(request[0].content, !Catch::Contains("city number 4\n"));
}

TEST_CASE("the kept turns' KV is found where the stored history had it") {
  const auto tok = test::synthetic_tokenizer();
  const auto s = session(20);
  // The history the last turn ended with: every turn (what the store's tokens hold).
  const auto history = fit_context(*tok, ChatFormat::chatml, s, {}, 1 << 20, ContextPolicy::window).prompt;
  const auto all = fit_context(*tok, ChatFormat::chatml, s, kTurn, 1 << 20, ContextPolicy::window);
  const auto w = fit_context(*tok, ChatFormat::chatml, s, kTurn, static_cast<int64_t>(all.prompt.size()) / 2,
                             ContextPolicy::window);
  const KvReuse r = find_reuse(w.prompt, history, 16);
  REQUIRE(r.count >= 16);
  CHECK(r.src_begin > r.dst_begin);
  for (int32_t i = 0; i < r.count; ++i) REQUIRE(w.prompt[r.dst_begin + i] == history[r.src_begin + i]);
  for (int32_t i = 0; i < r.dst_begin; ++i) REQUIRE(w.prompt[i] == history[i]);
  CHECK(find_reuse(all.prompt, history, 16).count == 0);  // nothing dropped: nothing moves
}

TEST_CASE("the answers a window no longer shows are read back as tokens, the newest that fit, oldest first") {
  const auto tok = test::synthetic_tokenizer();
  const auto s = session(6);
  auto answer = [&](int t) { return tok->encode(s.turns[static_cast<size_t>(t)].back().content, false, false); };
  const auto all = answers_before(*tok, s, 4, 1 << 20);
  REQUIRE(all.size() == 4);  // turns 0..3: their answers only, not the questions or the system prompt
  for (int t = 0; t < 4; ++t) CHECK(all[static_cast<size_t>(t)] == answer(t));
  // A budget of two answers and a bit: the newest two whole, then the start of the one before.
  const auto n = static_cast<int64_t>(answer(3).size() + answer(2).size() + 3);
  const auto some = answers_before(*tok, s, 4, n);
  REQUIRE(some.size() == 3);
  const auto one = answer(1);
  CHECK(some[0] == std::vector<int32_t>(one.begin(), one.begin() + 3));
  CHECK(some[1] == answer(2));
  CHECK(some[2] == answer(3));
  CHECK(answers_before(*tok, s, 0, 1 << 20).empty());   // the prompt keeps every turn
  CHECK(answers_before(*tok, s, 99, 1 << 20).size() == 6);  // past the stored turns: all of them
}

TEST_CASE("under summarize the user's statements join the memory verbatim with the summary of their turns") {
  const auto tok = test::synthetic_tokenizer();
  auto s = session(20);
  s.turns[1][0].content = "My cat is called Pistachio. Explain how a hash map grows.";
  s.turns[3][0].content = "We decided to use Postgres for the store";
  const auto full = fit_context(*tok, ChatFormat::chatml, s, kTurn, 1 << 20, ContextPolicy::summarize);
  const int64_t budget = static_cast<int64_t>(full.prompt.size()) / 2;
  const auto tight = fit_context(*tok, ChatFormat::chatml, s, kTurn, budget, ContextPolicy::summarize);
  REQUIRE(tight.first_turn > 3);
  CHECK(tight.summarize_through == tight.first_turn);
  // The window moved and no summary landed yet: the memory is unchanged (so
  // the kept turns' KV shifts), the statements wait for their summary.
  std::vector<ChatMessage> kept{{"system", "you are terse"}};
  for (int t = tight.first_turn; t < 20; ++t)
    kept.insert(kept.end(), s.turns[static_cast<size_t>(t)].begin(), s.turns[static_cast<size_t>(t)].end());
  kept.push_back(kTurn[0]);
  CHECK(tight.prompt == encode(kept));
  // The summary landed, empty (the model wrote nothing): the statements alone.
  s.summary_through = tight.first_turn;
  s.window_first_turn = tight.first_turn;
  auto want = kept;
  want.insert(want.begin() + 1, {"system", "What the user has told you earlier, in their words:\n- My cat is called "
                                           "Pistachio.\n- We decided to use Postgres for the store"});
  CHECK(fit_context(*tok, ChatFormat::chatml, s, kTurn, budget, ContextPolicy::summarize).prompt == encode(want));
  // With its text: the statements first, the topics after.
  s.context_summary = "they talked about rain";
  want[1].content += "\n\nSummary of the conversation so far: they talked about rain";
  CHECK(fit_context(*tok, ChatFormat::chatml, s, kTurn, budget, ContextPolicy::summarize).prompt == encode(want));
  // Under window neither: the statements go with their turns.
  const auto window = fit_context(*tok, ChatFormat::chatml, s, kTurn, budget, ContextPolicy::window);
  CHECK(tok->decode(window.prompt).find("Pistachio") == std::string::npos);
}

TEST_CASE("a pinned message stays verbatim once its turn is dropped, under window and summarize, and only once") {
  const auto tok = test::synthetic_tokenizer();
  auto s = session(20);
  s.turns[2][0].content = "My passport number is X123.";
  s.pinned.resize(20);
  s.pinned[2] = {0};
  for (ContextPolicy policy : {ContextPolicy::window, ContextPolicy::summarize}) {
    const auto full = fit_context(*tok, ChatFormat::chatml, s, kTurn, 1 << 20, policy);
    const auto tight = fit_context(*tok, ChatFormat::chatml, s, kTurn, static_cast<int64_t>(full.prompt.size()) / 2, policy);
    REQUIRE(tight.first_turn > 2);
    std::vector<ChatMessage> want{{"system", "you are terse"},
                                  {"system", "Messages pinned earlier in this conversation:\nUser: My passport number is X123."}};
    for (int t = tight.first_turn; t < 20; ++t)
      want.insert(want.end(), s.turns[static_cast<size_t>(t)].begin(), s.turns[static_cast<size_t>(t)].end());
    want.push_back(kTurn[0]);
    CHECK(tight.prompt == encode(want));  // not also among the statements
    CHECK(static_cast<int64_t>(tight.prompt.size()) <= static_cast<int64_t>(full.prompt.size()) / 2);
  }
}

TEST_CASE("the user's statements past their share of the budget go to the summarizer, the oldest kept verbatim") {
  const auto tok = test::synthetic_tokenizer();
  auto s = session(40, false);
  for (int t = 0; t < 40; ++t)
    s.turns[static_cast<size_t>(t)][0].content = "My fact number " + std::to_string(t) + " is that I like the colour red.";
  const int64_t budget = 600;
  const auto w = fit_context(*tok, ChatFormat::chatml, s, kTurn, budget, ContextPolicy::summarize);
  REQUIRE(w.summarize_through > 10);
  const MemorySource src{s.turns, s.pinned, 0};
  const auto statements = statements_of(*tok, src, w.summarize_through);
  const auto memory = memory_before(src, w.first_turn, w.summarize_through, statements, budget / 4, {});
  REQUIRE_FALSE(memory.overflow.empty());
  CHECK(memory.facts.front() == "My fact number 0 is that I like the colour red.");
  const auto request = summary_request(*tok, ChatFormat::chatml, s, w.summarize_through, budget);
  CHECK_THAT(request[0].content, Catch::Contains("Earlier statements of the user to keep:\n- " + memory.overflow.front()));
  CHECK_THAT(request[0].content, !Catch::Contains("- " + memory.facts.front() + "\n"));
  // Once the summary lands, the prompt holds the verbatim ones within the budget, not the rest.
  s.summary_through = w.summarize_through;
  s.window_first_turn = w.first_turn;
  s.context_summary = "facts about red";
  const auto after = fit_context(*tok, ChatFormat::chatml, s, kTurn, budget, ContextPolicy::summarize);
  CHECK(static_cast<int64_t>(after.prompt.size()) <= budget);
  const std::string text = tok->decode(after.prompt);
  CHECK(text.find(memory.facts.front()) != std::string::npos);
  CHECK(text.find(memory.overflow.front()) == std::string::npos);
}
