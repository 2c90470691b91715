// troupe complete | chat | stats: clients of a running `troupe serve`.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <stdexcept>

#include "cli/commands.h"
#include "cli/sampling_options.h"
#include "cli/server_request.h"
#include "messages/client_connection.h"
#include "messages/client_validation.h"
#include "messages/session_frames.h"

namespace troupe::cli {
namespace {

struct ClientArgs {
  std::string connect = "tcp://127.0.0.1:7700";
  double connect_timeout_s = 5;
  std::string prompt, system, session;
  bool pin = false;  // chat: the user's messages are pinned
  std::string priority = "interactive";
  std::string speculation = "default";
  int max_draft = 0;
  std::string draft_model;
  std::string context_policy = "default";
  bool response_cache = false;
  SamplingOptions sampling;
  bool special = false;
  bool quiet = false;
  int timeout_s = 600;
};


wire::Speculation speculation(const std::string& s) {
  if (s == "off") return wire::Speculation::off;
  if (s == "ngram") return wire::Speculation::ngram;
  if (s == "draft") return wire::Speculation::draft;
  if (s == "auto") return wire::Speculation::auto_;
  if (s == "suffix") return wire::Speculation::suffix;
  return wire::Speculation::server_default;
}

wire::ContextPolicy context_policy(const std::string& p) {
  if (p == "refuse") return wire::ContextPolicy::refuse;
  if (p == "window") return wire::ContextPolicy::window;
  if (p == "summarize") return wire::ContextPolicy::summarize;
  return wire::ContextPolicy::server_default;
}

wire::Priority priority(const std::string& p) {
  if (p == "interactive") return wire::Priority::interactive;
  if (p == "chat") return wire::Priority::chat;
  if (p == "batch") return wire::Priority::batch;
  throw std::invalid_argument("unknown priority '" + p + "' (interactive, chat or batch)");
}

const char* reason_name(wire::FinishReason r) { return wire::EnumNameFinishReason(r); }

void report(const messages::StreamOutcome& out, bool quiet) {
  if (!out.done) {
    if (out.error == wire::ErrorCode::none) throw std::runtime_error("no answer from the server: " + out.message);
    throw std::runtime_error(std::string("server: ") + messages::error_code_name(out.error) + ": " + out.message);
  }
  if (quiet) return;
  const auto& u = out.usage;
  std::fprintf(stderr, "[%d prompt tokens (%d cached), %d generated; queue %.1f ms, first token %.1f ms, %.1f ms/token; finish: %s]\n",
               u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens, u.queue_ms, u.ttft_ms, u.per_token_ms,
               reason_name(u.reason));
  if (u.response_cache != wire::ResponseCacheOutcome::not_asked)
    std::fprintf(stderr, "[response cache: %s]\n", wire::EnumNameResponseCacheOutcome(u.response_cache));
  if (!u.tiers.empty()) {
    std::string tiers;
    for (const auto& [tier, tokens] : u.tiers) tiers += (tiers.empty() ? "" : " -> ") + tier + " " + std::to_string(tokens);
    std::fprintf(stderr, "[tiers: %s]\n", tiers.c_str());
  }
  if (u.speculated)
    std::fprintf(stderr, "[speculation %s: %d drafted, %d accepted in %d windows]\n", u.spec_source.c_str(), u.spec_drafted,
                 u.spec_accepted, u.spec_windows);
}

void add_common(CLI::App* cmd, ClientArgs& a) {
  add_connect_options(cmd, a.connect, a.connect_timeout_s);
  cmd->add_option("--priority", a.priority, "interactive, chat or batch")->capture_default_str();
  cmd->add_option("--timeout", a.timeout_s, "Seconds to wait for the whole answer")->capture_default_str();
  cmd->add_flag("--quiet,-q", a.quiet, "No statistics on stderr");
  cmd->add_option("--speculation", a.speculation, "default (the server's), off, ngram, suffix, auto or draft")
      ->check(CLI::IsMember({"default", "off", "ngram", "suffix", "auto", "draft"}))
      ->capture_default_str();
  cmd->add_option("--max-draft", a.max_draft, "Most drafted tokens per step (0: the server's)")->check(CLI::Range(0, 8));
  cmd->add_option("--draft-model", a.draft_model,
                  "The draft model expected on the server (an error names the one it has when they differ)");
  cmd->add_option("--context-policy", a.context_policy,
                  "When the conversation outgrows the context: window (drop old turns, keep the system prompt), "
                  "summarize (a summary stands for them), refuse; default: window for sessions, refuse otherwise")
      ->check(CLI::IsMember({"default", "window", "summarize", "refuse"}))
      ->capture_default_str();
  cmd->add_flag("--cache", a.response_cache,
                 "Answer from the server's response cache when it holds this very request, else store the answer "
                 "(greedy or seeded requests; not session turns)");
  add_sampling_flags(*cmd, a.sampling);
  add_tier_flags(*cmd, a.sampling);
}

auto print_text = [](std::string_view t) {
  std::fwrite(t.data(), 1, t.size(), stdout);
  std::fflush(stdout);
};

int run_complete(const ClientArgs& a) {
  a.sampling.params.validate();
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  const uint64_t id = conn.next_id();
  messages::StreamOutcome out;
  if (!a.system.empty() || a.prompt.empty()) throw std::invalid_argument("--prompt is required");
  out = conn.stream(messages::generate_request(id, a.prompt, wire_sampling(a.sampling), priority(a.priority), a.special, false,
                                              false, 1, speculation(a.speculation), a.max_draft, a.draft_model,
                                              context_policy(a.context_policy), a.response_cache),
                    id,
                    print_text, std::chrono::seconds(a.timeout_s));
  std::printf("\n");
  std::fflush(stdout);
  report(out, a.quiet);
  return 0;
}

// How many turns the server holds for `session` (0: none yet).
int32_t stored_turns(messages::ClientConnection& conn, const std::string& session, std::chrono::seconds timeout) {
  const uint64_t id = conn.next_id();
  try {
    const Reply r = ask(conn, messages::show_session_request(id, session), id, wire::ResponseBody::Session, timeout);
    const auto* summary = r.response->body_as_Session()->summary();
    return summary ? summary->turns() : 0;
  } catch (const ServerError& e) {
    if (e.code() == wire::ErrorCode::unknown_session) return 0;
    throw;
  }
}

int run_chat(const ClientArgs& a) {
  a.sampling.params.validate();
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  // Without a session the client keeps the conversation; with one, the
  // server does, and each turn sends only its new messages.
  messages::ChatTurnFields t;
  t.session_id = a.session;
  t.sampling = wire_sampling(a.sampling);
  t.priority = priority(a.priority);
  t.speculation = speculation(a.speculation);
  t.max_draft = a.max_draft;
  t.draft_model = a.draft_model;
  t.policy = context_policy(a.context_policy);
  t.response_cache = a.response_cache;
  const bool resumed = !a.session.empty() && stored_turns(conn, a.session, std::chrono::seconds(a.timeout_s)) > 0;
  if (!a.system.empty() && !resumed) t.messages.emplace_back("system", a.system);
  if (resumed && !a.quiet) std::fprintf(stderr, "[resuming session '%s']\n", a.session.c_str());
  const bool tty = isatty(STDIN_FILENO);
  auto turn = [&](const std::string& user, bool pinned) {
    t.messages.emplace_back("user", user);
    t.messages.back().pinned = pinned;
    const uint64_t id = conn.next_id();
    const auto out = conn.stream(messages::chat_request(id, t), id, print_text, std::chrono::seconds(a.timeout_s));
    std::printf("\n");
    std::fflush(stdout);
    report(out, a.quiet);
    if (a.session.empty()) t.messages.emplace_back("assistant", out.text);
    else t.messages.clear();
  };
  if (!a.prompt.empty()) {
    turn(a.prompt, a.pin);
    return 0;
  }
  constexpr std::string_view kPin = "/pin ";  // a line the session keeps verbatim (docs/PROTOCOL.md, "Session memory")
  for (std::string line;;) {
    if (tty) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    const bool pinned = line.starts_with(kPin);
    if (pinned) line.erase(0, kPin.size());
    if (!line.empty()) turn(line, pinned || a.pin);
  }
  return 0;
}

int run_stats(const ClientArgs& a) {
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  const uint64_t id = conn.next_id();
  conn.send(messages::stats_request(id));
  auto frame = conn.receive(std::chrono::seconds(a.timeout_s));
  if (!frame) throw std::runtime_error("no answer from " + a.connect);
  const auto* r = messages::check_response(*frame);
  const auto* s = r->body_as_StatsReply();
  if (!s) throw std::runtime_error("unexpected answer to Stats");
  std::printf("{\"model\": \"%s\", \"running\": %d, \"waiting\": %d, \"pages_total\": %d, \"pages_used\": %d, "
              "\"pages_cached\": %d, \"pages_free\": %d, \"live_token_fraction\": %.3f, \"steps\": %llu, "
              "\"tokens_generated\": %llu, \"engine_ms\": %.1f, \"busy_ms\": %.1f, \"pages_spilled\": %llu, "
              "\"pages_restored\": %llu, \"pages_swapped_out\": %llu, \"pages_swapped_in\": %llu, "
              "\"tokens_shifted\": %llu, \"local_pages_total\": %d, \"local_pages_used\": %d, \"kv_evictions\": %llu, "
              "\"kv_positions_evicted\": %llu}\n",
              s->model() ? s->model()->c_str() : "", s->running(), s->waiting(), s->pages_total(), s->pages_used(),
              s->pages_cached(), s->pages_free(), s->live_token_fraction(), static_cast<unsigned long long>(s->steps()),
              static_cast<unsigned long long>(s->tokens_generated()), s->engine_ms(), s->busy_ms(),
              static_cast<unsigned long long>(s->pages_spilled()), static_cast<unsigned long long>(s->pages_restored()),
              static_cast<unsigned long long>(s->pages_swapped_out()), static_cast<unsigned long long>(s->pages_swapped_in()),
              static_cast<unsigned long long>(s->tokens_shifted()), s->local_pages_total(), s->local_pages_used(),
              static_cast<unsigned long long>(s->kv_evictions()), static_cast<unsigned long long>(s->kv_positions_evicted()));
  if (s->store_degraded())  // the store refuses writes: say why, on a line of its own
    std::printf("%s\n", nlohmann::json{{"store_degraded", s->store_degraded()->str()}}
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
  if (s->expert_tokens() && s->expert_tokens()->size() > 0) {  // a mixture of experts: its load
    std::printf("{\"expert_tokens\": [");
    for (uint32_t i = 0; i < s->expert_tokens()->size(); ++i)
      std::printf("%s%llu", i ? ", " : "", static_cast<unsigned long long>(s->expert_tokens()->Get(i)));
    std::printf("]}\n");
  }
  if (s->tiers())
    for (const auto* t : *s->tiers())
      std::printf("{\"tier\": \"%s\", \"requests\": %llu, \"escalated_in\": %llu, \"escalations\": %llu, \"tokens\": %llu, "
                  "\"forward_tokens\": %llu, \"steps\": %llu, \"drafted\": %llu, \"accepted\": %llu, \"running\": %d, "
                  "\"waiting\": %d, \"pages_used\": %d, \"pages_total\": %d, \"check_failures\": %llu}\n",
                  t->name() ? t->name()->c_str() : "", static_cast<unsigned long long>(t->requests()),
                  static_cast<unsigned long long>(t->escalated_in()), static_cast<unsigned long long>(t->escalations()),
                  static_cast<unsigned long long>(t->tokens()), static_cast<unsigned long long>(t->forward_tokens()),
                  static_cast<unsigned long long>(t->steps()), static_cast<unsigned long long>(t->drafted()),
                  static_cast<unsigned long long>(t->accepted()), t->running(), t->waiting(), t->pages_used(),
                  t->pages_total(), static_cast<unsigned long long>(t->check_failures()));
  if (s->workers())
    for (const auto* w : *s->workers())
      std::printf("{\"worker\": \"%s\", \"tier\": \"%s\", \"up\": %s, \"requests\": %llu, \"moved_in\": %llu, "
                  "\"moved_out\": %llu, \"lost\": %llu, \"tokens\": %llu, \"forward_tokens\": %llu, \"steps\": %llu, "
                  "\"running\": %d, \"waiting\": %d, \"pages_used\": %d, \"pages_total\": %d, \"step_ms\": %.1f}\n",
                  w->endpoint() ? w->endpoint()->c_str() : "", w->tier() ? w->tier()->c_str() : "",
                  w->up() ? "true" : "false", static_cast<unsigned long long>(w->requests()),
                  static_cast<unsigned long long>(w->moved_in()), static_cast<unsigned long long>(w->moved_out()),
                  static_cast<unsigned long long>(w->lost()), static_cast<unsigned long long>(w->tokens()),
                  static_cast<unsigned long long>(w->forward_tokens()), static_cast<unsigned long long>(w->steps()),
                  w->running(), w->waiting(), w->pages_used(), w->pages_total(), w->step_ms());
  if (s->speculation())  // a line per draft source
    for (const auto* x : *s->speculation())
      std::printf("%s\n", nlohmann::json{{"speculation", x->source() ? x->source()->str() : ""},
                                         {"drafted", x->drafted()},
                                         {"accepted", x->accepted()},
                                         {"windows", x->windows()},
                                         {"accepted_per_window", x->windows() ? static_cast<double>(x->accepted()) / x->windows() : 0.0}}
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                              .c_str());
  if (s->escalation_classes())  // escalate's budget rule: a line per workload class
    for (const auto* c : *s->escalation_classes())
      std::printf("%s\n", nlohmann::json{{"escalation_class", c->name() ? c->name()->str() : ""},
                                         {"judged", c->judged()},
                                         {"share", c->share()},
                                         {"threshold", c->threshold()}}
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                              .c_str());
  if (s->suffix_tree_bytes() > 0)
    std::printf("{\"suffix_tree_bytes\": %llu, \"suffix_tree_tokens\": %llu, \"suffix_trees\": %d}\n",
                static_cast<unsigned long long>(s->suffix_tree_bytes()),
                static_cast<unsigned long long>(s->suffix_tree_tokens()), s->suffix_trees());
  return 0;
}

}  // namespace

Run add_complete(CLI::App& app) {
  auto a = std::make_shared<ClientArgs>();
  CLI::App* cmd = app.add_subcommand("complete", "Continue a prompt on a running server, streaming");
  cmd->add_option("--prompt,-p", a->prompt, "Prompt text")->required();
  cmd->add_flag("--special", a->special, "Parse special tokens in the prompt");
  add_common(cmd, *a);
  return [a] { return run_complete(*a); };
}

Run add_chat(CLI::App& app) {
  auto a = std::make_shared<ClientArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a running server (lines from stdin, or one --prompt)");
  cmd->add_option("--prompt,-p", a->prompt, "One user message, then exit");
  cmd->add_option("--system", a->system, "System message (with --session: only when the session starts)");
  cmd->add_option("--session", a->session,
                  "Keep the conversation on the server under this name: it resumes across runs and restarts");
  cmd->add_flag("--pin", a->pin,
                "Pin the user's messages: the session keeps them verbatim in every later prompt, as its system "
                "message (a line starting with /pin pins that line alone)");
  add_common(cmd, *a);
  a->priority = "chat";
  return [a] { return run_chat(*a); };
}

Run add_stats(CLI::App& app) {
  auto a = std::make_shared<ClientArgs>();
  CLI::App* cmd = app.add_subcommand("stats", "A running server's queue and KV-page statistics (JSON)");
  add_connect_options(cmd, a->connect, a->connect_timeout_s);
  cmd->add_option("--timeout", a->timeout_s, "Seconds to wait")->capture_default_str();
  return [a] { return run_stats(*a); };
}

}  // namespace troupe::cli
