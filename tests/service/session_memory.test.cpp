// Session memory's rule for what the user stated (service/session_memory.h):
// facts, names, numbers, preferences and decisions are kept; questions,
// requests, small talk and code are not.
#include <catch2/catch.hpp>

#include "service/session_memory.h"
#include "tests/service/harness.h"

using namespace troupe;
using namespace troupe::service;

namespace {

bool kept(std::string_view sentence) {
  const auto got = user_statements(sentence);
  return got.size() == 1 && got[0] == sentence;
}

}  // namespace

TEST_CASE("a user's statements about themselves and the task are kept word for word") {
  for (const char* s : {"My cat is called Pistachio.", "I live in Lisbon and work as a nurse.", "Always answer in French.",
                        "Call me Sam.", "The deadline is March 3.", "We decided to use Postgres for the store.",
                        "Please remember that my sister's birthday is in May.", "Our budget is 40,000 euros.",
                        "The project is named Falcon.", "Never use tabs in my code.", "I'm allergic to peanuts!",
                        "Let's keep the API in Go."})
    CHECK(kept(s));
}

TEST_CASE("questions, requests, small talk and code are not statements") {
  for (const char* s : {"Can you explain mutexes?", "Explain how a B-tree splits.", "Thanks, that helps!",
                        "I want to know how hash maps work.", "Tell me about my code.", "What does line 3 do",
                        "int x = 3; return x;", "for (auto& x : v) { sum += x; }", "Okay.", "Write a function for my project.",
                        "I don't understand the second step.", "How do I sort a list in Python"})
    CHECK(user_statements(s).empty());
}

TEST_CASE("a message's statements come out in order, one a sentence, whatever else it says") {
  const auto got = user_statements(
      "Hi! I'm Ana and I teach chemistry.\nCan you help me plan a lesson? It is for 14 students, "
      "each 12 years old. Explain titration simply.");
  CHECK(got == std::vector<std::string>{"I'm Ana and I teach chemistry.", "It is for 14 students, each 12 years old."});
}

TEST_CASE("statements are read once each, a pinned message is not read, and the memory cuts at its token share") {
  const auto tok = test::synthetic_tokenizer();
  std::vector<std::vector<ChatMessage>> turns = {
      {{"system", "My name is System."}, {"user", "My dog is Rex."}, {"assistant", "Nice."}},
      {{"user", "my dog is rex."}, {"assistant", "You said."}},
      {{"user", "I work at a bakery."}, {"assistant", "Fun."}},
      {{"user", "My code word is Lemon."}, {"assistant", "Noted."}},
      {{"user", "I have 3 cats."}, {"assistant", "Wow."}}};
  const std::vector<std::vector<int32_t>> pinned = {{}, {}, {}, {0}};
  const MemorySource src{turns, pinned, 1};
  const auto all = statements_of(*tok, src, 5);
  CHECK(statements_of(*tok, src, 2).size() == 1);  // turns 0 and 1: Rex, said twice
  REQUIRE(all.size() == 3);
  CHECK(all[0].text == "My dog is Rex.");
  CHECK(all[0].turn == 0);
  CHECK(all[1].text == "I work at a bakery.");
  CHECK(all[2].turn == 4);
  // Turns [0, 4) left out: the pin of turn 3 and the statements of turns 0 and 2.
  auto m = memory_before(src, 4, 4, all, 1 << 20, "topics");
  CHECK(m.facts == std::vector<std::string>{"My dog is Rex.", "I work at a bakery."});
  REQUIRE(m.pinned.size() == 1);
  CHECK(m.pinned[0].content == "My code word is Lemon.");
  CHECK(memory_message(m)->content ==
        "Messages pinned earlier in this conversation:\nUser: My code word is Lemon.\n\n"
        "What the user has told you earlier, in their words:\n- My dog is Rex.\n- I work at a bakery.\n\n"
        "Summary of the conversation so far: topics");
  // A share that holds only the first: the rest overflow, in order.
  m = memory_before(src, 5, 5, all, all[0].tokens, {});
  CHECK(m.facts == std::vector<std::string>{"My dog is Rex."});
  CHECK(m.overflow == std::vector<std::string>{"I work at a bakery.", "I have 3 cats."});
  CHECK_FALSE(memory_message(memory_before(src, 0, 0, all, 1 << 20, {})));
  // Left out but not yet summarized: the pin alone.
  m = memory_before(src, 4, 0, all, 1 << 20, {});
  CHECK(m.facts.empty());
  CHECK(m.pinned.size() == 1);
}
