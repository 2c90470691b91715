#include "service/session_memory.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace troupe::service {
namespace {

constexpr size_t kMinStatement = 8, kMaxStatement = 300;

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && (space(s.front()) || s.front() == '-' || s.front() == '*' || s.front() == '>')) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Words of a lowercased sentence: letters, digits and apostrophes.
std::vector<std::string_view> words_of(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && !std::isalnum(static_cast<unsigned char>(s[i])) && s[i] != '\'') ++i;
    const size_t b = i;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '\'')) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

bool among(std::string_view w, std::span<const std::string_view> set) {
  return std::find(set.begin(), set.end(), w) != set.end();
}

// Pasted code or data is no statement: it reads as punctuation, not prose.
bool looks_like_code(std::string_view s) {
  if (s.find_first_of("{};`<>|\\") != std::string_view::npos) return true;
  size_t prose = 0;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == ' ' || c == ',' || c == '\'' || c == '.' || c == '!' ||
        (c & 0x80))
      ++prose;
  return prose * 10 < s.size() * 9;
}

// One sentence's verdict (lowercased, trimmed, at most kMaxStatement bytes).
bool states_something(std::string_view s) {
  static constexpr std::string_view kFillers[] = {"so", "ok", "okay", "also", "and", "but", "well", "oh", "please"};
  // ("let's": a decision the user takes with the assistant.)
  static constexpr std::string_view kFirstPerson[] = {"i",  "i'm",   "im",    "i've",  "i'd",  "i'll", "my",
                                                      "mine", "myself", "we",   "we're", "we've", "we'd", "we'll",
                                                      "our", "ours",  "us",    "let's"};
  // Words that make a sentence a standing instruction or a name, whoever it is about.
  static constexpr std::string_view kStanding[] = {"always", "never", "remember", "prefer", "decided",
                                                               "called", "named", "deadline"};
  // Openers of a request or a question without its question mark, and of small talk.
  static constexpr std::string_view kRequests[] = {
      "explain", "show", "tell",   "write", "give",  "list", "describe", "compare", "summarize", "what",
      "how",     "why",  "when",   "where", "which", "who",  "can",      "could",   "would",     "will",
      "should",  "do",   "does",   "is",    "are",   "thanks", "thank",  "great",   "cool",      "nice",
      "perfect", "awesome", "hi",  "hello", "hey"};
  // First-person openers that ask rather than state.
  static constexpr std::string_view kAsking[] = {
      "i want to know", "i'd like to know", "i would like to know", "i wonder", "i'm wondering", "i am wondering",
      "i'm curious",    "i am curious",     "i don't understand",   "i do not understand", "i don't get",
      "i'm confused",   "i am confused",    "i need help",          "i'm not sure",        "i am not sure",
      "i see",          "i understand",     "i get it",             "i agree"};
  auto w = words_of(s);
  size_t lead = 0;
  while (lead < w.size() && among(w[lead], kFillers)) ++lead;
  if (lead == w.size()) return false;
  const std::string_view rest = s.substr(static_cast<size_t>(w[lead].data() - s.data()));
  for (std::string_view a : kAsking)
    if (rest.starts_with(a)) return false;
  bool first_person = false, standing = false, digit = false;
  for (size_t i = lead; i < w.size(); ++i) {
    first_person |= among(w[i], kFirstPerson);
    standing |= among(w[i], kStanding) || (w[i] == "call" && i + 1 < w.size() && w[i + 1] == "me");
    digit |= std::isdigit(static_cast<unsigned char>(w[i].front())) != 0;
  }
  // "Tell me about my code" is a request, "Step 2: explain it" too; "never use tabs" is kept.
  bool request = among(w[lead], kRequests);
  if (const size_t colon = s.find(':'); colon < 32) {
    const auto after = words_of(s.substr(colon + 1));
    size_t i = 0;
    while (i < after.size() && among(after[i], kFillers)) ++i;
    request |= i < after.size() && among(after[i], kRequests);
  }
  if (request) return standing;
  return first_person || standing || digit;
}

}  // namespace

std::vector<std::string> user_statements(std::string_view text) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const bool end = i == text.size() || text[i] == '\n' ||
                     ((text[i] == '.' || text[i] == '!' || text[i] == '?') &&
                      (i + 1 == text.size() || std::isspace(static_cast<unsigned char>(text[i + 1]))));
    if (!end) continue;
    const size_t stop = i < text.size() && text[i] != '\n' ? i + 1 : i;
    const std::string_view s = trim(text.substr(begin, stop - begin));
    begin = i + 1;
    if (s.size() < kMinStatement || s.size() > kMaxStatement || s.back() == '?' || looks_like_code(s)) continue;
    if (states_something(lower_ascii(s))) out.emplace_back(s);
  }
  return out;
}

std::vector<UserStatement> statements_of(const Tokenizer& tok, const MemorySource& src, int32_t through) {
  std::vector<UserStatement> out;
  std::set<std::string> seen;
  for (size_t t = 0; t < src.turns.size() && t < static_cast<size_t>(std::max(0, through)); ++t) {
    const auto& msgs = src.turns[t];
    const std::vector<int32_t>* pinned = t < src.pinned.size() ? &src.pinned[t] : nullptr;
    for (size_t i = t == 0 ? src.sink : 0; i < msgs.size(); ++i) {
      if (msgs[i].role != "user") continue;
      // A pinned message is kept whole already.
      if (pinned && std::binary_search(pinned->begin(), pinned->end(), static_cast<int32_t>(i))) continue;
      for (std::string& s : user_statements(msgs[i].content)) {
        if (!seen.insert(lower_ascii(s)).second) continue;
        const auto tokens = static_cast<int32_t>(tok.encode(s, false, false).size()) + 2;  // its "- " and line
        out.push_back({static_cast<int32_t>(t), std::move(s), tokens});
      }
    }
  }
  return out;
}

SessionMemory memory_before(const MemorySource& src, int32_t first, int32_t summarized,
                            std::span<const UserStatement> statements, int64_t fact_tokens, std::string summary) {
  SessionMemory m;
  m.summary = std::move(summary);
  for (int32_t t = 0; t < first && static_cast<size_t>(t) < src.turns.size(); ++t) {
    if (static_cast<size_t>(t) >= src.pinned.size()) break;
    for (int32_t i : src.pinned[static_cast<size_t>(t)]) {
      const size_t skip = t == 0 ? src.sink : 0;  // a pinned system message of the sink is there already
      if (i >= static_cast<int32_t>(skip) && static_cast<size_t>(i) < src.turns[static_cast<size_t>(t)].size())
        m.pinned.push_back(src.turns[static_cast<size_t>(t)][static_cast<size_t>(i)]);
    }
  }
  int64_t used = 0;
  for (const UserStatement& s : statements) {
    if (s.turn >= summarized) break;
    if (used + s.tokens <= fact_tokens && m.overflow.empty()) {
      used += s.tokens;
      m.facts.push_back(s.text);
    } else {
      m.overflow.push_back(s.text);
    }
  }
  return m;
}

std::optional<ChatMessage> memory_message(const SessionMemory& m) {
  if (m.empty()) return std::nullopt;
  std::string text;
  auto section = [&text](std::string_view head) {
    if (!text.empty()) text += "\n\n";
    text += head;
  };
  if (!m.pinned.empty()) {
    section("Messages pinned earlier in this conversation:");
    for (const ChatMessage& p : m.pinned) {
      const char* who = p.role == "assistant" ? "Assistant" : p.role == "system" ? "System" : p.role == "tool" ? "Tool" : "User";
      text += "\n" + std::string(who) + ": " + p.content;
    }
  }
  if (!m.facts.empty()) {
    section("What the user has told you earlier, in their words:");
    for (const std::string& f : m.facts) text += "\n- " + f;
  }
  if (!m.summary.empty()) section("Summary of the conversation so far: " + m.summary);
  return ChatMessage{"system", std::move(text)};
}

}  // namespace troupe::service
