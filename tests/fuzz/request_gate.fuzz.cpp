// A client frame as the socket delivers it, through the request gate
// (service/request_gate.h): verified and checked (messages/client_validation),
// then read into a tokenized request, a session turn, a query or a job. A
// session turn is then given a stored history, and every request the
// scheduler would see passes the gate's final check.
//
// Properties: whatever the bytes, the answer is one of the gate's outcomes
// (never an exception); a refusal names a code and a reason; a request's
// tokens are in the vocabulary; one that passes check() fits the context.
// The small context makes long prompts and sessions take the window and
// summary paths.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "engine/chat_template.h"
#include "service/request_gate.h"
#include "tests/fuzz/fuzz_support.h"

using namespace troupe;
using namespace troupe::service;

namespace {

constexpr int64_t kContext = 256;
constexpr int32_t kPageSize = 4;

const RequestGate& gate() {
  static const RequestGate g([] {
    GateConfig c;
    c.tokenizer = fuzz::synthetic_tokenizer();
    c.max_context = kContext;
    c.page_size = kPageSize;
    c.speculation = SpeculationDefault::every(SpeculationMode::automatic);
    c.draft_model = true;
    c.draft_names = {"draft"};
    return c;
  }());
  return g;
}

// A stored session of eight turns, a summary of the first two, and its
// token history's pages stored, as the persistence actor answers a turn.
persistence::SessionStart stored_session() {
  persistence::SessionStart s;
  s.turns.push_back({{"system", "You answer briefly."}, {"user", "Hello there"}, {"assistant", "Hi. What is it?"}});
  for (int i = 1; i < 8; ++i)
    s.turns.push_back({{"user", "Question " + std::to_string(i) + ": how do the pages move when a window shifts?"},
                       {"assistant", "They move by " + std::to_string(i * 16) + " positions."}});
  s.summary_through = 2;
  s.context_summary = "They greeted each other and asked about pages.";
  s.window_first_turn = 3;
  std::vector<ChatMessage> all;
  for (const auto& t : s.turns) all.insert(all.end(), t.begin(), t.end());
  s.kv_tokens = encode_chat(*fuzz::synthetic_tokenizer(), ChatFormat::chatml, all, false);
  s.kv_stored = static_cast<int32_t>(s.kv_tokens.size() / kPageSize);
  s.kv_data.assign(static_cast<size_t>(s.kv_stored), std::string(8, 'k'));
  return s;
}

void check_rejection(const messages::Rejection& r) {
  if (!r || r.message.empty()) fuzz::fail("a refusal without a code or a reason");
}

void check_admitted(const AdmitRequest& a, int32_t stored_pages) {
  const size_t vocab = fuzz::synthetic_tokenizer()->size();
  for (int32_t t : a.prompt)
    if (t < 0 || static_cast<size_t>(t) >= vocab) fuzz::fail("a prompt token outside the vocabulary");
  if (a.persisted_pages < 0 || a.persisted_pages > stored_pages || a.restore_pages.size() > static_cast<size_t>(stored_pages))
    fuzz::fail("restored pages the session does not have");
  if (const auto why = gate().check(a)) {
    check_rejection(*why);
  } else if (a.prompt.empty() || static_cast<int64_t>(a.prompt.size()) >= kContext) {
    fuzz::fail("check() passed a prompt that does not fit the context");
  }
}

}  // namespace

// Loading happens before the first input, so it is not timed as one.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)gate();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const persistence::SessionStart history = stored_session();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Admission a = gate().to_admit("fuzz-peer", bytes, 1);
  if (auto* r = std::get_if<messages::Rejection>(&a)) check_rejection(*r);
  if (auto* r = std::get_if<AdmitRequest>(&a)) check_admitted(*r, 0);
  if (auto* t = std::get_if<SessionTurn>(&a)) {
    auto turned = gate().with_history(std::move(*t), history);
    if (auto* r = std::get_if<messages::Rejection>(&turned)) check_rejection(*r);
    if (auto* r = std::get_if<AdmitRequest>(&turned)) check_admitted(*r, history.kv_stored);
  }
  return 0;
}
