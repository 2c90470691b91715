#pragma once
// A worker process's loop on its step socket (`troupe worker`): each plan
// answered in turn, by the StepRunner (verifier) or the DraftRunner (draft).
// The first stop signal starts a drain: results say `draining`, and the loop
// ends when every front end released the worker, when no step came for
// kDrainIdle, or when the drain time is up; a second signal ends it at once.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zmq {
class socket_t;
class message_t;
}  // namespace zmq

namespace troupe::worker {

class StepRunner;
class JoinAnnouncer;

class StepLoop {
 public:
  // A draining worker with no step for this long has no front end waiting on it.
  static constexpr std::chrono::seconds kDrainIdle{1};
  using Answer = std::function<std::string(const std::string&)>;

  // `runner` null: a draft worker, which does not drain. `announcers`: the
  // worker's --join announcements, stopped by a drain. `refused`: a front
  // end refused this worker (leave). `stop_signals`: SIGINT/SIGTERM so far.
  StepLoop(zmq::socket_t& socket, Answer answer, std::shared_ptr<StepRunner> runner,
           std::vector<std::unique_ptr<JoinAnnouncer>>* announcers, std::chrono::duration<double> drain_timeout,
           const std::atomic<bool>* refused, const std::atomic<int>* stop_signals)
      : socket(socket), answer(std::move(answer)), runner(std::move(runner)), announcers(announcers),
        drain_timeout(drain_timeout), refused(refused), stop_signals(stop_signals) {}

  void run();

 private:
  zmq::socket_t& socket;
  Answer answer;
  std::shared_ptr<StepRunner> runner;
  std::vector<std::unique_ptr<JoinAnnouncer>>* announcers;
  std::chrono::duration<double> drain_timeout;
  const std::atomic<bool>* refused;
  const std::atomic<int>* stop_signals;

  int signals() const { return stop_signals ? stop_signals->load() : 0; }
  bool start_drain(std::chrono::steady_clock::time_point now);  // false: leave now (nothing to drain)
  bool receive(zmq::message_t& id, zmq::message_t& plan);
  // Answers one plan; true when a draining worker's last front end let it go.
  bool answer_plan(zmq::message_t& id, const std::string& bytes);

  bool draining_ = false;
  std::chrono::steady_clock::time_point last_step_{}, drain_until_{};
};

}  // namespace troupe::worker
