#include "service/batch_jobs.h"

#include <algorithm>
#include <cstdio>

#include "messages/client_validation.h"
#include "service/clock.h"
#include "service/constraint_gate.h"
#include "service/route_request.h"
#include "service/suffix_history.h"

namespace troupe::service {
namespace {

Priority job_priority(wire::Priority p) {
  switch (p) {
    case wire::Priority::interactive: return Priority::interactive;
    case wire::Priority::chat: return Priority::chat;
    default: return Priority::batch;
  }
}

}  // namespace

BatchJobs::BatchJobs(BatchJobsConfig config) : cfg_(std::move(config)) {
  if (!cfg_.clock) cfg_.clock = steady_ns;
  if (!cfg_.unix_clock) cfg_.unix_clock = unix_ms;
}

std::string BatchJobs::new_job_id() {
  char buf[48];
  // Fixed width, so no id is a prefix of another (event topics match by
  // prefix), and 64 random bits, so no one guesses another's.
  std::snprintf(buf, sizeof buf, "job-%011llx-%016llx", static_cast<unsigned long long>(cfg_.unix_clock()),
                static_cast<unsigned long long>(rng_()));
  return buf;
}

void BatchJobs::publish(wire::JobEventKind kind, const persistence::JobRecord& job, const messages::JobItemFields* item) {
  const int64_t now = cfg_.clock();
  auto started = started_ns_.find(job.id);
  const double secs = static_cast<double>(now - (started != started_ns_.end() ? started->second : now)) / 1e9;
  const double tps = secs > 0 ? static_cast<double>(tokens_this_run_[job.id]) / secs : 0.0;
  work_.events.emplace_back(job.id, messages::job_event(kind, job.summary(), item, tps));
}

void BatchJobs::queue_unfinished(const persistence::JobRecord& job) {
  started_ns_.emplace(job.id, cfg_.clock());
  for (int32_t i = 0; i < static_cast<int32_t>(job.items.size()); ++i)
    if (!job.results.count(i)) pending_.emplace_back(job.id, i);
}

void BatchJobs::load(std::vector<persistence::JobRecord> stored, std::string damage) {
  damage_ = std::move(damage);
  for (auto& job : stored) {
    if (swept_before_load_.count(job.id) && job.state != wire::JobState::running) continue;
    const bool resume = job.state == wire::JobState::running;
    auto& j = jobs_.emplace(job.id, std::move(job)).first->second;
    if (resume && j.results.size() == j.items.size()) {
      // Every result was stored but not the final state (a crash between
      // the last results and the header that follows them): finished now.
      j.state = wire::JobState::finished;
      j.updated_ms = cfg_.unix_clock();
      work_.headers.push_back(j);
      publish(wire::JobEventKind::job_finished, j, nullptr);
      retire(j.id);
      continue;
    }
    if (!resume) {
      retire(j.id);
      continue;
    }
    queue_unfinished(j);
    if (!j.results.empty()) unseeded_.insert(j.id);
    publish(wire::JobEventKind::job_resumed, j, nullptr);
    std::fprintf(stderr, "troupe serve: resuming job %s (%zu of %zu items done)\n", j.id.c_str(), j.results.size(),
                 j.items.size());
  }
  loaded_ = true;
  swept_before_load_.clear();
  for (auto& s : std::exchange(early_, {})) submit(std::move(s));
  for (auto& q : std::exchange(early_queries_, {})) query(q.peer, q.client_id, q.query, q.job, q.who);
  pump();
}

void BatchJobs::submit(JobSubmission s) {
  if (!loaded_) return early_.push_back(std::move(s));
  persistence::JobRecord job;
  do job.id = new_job_id();
  while (jobs_.count(job.id));
  job.items = std::move(s.items);
  job.item_template = std::move(s.item_template);
  job.sampling = std::move(s.sampling);
  job.priority = s.priority;
  job.owner = s.who.name;
  job.created_ms = job.updated_ms = cfg_.unix_clock();
  job.requests = std::move(s.requests);  // each checked by the gate as it would run
  job.annotation = std::move(s.annotation);
  job.check = std::move(s.check);
  // Every item must fit before the job is stored: a job that is accepted runs.
  for (int32_t i = 0; job.requests.empty() && i < static_cast<int32_t>(job.items.size()); ++i) {
    AdmitRequest probe;
    if (auto problem = item_prompt(job, i, probe))
      return reply(s.peer, s.client_id,
                   messages::error_response(s.client_id, wire::ErrorCode::too_long,
                                            "SubmitJob.items[" + std::to_string(i) + "]: " + *problem +
                                                "; nothing was stored"));
  }
  work_.creates.push_back({std::move(job), s.peer, s.client_id});
}

void BatchJobs::created(const persistence::JobRecord& job, const std::string& peer, uint64_t client_id,
                        const std::string& error) {
  if (!error.empty())
    return reply(peer, client_id,
                 messages::error_response(client_id, wire::ErrorCode::storage_failed,
                                          "the job was not stored, nothing will run: " + error));
  const auto& j = jobs_.emplace(job.id, job).first->second;
  reply(peer, client_id, messages::job_accepted_response(client_id, j.summary()));
  queue_unfinished(j);
  pump();
}

// The item's chat prompt, or why it cannot run.
std::optional<std::string> BatchJobs::item_prompt(const persistence::JobRecord& job, int32_t index, AdmitRequest& a) const {
  // Counted before it is built: a stored job from before the gate bounded
  // expansions must fail its item, not exhaust memory on every restart.
  if (const size_t bytes = job.prompt_bytes(index); bytes > cfg_.max_prompt_bytes)
    return "the item's prompt expands to " + std::to_string(bytes) + " bytes; at most " +
           std::to_string(cfg_.max_prompt_bytes);
  try {
    const std::vector<ChatMessage> chat{{"user", job.prompt(index)}};
    a.prompt = encode_chat(*cfg_.tokenizer, cfg_.chat_format, chat, true);
    if (static_cast<int64_t>(a.prompt.size()) >= cfg_.max_context)
      return "the item's prompt has " + std::to_string(a.prompt.size()) + " tokens; the context holds " +
             std::to_string(cfg_.max_context);
  } catch (const std::exception& e) {
    return std::string("the item's prompt: ") + e.what();
  }
  return std::nullopt;
}

void BatchJobs::pump() {
  while (static_cast<int32_t>(in_flight_.size()) < cfg_.max_in_flight && !pending_.empty()) {
    auto [job_id, index] = pending_.front();
    pending_.pop_front();
    auto it = jobs_.find(job_id);
    if (it == jobs_.end() || it->second.state != wire::JobState::running || it->second.results.count(index)) continue;
    const persistence::JobRecord& job = it->second;
    AdmitRequest a;
    std::optional<std::string> problem;
    if (!job.requests.empty()) {
      // A whole request: read again as the gate read it at submission (its
      // grammar and tools are derived, not stored).
      auto read = cfg_.read_request ? cfg_.read_request(job.requests[static_cast<size_t>(index)])
                                    : std::variant<AdmitRequest, std::string>(std::string("no reader of requests"));
      if (auto* why = std::get_if<std::string>(&read)) problem = *why;
      else a = std::get<AdmitRequest>(std::move(read));
    } else {
      a.sampling = job.sampling;
      a.speculation = cfg_.speculation.of(a.sampling.temperature);
      a.max_draft = cfg_.max_draft;
    }
    a.peer = job_peer(job_id);
    a.client_id = next_id_++;
    a.tenant = job.owner;  // its owner's fair share ("": the job's own)
    a.priority = job_priority(job.priority);
    a.accepted_ns = cfg_.clock();
    if (job.requests.empty()) {
      // The constraint's GBNF is derived, not stored: a job resumed after a
      // restart lowers it again (the same text, so the same compiled grammar).
      problem = a.sampling.grammar.empty() ? lower_constraint(a.sampling, false) : std::nullopt;
      if (!problem) problem = item_prompt(job, index, a);
    }
    // An answer that failed the job's check: the next tier answers it again.
    if (auto r = retries_.find({job_id, index}); r != retries_.end()) a.sampling.tier = r->second.tier;
    if (!problem && (job.requests.empty() || retries_.count({job_id, index})))
      problem = route_request(cfg_.tiers.get(), a);
    if (problem) {
      messages::JobItemFields r;
      r.index = index;
      r.error = *problem;
      finish_item(job_id, r);
      continue;
    }
    // After a restart the job's suffix tree is rebuilt from what its items wrote.
    if (drafts_from_suffix(a.speculation) && unseeded_.erase(job_id)) a.suffix_seed = finished_outputs(job);
    in_flight_.emplace(a.client_id, InFlight{job_id, index, {}, 0, !a.sampling.grammar.empty()});
    work_.admits.push_back(std::move(a));
  }
}

// The finished items' outputs, tokenized, oldest first: the latest items
// that fit in cfg_.suffix_seed_tokens.
std::vector<std::vector<int32_t>> BatchJobs::finished_outputs(const persistence::JobRecord& job) const {
  std::vector<std::string_view> newest_first;
  for (auto r = job.results.rbegin(); r != job.results.rend(); ++r) newest_first.push_back(r->second.text);
  return seed_from_texts(*cfg_.tokenizer, newest_first, cfg_.suffix_seed_tokens);
}

grammar::TextCheck* BatchJobs::check_of(const persistence::JobRecord& job) {
  auto it = checks_.find(job.id);
  if (it == checks_.end()) {
    std::unique_ptr<grammar::TextCheck> built;
    try {
      built = std::make_unique<grammar::TextCheck>(static_cast<grammar::TextCheckKind>(job.check.kind), job.check.text);
    } catch (const std::exception& e) {  // a stored job's check this engine no longer takes: unchecked, said once
      std::fprintf(stderr, "troupe serve: job %s: its check cannot run: %s\n", job.id.c_str(), e.what());
    }
    it = checks_.emplace(job.id, std::move(built)).first;
  }
  return it->second.get();
}

// The job's check of an item's answer, recorded in its result. An answer
// that fails, written by a tier below the last, goes back to the queue's
// front for the next tier (true); the result then waits for that answer.
bool BatchJobs::check_answer(const std::string& job_id, const wire::Done& done, messages::JobItemFields& res) {
  auto jt = jobs_.find(job_id);
  if (jt == jobs_.end() || jt->second.check.kind == wire::JobCheckKind::none) return false;
  const std::pair<std::string, int32_t> key{job_id, res.index};
  auto r = retries_.find(key);
  res.retried = r == retries_.end() ? 0 : r->second.retried;
  grammar::TextCheck* check = check_of(jt->second);
  if (!check) return false;
  if (check->passes(res.text)) {
    res.check = wire::CheckOutcome::passed;
    retries_.erase(key);
    return false;
  }
  res.check = wire::CheckOutcome::failed;
  const auto* segments = done.tiers();
  const std::string tier = segments && segments->size() > 0 ? messages::text_of(segments->Get(segments->size() - 1)->tier()) : "";
  if (!tier.empty()) work_.check_failures.push_back(tier);
  const auto& names = cfg_.tiers ? cfg_.tiers->names : std::vector<std::string>{};
  const auto at = std::find(names.begin(), names.end(), tier);
  if (at == names.end() || at + 1 == names.end()) {
    retries_.erase(key);
    return false;
  }
  retries_[key] = {*(at + 1), res.retried + 1};
  pending_.emplace_front(job_id, res.index);
  return true;
}

// The item's result goes to the store; only once stored is it in memory and published.
void BatchJobs::finish_item(const std::string& job_id, messages::JobItemFields result) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.state != wire::JobState::running) return;
  persistence::JobRecord next = it->second;
  if (!next.requests.empty() && result.index >= 0 && static_cast<size_t>(result.index) < next.items.size())
    result.label = next.items[static_cast<size_t>(result.index)];
  next.results[result.index] = result;
  next.updated_ms = cfg_.unix_clock();
  if (next.results.size() == next.items.size()) next.state = wire::JobState::finished;
  ++writing_[job_id];
  work_.results.push_back({std::move(next), std::move(result)});
}

void BatchJobs::summarize(SummaryTask task) {
  for (const auto& [id, s] : summaries_)
    if (s.session_id == task.session_id) return;
  AdmitRequest a;
  a.peer = internal_peer("summary/" + task.session_id);
  a.client_id = next_id_++;
  a.sampling.temperature = 0;
  a.sampling.max_tokens = 200;
  a.priority = Priority::batch;
  a.accepted_ns = cfg_.clock();
  // The summary tier (checked at start), else the server's default route: greedy, so it always has one.
  a.sampling.tier = cfg_.summary_tier;
  if (auto why = route_request(cfg_.tiers.get(), a)) {
    std::fprintf(stderr, "troupe serve: session '%s' cannot be summarized: %s\n", task.session_id.c_str(), why->c_str());
    return;
  }
  try {
    a.prompt = encode_chat(*cfg_.tokenizer, cfg_.chat_format, task.messages, true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe serve: session '%s' cannot be summarized: %s\n", task.session_id.c_str(), e.what());
    return;
  }
  if (static_cast<int64_t>(a.prompt.size()) >= cfg_.max_context) {  // the window goes on without it
    std::fprintf(stderr, "troupe serve: session '%s' cannot be summarized: the request has %zu tokens, the context %lld\n",
                 task.session_id.c_str(), a.prompt.size(), static_cast<long long>(cfg_.max_context));
    return;
  }
  summaries_.emplace(a.client_id, SummaryInFlight{std::move(task.session_id), task.through, {}});
  work_.admits.push_back(std::move(a));
}

// A response of a summary's request; false when the id is not a summary's.
bool BatchJobs::on_summary(uint64_t client_id, const std::string& bytes) {
  auto it = summaries_.find(client_id);
  if (it == summaries_.end()) return false;
  const auto* r = messages::check_response(bytes);
  if (!r) return true;
  if (const auto* t = r->body_as_Tokens(); t && t->text()) it->second.text += t->text()->string_view();
  const bool done = r->body_type() == wire::ResponseBody::Done, failed = r->body_type() == wire::ResponseBody::Error;
  if (done)  // even empty: the turns' statements then join the memory (service/session_memory.h)
    work_.summaries.push_back({it->second.session_id, std::move(it->second.text), it->second.through});
  if (done || failed) summaries_.erase(it);
  return true;
}

void BatchJobs::on_item(uint64_t client_id, const std::string& bytes) {
  if (on_summary(client_id, bytes)) return;
  auto it = in_flight_.find(client_id);
  if (it == in_flight_.end()) return;
  InFlight& f = it->second;
  const auto* r = messages::check_response(bytes);
  if (!r) return;
  messages::JobItemFields res;
  res.index = f.index;
  const std::string job = f.job;
  switch (r->body_type()) {
    case wire::ResponseBody::Accepted: f.prompt_tokens = r->body_as_Accepted()->prompt_tokens(); return;
    case wire::ResponseBody::Tokens:
      if (const auto* t = r->body_as_Tokens()->text()) f.text += t->string_view();
      return;
    case wire::ResponseBody::Done: {
      const auto* d = r->body_as_Done();
      res.text = std::move(f.text);
      res.finish_reason = d->finish_reason();
      // A constrained output that ended at end of generation ended where its
      // grammar allows: the matcher admits the end token only there.
      res.validated = f.constrained && res.finish_reason == wire::FinishReason::stop;
      res.prompt_tokens = d->usage() ? d->usage()->prompt_tokens() : f.prompt_tokens;
      res.completion_tokens = d->usage() ? d->usage()->completion_tokens() : 0;
      in_flight_.erase(it);
      if (res.finish_reason == wire::FinishReason::cancelled) break;
      if (!check_answer(job, *d, res)) finish_item(job, std::move(res));
      break;
    }
    case wire::ResponseBody::Error: {
      const auto* e = r->body_as_Error();
      in_flight_.erase(it);
      if (e->code() == wire::ErrorCode::queue_full || e->code() == wire::ErrorCode::shutting_down) {
        pending_.emplace_back(job, res.index);  // not the item's fault: later
        work_.retry_after_ms = 500;
        return;
      }
      res.error = std::string(messages::error_code_name(e->code())) + ": " + (e->message() ? e->message()->str() : "");
      finish_item(job, std::move(res));
      break;
    }
    default: return;
  }
  pump();
}

void BatchJobs::stored(const std::string& job_id, const messages::JobItemFields& result, const std::string& error) {
  --writing_[job_id];
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  persistence::JobRecord& job = it->second;
  if (!error.empty()) {
    // Not stored, so not done: it runs again later (the disk may recover).
    std::fprintf(stderr, "troupe serve: job %s item %d not stored, will retry: %s\n", job_id.c_str(), result.index,
                 error.c_str());
    work_.retry_after_ms = 2000;
    pending_.emplace_back(job_id, result.index);
    return;
  }
  job.results[result.index] = result;
  job.updated_ms = cfg_.unix_clock();
  tokens_this_run_[job_id] += result.completion_tokens;
  publish(wire::JobEventKind::item_finished, job, &result);
  if (job.state == wire::JobState::running && job.results.size() == job.items.size()) {
    job.state = wire::JobState::finished;
    // Results written concurrently may each have carried "running": the
    // last one out writes the final state.
    if (writing_[job_id] == 0) work_.headers.push_back(job);
    publish(wire::JobEventKind::job_finished, job, nullptr);
    retire(job_id);
  }
  pump();
}

void BatchJobs::query(const std::string& peer, uint64_t client_id, JobQuery q, const std::string& job_id,
                      const persistence::Principal& who) {
  if (!loaded_) return early_queries_.push_back({peer, client_id, q, job_id, who});
  if (q == JobQuery::list) {
    std::vector<messages::JobSummaryFields> all;
    for (const auto& [jid, job] : jobs_)
      if (who.may_use(job.owner)) all.push_back(job.summary());
    for (const auto& [jid, summary] : archived_)
      if (who.may_use(summary.owner)) all.push_back(summary);
    return reply(peer, client_id, messages::job_list_response(client_id, all));
  }
  const auto a = archived_.find(job_id);
  const auto live = jobs_.find(job_id);
  const std::string* owner = a != archived_.end() ? &a->second.owner : live != jobs_.end() ? &live->second.owner : nullptr;
  if (owner && !who.may_use(*owner))
    return reply(peer, client_id,
                 messages::error_response(client_id, wire::ErrorCode::forbidden, "job '" + job_id + "' belongs to another client"));
  if (a != archived_.end()) {  // ended: nothing to cancel
    if (q == JobQuery::results) return work_.loads.push_back({job_id, peer, client_id});
    return reply(peer, client_id, messages::job_reply_response(client_id, a->second));
  }
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() && !damage_.empty())
    return reply(peer, client_id,
                 messages::error_response(client_id, wire::ErrorCode::storage_failed,
                                          "job '" + job_id + "' is not among the jobs the store could read (" + damage_ +
                                              "); `troupe store check` tells what is damaged"));
  if (it == jobs_.end())
    return reply(peer, client_id, messages::error_response(client_id, wire::ErrorCode::unknown_job, "no job '" + job_id + "'"));
  const persistence::JobRecord& job = it->second;
  if (q == JobQuery::results) {
    std::vector<messages::JobItemFields> results;
    for (const auto& [i, r] : job.results) results.push_back(r);
    return reply(peer, client_id, messages::job_reply_response(client_id, job.summary(), results));
  }
  if (q == JobQuery::cancel && job.state == wire::JobState::running) {
    persistence::JobRecord next = job;
    next.state = wire::JobState::cancelled;
    next.updated_ms = cfg_.unix_clock();
    work_.cancel_writes.push_back({std::move(next), peer, client_id});
    return;
  }
  reply(peer, client_id, messages::job_reply_response(client_id, job.summary()));
}

void BatchJobs::cancel_stored(const persistence::JobRecord& next, const std::string& peer, uint64_t client_id,
                              const std::string& error) {
  if (!error.empty())
    return reply(peer, client_id,
                 messages::error_response(client_id, wire::ErrorCode::storage_failed, "the job was not cancelled: " + error));
  auto it = jobs_.find(next.id);
  if (it == jobs_.end()) return;
  it->second.state = wire::JobState::cancelled;
  it->second.updated_ms = next.updated_ms;
  for (const auto& [cid, f] : in_flight_)
    if (f.job == next.id) work_.cancels.emplace_back(job_peer(next.id), cid);
  reply(peer, client_id, messages::job_reply_response(client_id, it->second.summary()));
  publish(wire::JobEventKind::job_cancelled, it->second, nullptr);
  retire(next.id);
}

bool BatchJobs::may_subscribe(const persistence::Principal& who, const std::string& topic) const {
  if (who.admin) return true;
  if (auto live = jobs_.find(topic); live != jobs_.end()) return live->second.owner == who.name;
  auto a = archived_.find(topic);
  return a != archived_.end() && a->second.owner == who.name;
}

void BatchJobs::retire(const std::string& job_id) {
  unseeded_.erase(job_id);
  checks_.erase(job_id);
  std::erase_if(retries_, [&](const auto& r) { return r.first.first == job_id; });
  ended_.push_back(job_id);
  // Oldest first; one with results still being written waits for a later call.
  for (size_t tries = ended_.size(); ended_.size() > cfg_.max_cached_jobs && tries > 0; --tries) {
    const std::string id = ended_.front();
    ended_.pop_front();
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    if (writing_[id] > 0) {
      ended_.push_back(id);
      continue;
    }
    archived_[id] = it->second.summary();
    jobs_.erase(it);
    writing_.erase(id);
    started_ns_.erase(id);
    tokens_this_run_.erase(id);
  }
}

int64_t BatchJobs::running_jobs() const {
  int64_t n = 0;
  for (const auto& [id, job] : jobs_) n += job.state == wire::JobState::running;
  return n;
}

void BatchJobs::forget(const std::vector<std::string>& job_ids) {
  for (const auto& id : job_ids) {
    if (!loaded_) swept_before_load_.insert(id);
    archived_.erase(id);
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.state == wire::JobState::running) continue;
    jobs_.erase(it);
    std::erase(ended_, id);
    writing_.erase(id);
    started_ns_.erase(id);
    tokens_this_run_.erase(id);
  }
}

void BatchJobs::loaded(const JobWork::Load& load, const std::optional<persistence::JobRecord>& job,
                       const std::string& error) {
  if (!job)
    return reply(load.peer, load.client_id,
                 messages::error_response(load.client_id, wire::ErrorCode::storage_failed,
                                          "job '" + load.job_id + "' could not be read from the store" +
                                              (error.empty() ? std::string(": it is gone") : ": " + error)));
  std::vector<messages::JobItemFields> results;
  for (const auto& [i, r] : job->results) results.push_back(r);
  reply(load.peer, load.client_id, messages::job_reply_response(load.client_id, job->summary(), results));
}

}  // namespace troupe::service
