// troupe sessions list | show NAME | delete NAME: the chat sessions a
// running server keeps (`troupe chat --session NAME` makes and resumes them).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/server_request.h"
#include "messages/session_frames.h"

namespace troupe::cli {
namespace {

struct SessionArgs {
  std::string connect = "tcp://127.0.0.1:7700";
  double connect_timeout_s = 5;
  std::string name;
  int timeout_s = 30;
  bool json = false;
};

int run_session_list(const SessionArgs& a) {
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  const uint64_t id = conn.next_id();
  const Reply r = ask(conn, messages::list_sessions_request(id), id, wire::ResponseBody::SessionList,
                      std::chrono::seconds(a.timeout_s));
  const auto* list = r.response->body_as_SessionList()->sessions();
  if (!list || list->size() == 0) {
    std::fprintf(stderr, "no sessions\n");
    return 0;
  }
  std::printf("%-32s %6s %8s  %-16s  %s\n", "SESSION", "TURNS", "TOKENS", "UPDATED", "MODEL");
  for (const auto* s : *list) {
    const auto f = messages::read_session_summary(s);
    std::printf("%-32s %6d %8d  %-16s  %s\n", f.session_id.c_str(), f.turns, f.tokens, local_time(f.updated_ms).c_str(),
                f.model.c_str());
  }
  return 0;
}

int run_show(const SessionArgs& a) {
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  const uint64_t id = conn.next_id();
  const Reply r = ask(conn, messages::show_session_request(id, a.name), id, wire::ResponseBody::Session,
                      std::chrono::seconds(a.timeout_s));
  const auto* s = r.response->body_as_Session();
  const auto f = messages::read_session_summary(s->summary());
  std::printf("session %s: %d turns, %d tokens, started %s, updated %s, model %s\n", f.session_id.c_str(), f.turns,
              f.tokens, local_time(f.created_ms).c_str(), local_time(f.updated_ms).c_str(), f.model.c_str());
  if (s->context_summary()) std::printf("\nsummary of the summarized turns:\n%s\n", s->context_summary()->c_str());
  if (!s->messages()) return 0;
  // Each turn with where it stands in the context the next turn sees.
  const auto* sizes = s->turn_messages();
  const auto* states = s->turn_states();
  uint32_t turn = 0, left = sizes && sizes->size() > 0 ? static_cast<uint32_t>(sizes->Get(0)) : 0;
  for (uint32_t i = 0; i < s->messages()->size(); ++i) {
    if (sizes && turn < sizes->size() && left == static_cast<uint32_t>(sizes->Get(turn))) {
      const auto state = states && turn < states->size() ? states->Get(turn) : wire::TurnState::window;
      std::printf("\n--- turn %u (%s) ---\n", turn + 1,
                  state == wire::TurnState::window ? "in the window" : wire::EnumNameTurnState(state));
    }
    const auto* m = s->messages()->Get(i);
    std::printf("[%s%s]\n%s\n", m->role() ? m->role()->c_str() : "", m->pinned() ? ", pinned" : "",
                m->content() ? m->content()->c_str() : "");
    if (sizes && turn < sizes->size() && --left == 0 && ++turn < sizes->size()) left = static_cast<uint32_t>(sizes->Get(turn));
  }
  return 0;
}

int run_delete(const SessionArgs& a) {
  auto conn = connect_to_server(a.connect, a.connect_timeout_s);
  const uint64_t id = conn.next_id();
  const Reply r = ask(conn, messages::delete_session_request(id, a.name), id, wire::ResponseBody::Ack,
                      std::chrono::seconds(a.timeout_s));
  const auto* m = r.response->body_as_Ack()->message();
  std::printf("%s\n", m ? m->c_str() : "deleted");
  return 0;
}

}  // namespace

Run add_sessions(CLI::App& app) {
  auto a = std::make_shared<SessionArgs>();
  CLI::App* cmd = app.add_subcommand("sessions", "List, show or delete the chat sessions a running server keeps");
  cmd->require_subcommand(1);
  auto common = [&](CLI::App* sub) {
    add_connect_options(sub, a->connect, a->connect_timeout_s);
    sub->add_option("--timeout", a->timeout_s, "Seconds to wait")->capture_default_str();
  };
  CLI::App* list = cmd->add_subcommand("list", "Every stored session");
  common(list);
  CLI::App* show = cmd->add_subcommand("show", "A session's messages");
  show->add_option("name", a->name, "Session name")->required();
  common(show);
  CLI::App* del = cmd->add_subcommand("delete", "Delete a session and everything stored for it");
  del->add_option("name", a->name, "Session name")->required();
  common(del);
  return [a, list, show] {
    if (list->parsed()) return run_session_list(*a);
    if (show->parsed()) return run_show(*a);
    return run_delete(*a);
  };
}

}  // namespace troupe::cli
