#pragma once
// Ingestion's decisions: what a client's frame is. Bytes pass the gate
// (messages/client_validation.h: verifier limits, then field checks); a
// Generate or ChatTurn is tokenized (the model's chat template for a
// ChatTurn) into an AdmitRequest for the scheduler; a session turn first
// needs its stored history; everything else is a query for the actor that
// answers it. One bad client never affects another: each failure is a
// Rejection for that client alone.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/chat_template.h"
#include "engine/tokenizer.h"
#include "messages/client_validation.h"
#include "messages/curve_auth.h"
#include "persistence/principal.h"
#include "persistence/session_turns.h"
#include "service/admit_request.h"
#include "service/batch_jobs.h"
#include "service/cascade.h"
#include "service/speculation_default.h"

namespace troupe::grammar {
class GrammarCache;
}

namespace troupe::service {

struct GateConfig {
  std::shared_ptr<const Tokenizer> tokenizer;
  ChatFormat chat_format = ChatFormat::chatml;
  messages::ClientLimits limits;
  int64_t max_context = 4096;
  int32_t max_samples = 16;  // 1 when the verifier's backend cannot copy KV pages
  int32_t page_size = 16;
  SpeculationDefault speculation;  // the server's, for requests that do not choose
  int32_t max_draft = 8;
  bool draft_model = false;              // the server has a draft model
  std::vector<std::string> draft_names;  // what requests may call it
  // The clients CURVE admits, with their policies (messages/curve_auth.h);
  // null: no authentication (no ownership, one fair share per connection).
  std::shared_ptr<const messages::ClientDirectory> clients;
  // The response cache tier: kept by this server (serve --response-cache-mb
  // > 0), and the model file's fingerprint its keys carry.
  bool response_cache = false;
  uint64_t model_fingerprint = 0;
  // Cascade tiers (service/cascade.h); null or empty: one model.
  std::shared_ptr<const TierTable> tiers;
};

// The name under which a gateway asks for the server's own figures (the HTTP
// port's /metrics): under --auth it reads stats and nothing else. A NUL
// byte keeps it from being any client's name (a key file's stem).
inline const std::string kGatewayStats("\0gateway/stats", 14);

// A request that is not a prompt: answered by ingestion (ping), the
// scheduler (stats, cancel), the persistence actor (sessions) or the job
// actor (jobs).
struct Query {
  enum class Kind : uint8_t { ping, stats, cancel, list_sessions, show_session, delete_session, job, take_session, file };
  Kind kind = Kind::ping;
  std::string peer;
  uint64_t client_id = 0;
  uint64_t number = 0;  // ping: the nonce; cancel: the target request id
  std::string name;     // the session or job id
  JobQuery job = JobQuery::status;
  persistence::Principal who;
  messages::TakeSessionFields take;  // take_session: another front end's hand-off step
  std::string request;               // file: the Request itself (persistence/files.h reads it)
};

// A ChatTurn of a stored session: its prompt is the chat template over the
// stored history and the new messages (with_history()).
struct SessionTurn {
  AdmitRequest request;
  persistence::Principal who;
  int32_t expected_turns = -1;  // ChatTurn.expected_turns
};

using Admission = std::variant<AdmitRequest, SessionTurn, Query, JobSubmission, messages::Rejection>;

class RequestGate {
 public:
  explicit RequestGate(GateConfig config);
  ~RequestGate();

  // `now`: the steady clock, stamped on admitted requests. `client`: the
  // name CURVE authenticated the sender as ("" without authentication):
  // its sessions and jobs, its fair share, the priority it may claim.
  Admission to_admit(const std::string& peer, std::string_view bytes, int64_t now, const std::string& client = {}) const;
  // The session turn's prompt from its stored history (`start` without an
  // error: the session is then busy with this turn); stored KV pages serve
  // the prefix the new prompt shares with the stored token history.
  std::variant<AdmitRequest, messages::Rejection> with_history(SessionTurn turn, persistence::SessionStart start) const;
  // What every tokenized request must pass before the scheduler.
  std::optional<messages::Rejection> check(const AdmitRequest& a) const;
  // An item of a job of whole requests (SubmitJob.requests): read as the
  // same request sent alone (a Generate, or a ChatTurn without a session).
  std::variant<AdmitRequest, messages::Rejection> job_item(std::string_view request, int64_t now) const;

 private:
  Admission read(const std::string& peer, std::string_view bytes, int64_t now) const;
  std::optional<messages::Rejection> read_generate(const wire::Generate& g, AdmitRequest& a) const;
  std::optional<messages::Rejection> read_chat(const wire::ChatTurn& t, AdmitRequest& a, std::vector<ChatMessage>& chat) const;
  Admission chat_turn(const wire::ChatTurn& t, AdmitRequest a) const;
  Admission submit_job(const wire::SubmitJob& job, const std::string& peer, uint64_t id, int64_t now) const;
  std::optional<std::string> bias_problem(const messages::SamplingFields& s) const;
  void resolve_response_cache(AdmitRequest& a, bool asked) const;
  std::optional<std::string> resolve_speculation(AdmitRequest& a, wire::Speculation s, int32_t max_draft,
                                                 const flatbuffers::String* draft_model) const;
  int64_t prompt_budget(const AdmitRequest& a) const;
  static constexpr int64_t kSinkTokens = 16;  // a Generate under window keeps its first page
  GateConfig cfg_;
  std::shared_ptr<grammar::GrammarCache> grammars_;  // constraints compiled at admission, by their text
};

}  // namespace troupe::service
