#include "service/worker_health.h"

#include "messages/step_frames.h"

namespace troupe::service {

// A flat list of the ways an answer can disqualify its worker, in the order
// they are told (the first that holds is the reason).
std::string WorkerHealth::unfit(const wire::step::StepResult* res) const {
  const std::string w = "worker " + shape_.name;
  if (!res) return w + " sent an unreadable answer";
  if (res->worker_lost()) return res->error() ? res->error()->str() : w + " was lost";
  if (res->error()) return w + ": " + res->error()->str();  // e.g. no share of its pool for us
  if (model_ != 0 && res->model_fingerprint() != 0 && res->model_fingerprint() != model_)
    return w + " now serves another model (" + (res->model() ? res->model()->str() : "") + ")";
  if (res->kv_local_pages() != shape_.kv_local_pages)
    return w + " now keeps " + std::to_string(res->kv_local_pages()) + " local KV pages; this server planned for " +
           std::to_string(shape_.kv_local_pages);
  if (res->kv_pages() != shape_.kv_pages || res->page_size() != shape_.page_size)
    return w + " now has " + std::to_string(res->kv_pages()) + " KV pages of " + std::to_string(res->page_size()) +
           " tokens; this server planned for " + std::to_string(shape_.kv_pages) + " of " +
           std::to_string(shape_.page_size);
  if (res->draining()) return w + " is shutting down";
  return {};
}

std::string WorkerHealth::restarted(uint64_t instance) {
  if (instance == 0) return {};  // an older worker: it cannot say
  if (instance_ == 0 || instance_ == instance) {
    instance_ = instance;
    return {};
  }
  return "worker " + shape_.name + " restarted: its KV cache is empty";
}

std::string WorkerHealth::probe(const wire::step::StepResult* res) {
  std::string why = unfit(res);
  if (!why.empty()) return why;
  if (model_ == 0) model_ = res->model_fingerprint();
  // A lost worker that answers fit is back, whatever process it is now.
  return down_ ? std::string() : restarted(res->instance());
}

std::string WorkerHealth::lost_in(const wire::step::StepResult& res) {
  if (res.worker_lost()) return res.error() ? res.error()->str() : "worker " + shape_.name + " was lost";
  std::string why = restarted(res.instance());
  if (why.empty() && model_ == 0) model_ = res.model_fingerprint();
  return why;
}

bool WorkerHealth::lose(std::string why) {
  reason_ = std::move(why);
  if (down_) return false;
  down_ = true;
  ++losses_;
  return true;
}

void WorkerHealth::back(uint64_t instance) {
  if (instance != 0) instance_ = instance;
  down_ = false;
  reason_.clear();
}

}  // namespace troupe::service
