#pragma once
// Batch jobs' decisions (the job actor's state): a SubmitJob becomes a
// durable job before JobAccepted; its items then run as requests the server
// makes itself (internal peers, admit_request.h) at the job's priority, at
// most `max_in_flight` at a time, all jobs together, so interactive streams
// keep the engine. Each finished item is stored before its event is
// published. On start, every stored job still running resumes with exactly
// its items that have no stored result.
//
// Every call leaves what is to be done in the work list (take()): replies,
// items to admit, writes for the store (whose outcomes come back through
// created(), stored() and cancel_stored()), events and cancels.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "engine/chat_template.h"
#include "engine/grammar/text_check.h"
#include "engine/tokenizer.h"
#include "messages/job_frames.h"
#include "persistence/jobs.h"
#include "service/admit_request.h"
#include "service/cascade.h"
#include "service/outbound.h"
#include "service/speculation_default.h"

namespace troupe::service {

// A validated SubmitJob.
struct JobSubmission {
  std::string peer;
  uint64_t client_id = 0;
  persistence::Principal who;  // the job becomes who's
  std::vector<std::string> items;
  std::string item_template;
  messages::SamplingFields sampling;
  wire::Priority priority = wire::Priority::batch;
  std::vector<std::string> requests;  // a job of whole requests: item i's Request (items: labels)
  std::string annotation;
  messages::JobCheckFields check;  // each item's answer checked (docs/CASCADE.md, "Checked jobs")
};

enum class JobQuery : uint8_t { status, results, cancel, list };

// A session's summary to write (context_window.h, summarize policy): the
// server asks it of the model at batch priority, like a job item.
struct SummaryTask {
  std::string session_id;
  std::vector<ChatMessage> messages;  // the request to summarize
  int32_t through = 0;                // the summary stands for turns [0, through)
};
struct SummaryResult {
  std::string session_id;
  std::string text;
  int32_t through = 0;
};

struct JobWork {
  struct Create {  // a new job to store durably; then created()
    persistence::JobRecord job;
    std::string peer;
    uint64_t client_id = 0;
  };
  struct Result {  // an item's result with the job as it then is; then stored()
    persistence::JobRecord job;
    messages::JobItemFields result;
  };
  struct CancelWrite {  // the cancelled job's header; then cancel_stored()
    persistence::JobRecord job;
    std::string peer;
    uint64_t client_id = 0;
  };
  std::vector<Reply> replies;
  std::vector<AdmitRequest> admits;
  std::vector<Create> creates;
  std::vector<Result> results;
  std::vector<persistence::JobRecord> headers;  // final states: written, failures only logged
  std::vector<CancelWrite> cancel_writes;
  std::vector<std::pair<std::string, messages::Bytes>> events;  // (topic = job id, JobEvent)
  std::vector<std::pair<std::string, uint64_t>> cancels;        // (internal peer, item request id)
  std::vector<SummaryResult> summaries;                          // to store with their sessions
  struct Load {  // an ended job's results, asked for after it left memory; then loaded()
    std::string job_id, peer;
    uint64_t client_id = 0;
  };
  std::vector<Load> loads;
  int64_t retry_after_ms = 0;  // > 0: call retry() then
  std::vector<std::string> check_failures;  // the tier (its name) of each answer that failed its job's check
};

struct BatchJobsConfig {
  std::shared_ptr<const Tokenizer> tokenizer;
  ChatFormat chat_format = ChatFormat::chatml;
  int64_t max_context = 4096;
  size_t max_prompt_bytes = 1 << 20;  // an item's expanded prompt, as the request gate bounds it
  int32_t max_in_flight = 4;
  // The server's speculation for a template job's items (a job of requests:
  // each request's own): items of modes suffix and auto draft from the
  // job's earlier items (service/suffix_history.h).
  SpeculationDefault speculation;
  int32_t max_draft = 4;
  int64_t suffix_seed_tokens = int64_t{1} << 14;  // a resumed job's finished items its first item brings
  // Jobs that ended kept whole (items and results) in memory, the latest
  // first; older ones keep only their summary, and a results query reads them
  // from the store (JobWork::loads).
  size_t max_cached_jobs = 256;
  std::shared_ptr<const TierTable> tiers;  // cascade tiers: items take the job's route; null: one model
  std::string summary_tier;  // the tier that writes session summaries; empty: the default route
  std::function<int64_t()> clock;       // steady nanoseconds; empty: the steady clock
  std::function<int64_t()> unix_clock;  // Unix milliseconds, for what is stored; empty: the system clock
  // A job of whole requests: an item's Request as the request gate reads it
  // (RequestGate::job_item), or why it cannot run.
  std::function<std::variant<AdmitRequest, std::string>(const std::string& request)> read_request;
};

class BatchJobs {
 public:
  explicit BatchJobs(BatchJobsConfig config);

  // The stored jobs (once, at start); submissions and queries before it wait.
  // `damage`: why some could not be read; a query for a job not loaded then
  // says the store is damaged rather than that no such job exists.
  void load(std::vector<persistence::JobRecord> stored, std::string damage = "");
  void submit(JobSubmission submission);
  void created(const persistence::JobRecord& job, const std::string& peer, uint64_t client_id, const std::string& error);
  // One response frame of an item's request.
  void on_item(uint64_t client_id, const std::string& bytes);
  void stored(const std::string& job_id, const messages::JobItemFields& result, const std::string& error);
  void store_unreachable(const std::string& job_id) { --writing_[job_id]; }
  // Only jobs `who` may use are listed or answered (others: forbidden).
  void query(const std::string& peer, uint64_t client_id, JobQuery q, const std::string& job_id,
             const persistence::Principal& who = {});
  // Whether `who` may follow the events of topic `topic` (a job id; any
  // topic for an admin): CURVE's event socket admits subscriptions by it.
  bool may_subscribe(const persistence::Principal& who, const std::string& topic) const;
  void cancel_stored(const persistence::JobRecord& job, const std::string& peer, uint64_t client_id,
                     const std::string& error);
  void retry() { pump(); }
  // The store's answer to a JobWork::Load: the job, or why it could not be read.
  void loaded(const JobWork::Load& load, const std::optional<persistence::JobRecord>& job, const std::string& error);
  size_t jobs_in_memory() const { return jobs_.size(); }
  // Jobs still running (every one is in memory: only ended jobs are archived).
  int64_t running_jobs() const;
  // Ended jobs retention deleted from the store: gone from memory too, so
  // they answer unknown_job (a running job is never deleted, nor forgotten).
  void forget(const std::vector<std::string>& job_ids);
  // One summary per session in flight; a later task for it waits for the next turn.
  void summarize(SummaryTask task);

  JobWork take() { return std::exchange(work_, {}); }
  size_t in_flight() const { return in_flight_.size(); }

 private:
  struct InFlight {
    std::string job;
    int32_t index = 0;
    std::string text;
    int32_t prompt_tokens = 0;
    bool constrained = false;
  };
  struct EarlyQuery {
    std::string peer;
    uint64_t client_id;
    JobQuery query;
    std::string job;
    persistence::Principal who;
  };
  void pump();
  std::optional<std::string> item_prompt(const persistence::JobRecord& job, int32_t index, AdmitRequest& a) const;
  void finish_item(const std::string& job_id, messages::JobItemFields result);
  void queue_unfinished(const persistence::JobRecord& job);
  void publish(wire::JobEventKind kind, const persistence::JobRecord& job, const messages::JobItemFields* item);
  void reply(const std::string& peer, uint64_t client_id, messages::Bytes bytes) {
    work_.replies.push_back({peer, client_id, std::move(bytes)});
  }
  std::string new_job_id();

  BatchJobsConfig cfg_;
  bool loaded_ = false;
  std::string damage_;
  std::map<std::string, persistence::JobRecord> jobs_;
  std::map<std::string, messages::JobSummaryFields> archived_;  // ended, out of memory: summaries only
  std::deque<std::string> ended_;                               // ended jobs in jobs_, oldest first
  void retire(const std::string& job_id);                       // it ended: may send older ones to archived_
  std::unordered_map<std::string, int64_t> started_ns_;       // when this server began running the job
  std::unordered_map<std::string, int64_t> tokens_this_run_;  // completion tokens since then
  std::deque<std::pair<std::string, int32_t>> pending_;       // items to run, in order
  std::unordered_map<uint64_t, InFlight> in_flight_;          // by the item request's client id
  std::unordered_map<std::string, int32_t> writing_;          // results being stored, per job
  std::set<std::string> unseeded_;  // resumed here: the first item brings the finished ones' outputs
  std::vector<std::vector<int32_t>> finished_outputs(const persistence::JobRecord& job) const;
  // The job's check (docs/CASCADE.md, "Checked jobs"): each answer judged;
  // one that fails from a tier below the last is answered again by the next.
  struct Retry {
    std::string tier;  // the tier it runs on next
    int32_t retried = 0;
  };
  std::map<std::pair<std::string, int32_t>, Retry> retries_;  // (job, item)
  std::map<std::string, std::unique_ptr<grammar::TextCheck>> checks_;  // built when first needed
  bool check_answer(const std::string& job_id, const wire::Done& done, messages::JobItemFields& result);
  grammar::TextCheck* check_of(const persistence::JobRecord& job);
  struct SummaryInFlight {
    std::string session_id;
    int32_t through = 0;
    std::string text;
  };
  std::unordered_map<uint64_t, SummaryInFlight> summaries_;   // by the request's client id
  bool on_summary(uint64_t client_id, const std::string& bytes);
  uint64_t next_id_ = 1;
  std::vector<JobSubmission> early_;
  std::vector<EarlyQuery> early_queries_;
  std::set<std::string> swept_before_load_;  // forgotten before load(): not loaded then
  std::mt19937_64 rng_{std::random_device{}()};
  JobWork work_;
};

}  // namespace troupe::service
