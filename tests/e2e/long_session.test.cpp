// Sessions longer than the context, end to end: a real `troupe serve` with a
// small --context, chat turns far past it under each policy, kill -9 in the
// middle, and the stored session read back as `troupe sessions show` reads it.
#include <catch2/catch.hpp>

#include <csignal>
#include <string>
#include <utility>
#include <vector>

#include "messages/client_connection.h"
#include "messages/client_validation.h"
#include "messages/session_frames.h"
#include "tests/e2e/fixture.h"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

using Messages = std::vector<std::pair<std::string, std::string>>;  // (role, content)

const std::string kSystem = "You are a patient assistant who remembers every detail of this long conversation.";

// A user message of about 40 tokens, different for every turn.
std::string user_text(int turn) {
  return "Turn " + std::to_string(turn) + ": tell me one more thing about the quick brown fox number " +
         std::to_string(turn * 7 % 101) + " and the lazy dog it jumped over yesterday.";
}

messages::StreamOutcome chat(const std::string& endpoint, const std::string& session, const Messages& msgs, int tokens,
                             wire::ContextPolicy policy, std::chrono::milliseconds timeout = 60s) {
  messages::ClientConnection c(endpoint);
  const uint64_t id = c.next_id();
  return c.stream(messages::chat_request(id, session, msgs, greedy(tokens), wire::Priority::chat, false,
                                         wire::Speculation::server_default, 0, {}, policy),
                  id, {}, timeout);
}

// The first turn carries the system prompt; the session keeps it.
Messages turn_messages(int turn) {
  Messages m;
  if (turn == 0) m.emplace_back("system", kSystem);
  m.emplace_back("user", user_text(turn));
  return m;
}

struct StoredSession {
  std::vector<Messages> turns;
  std::vector<wire::TurnState> states;
  std::string summary;
};

StoredSession show(const std::string& endpoint, const std::string& session) {
  messages::ClientConnection c(endpoint);
  const uint64_t id = c.next_id();
  c.send(messages::show_session_request(id, session));
  StoredSession out;
  while (auto f = c.receive(10s)) {
    const auto* r = messages::check_response(*f);
    if (!r || r->client_request_id() != id) continue;
    const auto* s = r->body_as_Session();
    REQUIRE(s);
    REQUIRE(s->turn_messages());
    REQUIRE(s->turn_states());
    REQUIRE(s->turn_states()->size() == s->turn_messages()->size());
    uint32_t at = 0;
    for (uint32_t t = 0; t < s->turn_messages()->size(); ++t) {
      Messages m;
      for (int32_t i = 0; i < s->turn_messages()->Get(t); ++i, ++at)
        m.emplace_back(s->messages()->Get(at)->role()->str(), s->messages()->Get(at)->content()->str());
      out.turns.push_back(std::move(m));
      out.states.push_back(s->turn_states()->Get(t));
    }
    if (s->context_summary()) out.summary = s->context_summary()->str();
    return out;
  }
  FAIL("no answer to show " << session);
  return out;
}

uint64_t tokens_shifted(const std::string& endpoint) {
  messages::ClientConnection c(endpoint);
  messages::Bytes keep;
  const auto* s = stats(c, keep);
  REQUIRE(s);
  return s->tokens_shifted();
}

// Waits until the store has every spilled page (the count holds still).
void spills_settle(const std::string& endpoint) {
  messages::ClientConnection c(endpoint);
  uint64_t last = UINT64_MAX;
  for (int i = 0; i < 100; ++i) {
    messages::Bytes keep;
    const auto* s = stats(c, keep);
    REQUIRE(s);
    if (s->pages_spilled() == last && s->running() == 0 && s->waiting() == 0) return;
    last = s->pages_spilled();
    std::this_thread::sleep_for(100ms);
  }
}

int count(const std::vector<wire::TurnState>& states, wire::TurnState s) {
  return static_cast<int>(std::count(states.begin(), states.end(), s));
}

// What the next prompt holds, rebuilt from the stored session: the system
// prompt, the summary when one stands in, the turns in the window.
Messages in_window(const StoredSession& s) {
  Messages out{{"system", kSystem}};
  if (count(s.states, wire::TurnState::summarized) > 0)
    out.emplace_back("system", "Summary of the conversation so far: " + s.summary);
  for (size_t t = 0; t < s.turns.size(); ++t) {
    if (s.states[t] != wire::TurnState::window) continue;
    for (const auto& m : s.turns[t])
      if (!(t == 0 && m.first == "system")) out.push_back(m);
  }
  return out;
}

// Runs turns [from, to) of a session; every turn must be answered in full.
void run_turns(const std::string& endpoint, const std::string& session, int from, int to, wire::ContextPolicy policy,
               std::vector<Messages>& acked) {
  for (int t = from; t < to; ++t) {
    INFO("turn " << t);
    const auto out = chat(endpoint, session, turn_messages(t), 12, policy);
    REQUIRE(out.done);
    REQUIRE(out.error == wire::ErrorCode::none);
    Messages m = turn_messages(t);
    m.emplace_back("assistant", out.text);
    acked.push_back(std::move(m));
  }
}

// Waits until the session's stored summary covers some turns.
// Waits until the session has a summary and no request runs (so no summary
// is being written) and the summary held still over one poll: the summary
// cannot change under the next turn.
StoredSession wait_for_summary(const std::string& endpoint, const std::string& session) {
  messages::ClientConnection c(endpoint);
  StoredSession s;
  std::string last = "-";
  for (int i = 0; i < 300; ++i) {
    s = show(endpoint, session);
    messages::Bytes keep;
    const auto* st = stats(c, keep);
    REQUIRE(st);
    const bool idle = st->running() == 0 && st->waiting() == 0;
    if (!s.summary.empty() && idle && s.summary == last) return s;
    last = idle ? s.summary : "-";
    std::this_thread::sleep_for(100ms);
  }
  return s;
}

}  // namespace

TEST_CASE("refuse keeps today's wall, and window keeps a session going past it, moving the kept KV instead of prefilling it",
          "[service][long]") {
  Server server("window", {"--context", "512"});
  std::vector<Messages> acked;
  // refuse: the wall comes within a few turns and says why.
  bool refused = false;
  for (int t = 0; t < 20 && !refused; ++t) {
    const auto out = chat(server.endpoint, "walled", turn_messages(t), 12, wire::ContextPolicy::refuse);
    refused = !out.done;
    if (refused) {
      CHECK(out.error == wire::ErrorCode::too_long);
      CHECK(out.message.find("outgrown") != std::string::npos);
    }
  }
  CHECK(refused);

  // window (the default for sessions): 30 turns, each ~60 tokens, in 512.
  run_turns(server.endpoint, "long", 0, 30, wire::ContextPolicy::server_default, acked);
  StoredSession s = show(server.endpoint, "long");
  CHECK(s.turns == acked);  // nothing lost
  CHECK(count(s.states, wire::TurnState::archived) > 10);
  CHECK(s.states.back() == wire::TurnState::window);
  CHECK(count(s.states, wire::TurnState::summarized) == 0);
  const uint64_t shifted = tokens_shifted(server.endpoint);
  CHECK(shifted > 1000);  // most of each window moved, not computed again

  // The next turn sees exactly the system prompt, the window and itself:
  // its prompt equals a one-off conversation of those messages, and its
  // greedy answer that conversation's (the kept KV moved, not recomputed).
  const auto next = chat(server.endpoint, "long", turn_messages(30), 12, wire::ContextPolicy::window);
  REQUIRE(next.done);
  CHECK(next.usage.cached_prompt_tokens > next.usage.prompt_tokens / 2);
  CHECK(tokens_shifted(server.endpoint) > shifted);
  s = show(server.endpoint, "long");
  Messages alone = in_window(s);
  alone.pop_back();  // the answer
  CHECK(alone.back().second == user_text(30));
  const auto fresh = chat(server.endpoint, "", alone, 12, wire::ContextPolicy::refuse);
  REQUIRE(fresh.done);
  CHECK(fresh.usage.prompt_tokens == next.usage.prompt_tokens);
}

TEST_CASE("summarize: dropped turns are summarized in the background and the next turn sees the summary",
          "[service][long]") {
  Server server("summary", {"--context", "512"});
  std::vector<Messages> acked;
  run_turns(server.endpoint, "sum", 0, 14, wire::ContextPolicy::summarize, acked);
  StoredSession s = wait_for_summary(server.endpoint, "sum");
  REQUIRE(!s.summary.empty());
  CHECK(s.turns == acked);
  const std::string summary_seen = s.summary;
  const auto last = chat(server.endpoint, "sum", turn_messages(14), 12, wire::ContextPolicy::summarize);
  REQUIRE(last.done);
  const int32_t last_prompt = last.usage.prompt_tokens;
  acked.push_back(turn_messages(14));
  acked.back().emplace_back("assistant", last.text);
  s = show(server.endpoint, "sum");
  CHECK(s.turns == acked);
  CHECK(count(s.states, wire::TurnState::summarized) > 0);
  CHECK(s.states.back() == wire::TurnState::window);
  // Summarized turns come first, then maybe archived ones (past the summary,
  // awaiting the next), then the window.
  const auto first_window = std::find(s.states.begin(), s.states.end(), wire::TurnState::window) - s.states.begin();
  for (long t = 0; t < first_window; ++t) CHECK(s.states[static_cast<size_t>(t)] != wire::TurnState::window);
  CHECK(s.states.front() == wire::TurnState::summarized);
  // The prompt of the last turn was the system prompt, the summary it saw and
  // the window (a summary written since, of turns that turn dropped, is not in it).
  s.summary = summary_seen;
  Messages alone = in_window(s);
  alone.pop_back();
  const auto fresh = chat(server.endpoint, "", alone, 12, wire::ContextPolicy::refuse);
  REQUIRE(fresh.done);
  CHECK(fresh.usage.prompt_tokens == last_prompt);
}

TEST_CASE("a summarize policy needs a session, and an unknown policy is refused and nothing is stored", "[service][long]") {
  Server server("policy", {"--context", "512"});
  const auto one_off = chat(server.endpoint, "", turn_messages(0), 4, wire::ContextPolicy::summarize);
  CHECK(!one_off.done);
  CHECK(one_off.error == wire::ErrorCode::invalid_field);
  const auto unknown = chat(server.endpoint, "p", turn_messages(0), 4, static_cast<wire::ContextPolicy>(9));
  CHECK(!unknown.done);
  CHECK(unknown.error == wire::ErrorCode::invalid_field);
  CHECK(unknown.message.find("context_policy") != std::string::npos);
  messages::ClientConnection c(server.endpoint);
  const uint64_t id = c.next_id();
  c.send(messages::show_session_request(id, "p"));
  auto f = c.receive(10s);
  REQUIRE(f);
  const auto* r = messages::check_response(*f);
  REQUIRE(r->body_as_Error());
  CHECK(r->body_as_Error()->code() == wire::ErrorCode::unknown_session);
}

namespace {

// `turns` turns of one session under `policy` on --context 1024, with the
// server killed (SIGKILL) and restarted on its store halfway.
void long_run(const std::string& tag, wire::ContextPolicy policy, int turns) {
  const std::vector<std::string> flags{"--context", "1024"};
  std::vector<Messages> acked;
  std::string endpoint;
  {
    Server server(tag, flags);
    endpoint = server.endpoint;
    run_turns(endpoint, tag, 0, turns / 2, policy, acked);
    // A turn's pages are written after its Done (a crash before that costs
    // a recompute, never a turn); let the last turn's land first, so that the
    // restart below restores them.
    spills_settle(endpoint);
    server.process.stop(SIGKILL);
  }
  Server again(tag, flags, endpoint);
  CHECK(show(endpoint, tag).turns == acked);
  // The first turn after the restart restores the spilled pages and moves
  // the kept turns' KV from them: most of its prompt is not computed again.
  const int resume = turns / 2;
  const auto first = chat(endpoint, tag, turn_messages(resume), 12, policy);
  REQUIRE(first.done);
  {
    messages::ClientConnection c(endpoint);
    messages::Bytes keep;
    const auto* st = stats(c, keep);
    REQUIRE(st);
    CHECK(st->pages_restored() > 0);
  }
  // (Under summarize a summary stored just before the kill changes what
  // precedes the kept turns: their KV is then computed again, once.)
  if (policy == wire::ContextPolicy::window) CHECK(first.usage.cached_prompt_tokens > first.usage.prompt_tokens / 2);
  Messages m = turn_messages(resume);
  m.emplace_back("assistant", first.text);
  acked.push_back(std::move(m));
  run_turns(endpoint, tag, resume + 1, turns, policy, acked);
  const StoredSession s = show(endpoint, tag);
  CHECK(s.turns == acked);
  CHECK(s.states.back() == wire::TurnState::window);
  CHECK(count(s.states, wire::TurnState::window) < turns / 4);
  if (policy == wire::ContextPolicy::summarize) CHECK(count(s.states, wire::TurnState::summarized) > 0);
  CHECK(tokens_shifted(endpoint) > 0);
}

}  // namespace

TEST_CASE("300 turns on --context 1024 run to the end under window and summarize, through kill -9", "[service][long]") {
  SECTION("window") { long_run("w300", wire::ContextPolicy::window, 300); }
  SECTION("summarize") { long_run("s300", wire::ContextPolicy::summarize, 300); }
}

namespace {

// A user message of about 400 tokens, different for every turn.
std::string long_user_text(int turn) {
  std::string out = "Turn " + std::to_string(turn) + " notes:";
  for (int k = 0; k < 16; ++k)
    out += " item " + std::to_string(k) + " says fox " + std::to_string((turn * 31 + k * 7) % 997) + " met the dog.";
  return out;
}

}  // namespace

TEST_CASE("a session past 100K tokens under --kv-budget on --context 1024 is cut every turn and holds no page between turns",
          "[service][long]") {
  Server server("budget100k", {"--context", "1024", "--kv-budget", "128"});
  Reference ref;
  messages::ClientConnection c(server.endpoint);
  int64_t conversation = 0, excess = 0;  // the conversation's tokens; each prompt's past the budget
  int turns = 0;
  for (; conversation <= 100000 && turns < 400; ++turns) {
    INFO("turn " << turns << ", " << conversation << " tokens so far");
    const std::string user = long_user_text(turns);
    Messages m{{"user", user}};
    if (turns == 0) m.insert(m.begin(), {"system", kSystem});
    const auto out = chat(server.endpoint, "long-budget", m, 12, wire::ContextPolicy::window);
    REQUIRE(out.done);
    REQUIRE(out.error == wire::ErrorCode::none);
    CHECK(out.usage.prompt_tokens <= 1024);  // the window keeps each prompt in the context
    conversation += static_cast<int64_t>(ref.tokenizer->encode(user, false, false).size() + out.tokens.size());
    excess += out.usage.prompt_tokens - 128;
    // Nothing held between turns: the cut pages went back, none leak.
    REQUIRE(pages_return(c, 10s));
  }
  CHECK(conversation > 100000);
  REQUIRE(pages_return(c, 10s));
  messages::Bytes keep;
  const auto* st = stats(c, keep);
  REQUIRE(st);
  // Every turn's prompt is past the budget: its first decode cuts it to
  // under the budget, dropping at least the prompt's excess over it.
  CHECK(st->kv_evictions() >= static_cast<uint64_t>(turns));
  CHECK(st->kv_positions_evicted() >= static_cast<uint64_t>(excess));
  CHECK(show(server.endpoint, "long-budget").turns.size() == static_cast<size_t>(turns));
}
