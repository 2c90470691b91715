#include "actors/scheduler_actor.h"

#include <caf/actor_system.hpp>

#include <algorithm>
#include <utility>

#include "actors/replies.h"
#include "messages/draft_frames.h"
#include "messages/step_frames.h"

namespace troupe::actors {
namespace {

using SchedulerSelf = scheduler_actor::stateful_pointer<SchedulerActorState>;

void pump(SchedulerSelf self);

void swap_in(SchedulerSelf self, uint64_t seq) {
  self->request(self->state.links.allocator, caf::infinite, swap_fetch_atom::value, seq)
      .then([self](service::SwappedPages& pages) { self->state.scheduler->swap_arrived(std::move(pages)); pump(self); },
            [self, seq](caf::error&) { self->state.scheduler->swap_arrived({seq, {}, {}}); pump(self); });
}

// The router's coordinates of this scheduler: (tier, worker).
std::pair<int32_t, int32_t> coordinates(SchedulerSelf self) {
  return {std::max(self->state.tier, 0), std::max(self->state.replica, 0)};
}

void deliver(SchedulerSelf self, service::Outbound out) {
  const SchedulerLinks& to = self->state.links;
  if (to.router && out.worker != 0) {
    const auto [tier, worker] = coordinates(self);
    self->send(to.router, worker_atom::value, tier, worker, out.worker > 0);
  }
  // Before the Done frames: the router forgets a request before its client can reuse the id.
  if (to.router && !out.ended.empty()) self->send(to.router, ended_atom::value, std::move(out.ended));
  for (auto& a : out.escalations) self->send(to.router, escalate_atom::value, std::move(a));
  for (auto& c : out.moved_cancels) self->send(to.router, escalate_atom::value, std::move(c.peer), c.request_id, c.target);
  // Stored before the Done leaves: the client's next identical request finds it.
  for (auto& c : out.cache_answers) self->send(to.persistence, response_store_atom::value, std::move(c.key), std::move(c.answer));
  for (const auto& r : out.replies) to.replies->send(r.peer, r.client_id, r.bytes);
  for (auto& c : out.commits) self->send(to.persistence, session_commit_atom::value, std::move(c));
  for (auto& id : out.released_sessions) self->send(to.persistence, session_release_atom::value, std::move(id));
  for (auto& s : out.spills) self->send(to.allocator, kv_spill_atom::value, std::move(s));
  for (auto& p : out.swap_outs) self->send(to.allocator, swap_keep_atom::value, std::move(p));
  for (uint64_t seq : out.swap_drops) self->send(to.allocator, swap_drop_atom::value, seq);
  for (auto& s : out.idle_sessions) self->send(to.allocator, session_idle_atom::value, std::move(s));
  for (auto& id : out.active_sessions) self->send(to.allocator, session_active_atom::value, std::move(id));
  for (uint64_t seq : out.swap_fetches) swap_in(self, seq);
}

void pump(SchedulerSelf self) {
  service::Scheduler& s = *self->state.scheduler;
  const SchedulerLinks& to = self->state.links;
  service::SchedulerPlan plan = s.next_step();
  deliver(self, s.take_outbound());
  auto render = [self](const caf::error& e) { return self->system().render(e); };
  if (!plan.draft_forget.empty())  // no answer awaited
    self->request(to.drafter, caf::infinite, propose_atom::value, DraftPlanBytes{std::move(plan.draft_forget)})
        .then([](DraftResultBytes&) {}, [](caf::error&) {});
  if (plan.kind == service::SchedulerPlan::Kind::drafts)
    self->request(to.drafter, caf::infinite, propose_atom::value, DraftPlanBytes{std::move(plan.bytes)})
        .then([self](DraftResultBytes& r) { self->state.scheduler->apply_drafts(r.bytes, ""); pump(self); },
              [self, render](caf::error& e) { self->state.scheduler->apply_drafts("", "unreachable: " + render(e)); pump(self); });
  if (plan.kind == service::SchedulerPlan::Kind::step)
    self->request(to.verifier, caf::infinite, step_atom::value, StepPlanBytes{std::move(plan.bytes)})
        .then([self](StepResultBytes& r) {
                self->state.scheduler->apply(r.bytes, "");
                if (self->state.links.router && self->state.replica >= 0) {
                  const auto [tier, worker] = coordinates(self);
                  self->send(self->state.links.router, load_atom::value, tier, worker, self->state.scheduler->load());
                }
                pump(self);
              },
              [self, render](caf::error& e) { self->state.scheduler->apply("", "verifier unreachable: " + render(e)); pump(self); });
}

// What a drafting round costs, before the first one.
void ask_draft_cost(SchedulerSelf self) {
  self->request(self->state.links.drafter, caf::infinite, propose_atom::value, DraftPlanBytes{messages::draft_plan(0, {}, {})})
      .then([self](DraftResultBytes& result) {
              const auto* r = messages::check_draft_result(result.bytes);
              if (r && r->round_ms() > 0) self->state.scheduler->set_draft_round_ms(r->round_ms());
            },
            [](caf::error&) {});
}

// A worker's heartbeat: an empty StepPlan while no plan is out. Its answer
// tells a lost worker that is back, or a loss while idle.
void heartbeat(SchedulerSelf self) {
  if (!self->state.scheduler->plan_out())
    self->request(self->state.links.verifier, caf::infinite, step_atom::value, StepPlanBytes{self->state.scheduler->probe_plan()})
        .then([self](StepResultBytes& r) { self->state.scheduler->probed(r.bytes); pump(self); },
              [self](caf::error& e) {
                self->state.scheduler->probed(messages::worker_lost_result("unreachable: " + self->system().render(e)));
                pump(self);
              });
  self->delayed_send(self, self->state.links.heartbeat, heartbeat_atom::value);
}

}  // namespace

scheduler_actor::behavior_type scheduler(SchedulerSelf self, service::SchedulerConfig config, SchedulerLinks links) {
  self->state.tier = config.tier;
  self->state.replica = config.replica;
  self->state.scheduler = std::make_unique<service::Scheduler>(std::move(config));
  self->state.links = std::move(links);
  if (self->state.links.drafter) ask_draft_cost(self);
  self->delayed_send(self, std::chrono::seconds(5), tick_atom::value);
  if (self->state.links.heartbeat.count() > 0)
    self->delayed_send(self, self->state.links.heartbeat, heartbeat_atom::value);
  return {
      [self](admit_atom, service::AdmitRequest& a) { self->state.scheduler->admit(std::move(a)); pump(self); },
      [self](cancel_atom, const std::string& peer, uint64_t id, uint64_t target) {
        self->state.scheduler->cancel(peer, id, target);
        pump(self);
      },
      [self](gone_atom, const std::string& peer) { self->state.scheduler->gone(peer); pump(self); },
      [self](heartbeat_atom) { heartbeat(self); },
      [self](drain_atom, bool stop) {
        self->state.scheduler->drain();
        if (stop) self->state.scheduler->stop_all();
        pump(self);
        return static_cast<int32_t>(self->state.scheduler->live_requests());
      },
      [self](tick_atom) {
        self->request(self->state.links.allocator, caf::infinite, expire_atom::value)
            .then([self](std::vector<service::SessionPages>& idle) {
                    for (const auto& s : idle) self->state.scheduler->drop_idle_session(s.session_id, s.tokens);
                  },
                  [](caf::error&) {});
        self->delayed_send(self, std::chrono::seconds(5), tick_atom::value);
      },
      [self](stats_atom, const std::string& peer, uint64_t id) {
        messages::StatsFields f = self->state.scheduler->stats();
        auto replies = self->state.links.replies;
        self->request(self->state.links.allocator, caf::infinite, stats_atom::value)
            .then([=](uint64_t spilled) mutable {
                    f.pages_spilled = spilled;
                    replies->send(peer, id, messages::stats_response(id, f));
                  },
                  [=](caf::error&) { replies->send(peer, id, messages::stats_response(id, f)); });
      },
  };
}

}  // namespace troupe::actors
