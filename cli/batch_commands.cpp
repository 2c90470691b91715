// troupe batch submit | status | watch | results | cancel | list: durable
// batch jobs on a running server. `watch` follows the job's events (the
// server's PUB socket) with a progress bar and polls its status too, so a
// lost event never leaves it waiting.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cli/commands.h"
#include "cli/sampling_options.h"
#include "cli/server_request.h"
#include "messages/job_frames.h"
#include "messages/zmq_sockets.h"

#include <zmq_addon.hpp>

namespace troupe::cli {
namespace {

struct BatchArgs {
  std::string connect = "tcp://127.0.0.1:7700";
  double connect_timeout_s = 5;
  std::string events;  // default: derived from connect
  std::string job;
  std::vector<std::string> items, files;
  std::string dir;
  std::string item_template;
  std::string priority = "batch";
  std::string out;
  SamplingOptions sampling;
  int timeout_s = 30;
  bool watch = false;
  std::string check_regex, check_contains, check_schema;  // the job's check (one of them)
};

std::string read_item_file(const std::filesystem::path& p);

// The job's check from --check-regex, --check-contains or --check-schema FILE.
messages::JobCheckFields job_check(const BatchArgs& a) {
  if (!a.check_regex.empty()) return {wire::JobCheckKind::regex, a.check_regex};
  if (!a.check_contains.empty()) return {wire::JobCheckKind::contains, a.check_contains};
  if (!a.check_schema.empty()) return {wire::JobCheckKind::json_schema, read_item_file(a.check_schema)};
  return {};
}

std::string read_item_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

const char* state_name(wire::JobState s) { return wire::EnumNameJobState(s); }

void print_summary(const messages::JobSummaryFields& j) {
  std::printf("job %s: %s, %d of %d items, %lld tokens, submitted %s\n", j.job_id.c_str(), state_name(j.state),
              j.finished_items, j.items, static_cast<long long>(j.completion_tokens), local_time(j.created_ms).c_str());
}

messages::JobSummaryFields status(messages::ClientConnection& conn, const std::string& job, int timeout_s) {
  const uint64_t id = conn.next_id();
  const Reply r = ask(conn, messages::job_status_request(id, job), id, wire::ResponseBody::JobReply, std::chrono::seconds(timeout_s));
  return messages::read_job_summary(r.response->body_as_JobReply()->job());
}

std::string format_duration(double s) {
  char buf[32];
  if (s < 0 || s > 1e7) return "?";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, static_cast<int>(s) % 3600 / 60);
  return buf;
}

// One line, redrawn: [#####.....] 3/10 items  41.2 tok/s  ETA 1m20s
void draw(const messages::JobSummaryFields& j, double tokens_per_second, double eta_s, bool tty) {
  constexpr int kWidth = 30;
  const int filled = j.items ? kWidth * j.finished_items / j.items : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "%s[%s] %d/%d items  %.1f tok/s  ETA %s%s", tty ? "\r" : "", bar.c_str(), j.finished_items, j.items,
               tokens_per_second, eta_s >= 0 ? format_duration(eta_s).c_str() : "?", tty ? "   " : "\n");
  std::fflush(stderr);
}

int run_watch(const BatchArgs& a, const std::string& job) {
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  zmq::context_t ctx;
  const std::string endpoint = a.events.empty() ? messages::default_events_endpoint(a.connect) : a.events;
  zmq::socket_t sub = messages::connect_subscriber(ctx, endpoint, job, {}, client_curve_keys());
  const bool tty = isatty(STDERR_FILENO);
  messages::JobSummaryFields j = status(conn, job, a.timeout_s);
  const auto start = std::chrono::steady_clock::now();
  const int32_t done_at_start = j.finished_items;
  double tps = 0;
  auto last_poll = start;
  while (j.state == wire::JobState::running) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int32_t done_here = j.finished_items - done_at_start;
    const double eta = done_here > 0 ? elapsed / done_here * (j.items - j.finished_items) : -1;
    draw(j, tps, eta, tty);
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(1000));
    if (item.revents & ZMQ_POLLIN) {
      std::vector<zmq::message_t> frames;
      (void)zmq::recv_multipart(sub, std::back_inserter(frames));
      if (frames.size() == 2) {
        // A copy: a frame's bytes need not be aligned (CURVE decrypts into
        // an offset buffer), and FlatBuffers reads them in place.
        const std::string event = frames[1].to_string();
        if (const auto* e = messages::check_job_event(event)) {
          const auto s = messages::read_job_summary(e->job());
          if (s.job_id == job) {
            j = s;
            tps = e->tokens_per_second();
          }
        }
      }
    }
    // Events can be missed (a subscriber joins late, or the server restarts): poll too.
    if (std::chrono::steady_clock::now() - last_poll > std::chrono::seconds(1)) {
      last_poll = std::chrono::steady_clock::now();
      try {
        j = status(conn, job, a.timeout_s);
      } catch (const ServerError& e) {
        // The job is gone (retention) or not ours: waiting would never end.
        if (e.code() == wire::ErrorCode::unknown_job || e.code() == wire::ErrorCode::forbidden) throw;
        std::fprintf(stderr, "%s(waiting for the server: %s)\n", tty ? "\n" : "", e.what());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s(waiting for the server: %s)\n", tty ? "\n" : "", e.what());
      }
    }
  }
  draw(j, tps, 0, tty);
  if (tty) std::fprintf(stderr, "\n");
  print_summary(j);
  return j.state == wire::JobState::finished ? 0 : 2;
}

int run_submit(const BatchArgs& a) {
  a.sampling.params.validate();
  std::vector<std::string> items = a.items;
  for (const auto& f : a.files) items.push_back(read_item_file(f));
  if (!a.dir.empty()) {
    std::vector<std::filesystem::path> paths;
    for (const auto& e : std::filesystem::directory_iterator(a.dir))
      if (e.is_regular_file()) paths.push_back(e.path());
    std::sort(paths.begin(), paths.end());
    for (const auto& p : paths) {
      items.push_back(read_item_file(p));
      std::fprintf(stderr, "item %zu: %s\n", items.size() - 1, p.filename().c_str());
    }
  }
  if (items.empty()) throw std::invalid_argument("no items: give --item, --file or --dir");
  wire::Priority priority = wire::Priority::batch;
  if (a.priority == "interactive") priority = wire::Priority::interactive;
  else if (a.priority == "chat") priority = wire::Priority::chat;
  else if (a.priority != "batch") throw std::invalid_argument("unknown priority '" + a.priority + "'");
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  const uint64_t id = conn.next_id();
  const Reply r = ask(conn,
                      messages::submit_job_request(id, items, a.item_template, wire_sampling(a.sampling), priority,
                                                   job_check(a)),
                      id, wire::ResponseBody::JobAccepted, std::chrono::seconds(a.timeout_s));
  const auto j = messages::read_job_summary(r.response->body_as_JobAccepted()->job());
  std::printf("%s\n", j.job_id.c_str());
  std::fflush(stdout);
  return a.watch ? run_watch(a, j.job_id) : 0;
}

int run_status(const BatchArgs& a) {
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  print_summary(status(conn, a.job, a.timeout_s));
  return 0;
}

int run_results(const BatchArgs& a) {
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  const uint64_t id = conn.next_id();
  const Reply r = ask(conn, messages::job_results_request(id, a.job), id, wire::ResponseBody::JobReply,
                      std::chrono::seconds(a.timeout_s));
  const auto* reply = r.response->body_as_JobReply();
  const auto j = messages::read_job_summary(reply->job());
  if (!a.out.empty()) std::filesystem::create_directories(a.out);
  if (reply->results())
    for (const auto* item : *reply->results()) {
      const auto f = messages::read_job_item(item);
      if (!a.out.empty()) {
        char name[32];
        std::snprintf(name, sizeof name, "item-%04d.txt", f.index);
        std::ofstream(std::filesystem::path(a.out) / name, std::ios::binary) << (f.error.empty() ? f.text : "ERROR: " + f.error);
        continue;
      }
      const std::string check = f.check == wire::CheckOutcome::not_checked
                                    ? ""
                                    : std::string(", check ") + wire::EnumNameCheckOutcome(f.check) +
                                          (f.retried ? ", answered again " + std::to_string(f.retried) + "x" : "");
      std::printf("=== item %d (%s, %d tokens%s%s) ===\n%s\n", f.index,
                  f.error.empty() ? wire::EnumNameFinishReason(f.finish_reason) : "error", f.completion_tokens,
                  f.validated ? ", validated" : "", check.c_str(), f.error.empty() ? f.text.c_str() : f.error.c_str());
    }
  std::fprintf(stderr, "job %s: %s, %d of %d items finished%s\n", j.job_id.c_str(), state_name(j.state), j.finished_items,
               j.items, a.out.empty() ? "" : (", written to " + a.out).c_str());
  return 0;
}

int run_cancel(const BatchArgs& a) {
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  const uint64_t id = conn.next_id();
  const Reply r = ask(conn, messages::cancel_job_request(id, a.job), id, wire::ResponseBody::JobReply,
                      std::chrono::seconds(a.timeout_s));
  print_summary(messages::read_job_summary(r.response->body_as_JobReply()->job()));
  return 0;
}

int run_job_list(const BatchArgs& a) {
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  const uint64_t id = conn.next_id();
  const Reply r = ask(conn, messages::list_jobs_request(id), id, wire::ResponseBody::JobList, std::chrono::seconds(a.timeout_s));
  const auto* jobs = r.response->body_as_JobList()->jobs();
  if (!jobs || jobs->size() == 0) std::fprintf(stderr, "no jobs\n");
  else
    for (const auto* j : *jobs) print_summary(messages::read_job_summary(j));
  return 0;
}

}  // namespace

Run add_batch(CLI::App& app) {
  auto a = std::make_shared<BatchArgs>();
  CLI::App* cmd = app.add_subcommand("batch", "Durable batch jobs on a running server");
  cmd->require_subcommand(1);
  auto common = [a](CLI::App* sub) {
    add_connect_options(sub, a->connect, a->connect_timeout_s);
    sub->add_option("--timeout", a->timeout_s, "Seconds to wait for an answer")->capture_default_str();
  };
  auto events = [a](CLI::App* sub) {
    sub->add_option("--events", a->events, "The server's job event endpoint (default: --connect's port + 1)");
  };
  CLI::App* submit = cmd->add_subcommand("submit", "Submit a job: one generation per item; prints the job id");
  submit->add_option("--item", a->items, "An item's text (repeatable)");
  submit->add_option("--file", a->files, "A file whose text is an item (repeatable)");
  submit->add_option("--dir", a->dir, "Every file in this folder is an item, in name order");
  submit->add_option("--template", a->item_template, "The user message for each item; {item} stands for its text");
  submit->add_option("--priority", a->priority, "batch, chat or interactive")->capture_default_str();
  submit->add_flag("--watch", a->watch, "Then watch the job until it ends");
  auto* regex = submit->add_option("--check-regex", a->check_regex,
                                   "Check each answer: the whole of it matches this regex; one that fails from a "
                                   "smaller tier is answered again by the next (docs/CASCADE.md)");
  auto* contains = submit->add_option("--check-contains", a->check_contains, "Check each answer: it holds this text");
  auto* schema = submit->add_option("--check-schema", a->check_schema,
                                    "Check each answer: it is one instance of the JSON Schema in this file");
  regex->excludes(contains)->excludes(schema);
  contains->excludes(schema);
  add_sampling_flags(*submit, a->sampling);
  add_tier_flags(*submit, a->sampling);
  common(submit);
  events(submit);
  CLI::App* stat = cmd->add_subcommand("status", "A job's state and progress");
  CLI::App* watch = cmd->add_subcommand("watch", "Follow a job with a progress bar until it ends");
  CLI::App* results = cmd->add_subcommand("results", "Every finished item's text");
  results->add_option("--out", a->out, "Write item-NNNN.txt files into this folder instead");
  CLI::App* cancel = cmd->add_subcommand("cancel", "Cancel a job (finished items are kept)");
  for (CLI::App* sub : {stat, watch, results, cancel}) {
    sub->add_option("job", a->job, "Job id")->required();
    common(sub);
  }
  events(watch);
  CLI::App* list = cmd->add_subcommand("list", "Every job the server knows");
  common(list);
  return [a, submit, stat, watch, results, cancel] {
    if (submit->parsed()) return run_submit(*a);
    if (stat->parsed()) return run_status(*a);
    if (watch->parsed()) return run_watch(*a, a->job);
    if (results->parsed()) return run_results(*a);
    if (cancel->parsed()) return run_cancel(*a);
    return run_job_list(*a);
  };
}

}  // namespace troupe::cli
