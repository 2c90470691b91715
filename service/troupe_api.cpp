#include "service/troupe_api.h"

#include <nlohmann/json.hpp>

#include "messages/client_validation.h"
#include "messages/job_frames.h"

namespace troupe::service {
namespace {

using sorted_json = nlohmann::json;  // keys in sorted order, as clients have always seen them

const char* state_name(wire::TurnState s) {
  switch (s) {
    case wire::TurnState::summarized: return "summarized";
    case wire::TurnState::archived: return "archived";
    default: return "window";
  }
}

sorted_json session(const wire::SessionSummary* s) {
  if (!s) return sorted_json::object();
  return {{"id", messages::text_of(s->session_id())}, {"object", "troupe.session"}, {"turns", s->turns()}, {"tokens", s->tokens()},
          {"created", s->created_ms() / 1000}, {"updated", s->updated_ms() / 1000}, {"model", messages::text_of(s->model())},
          {"owner", messages::text_of(s->owner())}};
}

sorted_json job(const wire::JobSummary* j) {
  if (!j) return sorted_json::object();
  const char* state = j->state() == wire::JobState::finished ? "finished" : j->state() == wire::JobState::cancelled ? "cancelled" : "running";
  return {{"id", messages::text_of(j->job_id())}, {"object", "troupe.job"}, {"state", state}, {"items", j->items()},
          {"finished_items", j->finished_items()}, {"completion_tokens", j->completion_tokens()},
          {"created", j->created_ms() / 1000}, {"updated", j->updated_ms() / 1000}, {"owner", messages::text_of(j->owner())}};
}

}  // namespace

std::variant<messages::Bytes, ApiError> parse_job_submission(const std::string& text, int32_t max_tokens) {
  sorted_json body = sorted_json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return ApiError{400, "the body must be a JSON object", "", "malformed"};
  auto items = body.find("items");
  if (items == body.end() || !items->is_array() || items->empty())
    return ApiError{400, "items must be a non-empty array of strings", "items", "invalid_field"};
  std::vector<std::string> list;
  for (const auto& i : *items) {
    if (!i.is_string()) return ApiError{400, "items must be strings", "items", "invalid_field"};
    list.push_back(i.get<std::string>());
  }
  std::string item_template;
  if (auto t = body.find("template"); t != body.end() && !t->is_null()) {
    if (!t->is_string()) return ApiError{400, "template must be a string", "template", "invalid_field"};
    item_template = t->get<std::string>();
  }
  messages::JobCheckFields check;
  if (auto c = body.find("check"); c != body.end() && !c->is_null()) {
    const auto kinds = {std::pair{"regex", wire::JobCheckKind::regex}, std::pair{"contains", wire::JobCheckKind::contains},
                        std::pair{"json_schema", wire::JobCheckKind::json_schema}};
    for (const auto& [name, kind] : kinds)
      if (c->is_object() && c->size() == 1 && c->contains(name)) {
        const auto& v = (*c)[name];
        if (kind == wire::JobCheckKind::json_schema ? !v.is_object() && !v.is_boolean() : !v.is_string()) break;
        check = {kind, v.is_string() ? v.get<std::string>() : v.dump()};
      }
    if (check.kind == wire::JobCheckKind::none)
      return ApiError{400, R"(check must be {"regex": "..."}, {"contains": "..."} or {"json_schema": {...}})", "check",
                      "invalid_field"};
  }
  // The sampling fields read as a completion's: the same names, ranges and defaults.
  sorted_json as_completion = body;
  as_completion.erase("items");
  as_completion.erase("template");
  as_completion.erase("check");
  as_completion.erase("model");
  as_completion["prompt"] = "";
  auto parsed = parse_completion(as_completion.dump(), false, "", {}, max_tokens);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  // Our own buffer, just built: read, not verified (an empty prompt is not a valid Generate).
  const auto& built = std::get<CompletionCall>(parsed).request;
  const auto* req = flatbuffers::GetRoot<wire::Request>(built.data());
  const messages::SamplingFields s = messages::read_sampling(req->body_as_Generate()->sampling());
  return messages::submit_job_request(1, list, item_template, s, wire::Priority::batch, check);
}

std::string stats_json(const messages::StatsFields& s) {
  sorted_json tiers = sorted_json::array(), workers = sorted_json::array(), speculation = sorted_json::object();
  sorted_json classes = sorted_json::array();
  for (const auto& c : s.escalation_classes)
    classes.push_back({{"class", c.name}, {"judged", c.judged}, {"share", c.share}, {"threshold", c.threshold}});
  for (const auto& x : s.speculation)
    speculation[x.source] = {{"drafted", x.drafted}, {"accepted", x.accepted}, {"windows", x.windows}};
  for (const auto& t : s.tiers)
    tiers.push_back({{"tier", t.name}, {"requests", t.requests}, {"escalated_in", t.escalated_in},
                     {"escalations", t.escalations}, {"tokens", t.tokens}, {"forward_tokens", t.forward_tokens},
                     {"steps", t.steps}, {"drafted", t.drafted}, {"accepted", t.accepted}, {"running", t.running},
                     {"waiting", t.waiting}, {"pages_used", t.pages_used}, {"pages_total", t.pages_total},
                     {"check_failures", t.check_failures}});
  for (const auto& w : s.workers)
    workers.push_back({{"worker", w.endpoint}, {"tier", w.tier}, {"up", w.up}, {"requests", w.requests},
                       {"moved_in", w.moved_in}, {"moved_out", w.moved_out}, {"lost", w.lost}, {"tokens", w.tokens},
                       {"forward_tokens", w.forward_tokens}, {"steps", w.steps}, {"running", w.running},
                       {"waiting", w.waiting}, {"pages_used", w.pages_used}, {"pages_total", w.pages_total},
                       {"step_ms", w.step_ms}});
  return sorted_json{{"model", s.model},
              {"running", s.running},
              {"waiting", s.waiting},
              {"pages_total", s.pages_total},
              {"pages_used", s.pages_used},
              {"pages_cached", s.pages_cached},
              {"pages_free", s.pages_free},
              {"local_pages_total", s.local_pages_total},
              {"local_pages_used", s.local_pages_used},
              {"steps", s.steps},
              {"tokens_generated", s.tokens_generated},
              {"pages_spilled", s.pages_spilled},
              {"pages_restored", s.pages_restored},
              {"preemptions", s.preemptions},
              {"kv_evictions", s.kv_evictions},
              {"kv_positions_evicted", s.kv_positions_evicted},
              {"draining", s.draining},
              {"store_degraded", s.store_degraded},
              {"tiers", tiers},
              {"workers", workers},
              {"speculation", speculation},
              {"escalation_classes", classes},
              {"suffix_tree_bytes", s.suffix_tree_bytes},
              {"suffix_tree_tokens", s.suffix_tree_tokens},
              {"suffix_trees", s.suffix_trees}}
      .dump(-1, ' ', false, sorted_json::error_handler_t::replace);
}

HttpAnswer troupe_answer(const std::string& frame) {
  if (frame.empty()) return {504, ApiError{504, "the server did not answer in time", "", "timeout"}.json()};
  const auto* r = messages::check_response(frame);
  if (!r) return {500, ApiError{500, "an unreadable answer", "", "internal"}.json()};
  switch (r->body_type()) {
    case wire::ResponseBody::SessionList: {
      sorted_json data = sorted_json::array();
      if (const auto* list = r->body_as_SessionList()->sessions())
        for (const auto* s : *list) data.push_back(session(s));
      return {200, sorted_json{{"object", "list"}, {"data", data}}.dump()};
    }
    case wire::ResponseBody::Session: {
      const auto* s = r->body_as_Session();
      sorted_json out = session(s->summary());
      sorted_json msgs = sorted_json::array();
      // Messages by turn: turn_messages says how many each turn holds.
      std::vector<int> turn_of;
      if (const auto* per = s->turn_messages())
        for (uint32_t t = 0; t < per->size(); ++t)
          for (int k = 0; k < per->Get(t); ++k) turn_of.push_back(static_cast<int>(t));
      if (const auto* m = s->messages())
        for (uint32_t i = 0; i < m->size(); ++i) {
          const int turn = i < turn_of.size() ? turn_of[i] : -1;
          const auto* states = s->turn_states();
          const char* state = states && turn >= 0 && static_cast<uint32_t>(turn) < states->size()
                                  ? state_name(static_cast<wire::TurnState>(states->Get(static_cast<uint32_t>(turn))))
                                  : "window";
          msgs.push_back({{"role", messages::text_of(m->Get(i)->role())}, {"content", messages::text_of(m->Get(i)->content())}, {"turn", turn},
                          {"state", state}});
          if (m->Get(i)->pinned()) msgs.back()["pinned"] = true;
        }
      out["messages"] = msgs;
      out["context_summary"] = messages::text_of(s->context_summary());
      return {200, out.dump()};
    }
    case wire::ResponseBody::Ack:
      return {200, sorted_json{{"deleted", true}, {"message", messages::text_of(r->body_as_Ack()->message())}}.dump()};
    case wire::ResponseBody::JobAccepted: return {200, job(r->body_as_JobAccepted()->job()).dump()};
    case wire::ResponseBody::JobReply: {
      const auto* j = r->body_as_JobReply();
      sorted_json out = job(j->job());
      if (const auto* results = j->results()) {
        sorted_json list = sorted_json::array();
        for (const auto* x : *results)
          list.push_back({{"index", x->index()}, {"text", messages::text_of(x->text())}, {"finish_reason", finish_name(x->finish_reason())},
                          {"prompt_tokens", x->prompt_tokens()}, {"completion_tokens", x->completion_tokens()},
                          {"error", messages::text_of(x->error())}, {"check", wire::EnumNameCheckOutcome(x->check())},
                          {"retried", x->retried()}});
        out["results"] = list;
      }
      return {200, out.dump()};
    }
    case wire::ResponseBody::JobList: {
      sorted_json data = sorted_json::array();
      if (const auto* list = r->body_as_JobList()->jobs())
        for (const auto* j : *list) data.push_back(job(j));
      return {200, sorted_json{{"object", "list"}, {"data", data}}.dump()};
    }
    case wire::ResponseBody::Error: {
      const auto* e = r->body_as_Error();
      const ApiError a = api_error(e->code(), messages::text_of(e->message()));
      return {a.status, a.json()};
    }
    default: return {500, ApiError{500, "an unexpected answer", "", "internal"}.json()};
  }
}

}  // namespace troupe::service
