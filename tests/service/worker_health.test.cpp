// A worker's health as its scheduler reads it (service/worker_health.h):
// each way an answer disqualifies the worker, a restart, a return.
#include <catch2/catch.hpp>

#include <string>

#include "messages/step_frames.h"
#include "service/worker_health.h"

using namespace troupe;
using namespace troupe::service;

namespace {

WorkerShape shape() { return {"tcp://127.0.0.1:7001", 64, 16, 0}; }

messages::WorkerInfo fit(uint64_t instance = 7, uint64_t model = 11) {
  messages::WorkerInfo w;
  w.kv_pages = 64;
  w.page_size = 16;
  w.instance = instance;
  w.model_fingerprint = model;
  w.model = "tiny";
  return w;
}

std::string probe(WorkerHealth& h, const messages::WorkerInfo& w, std::string_view error = "") {
  const messages::Bytes bytes = messages::step_result(0, {}, error, 0, w);
  return h.probe(messages::check_step_result(bytes));
}

}  // namespace

TEST_CASE("worker health: an answer in the planned shape is fit, and its model and process are learnt") {
  WorkerHealth h(shape());
  CHECK(probe(h, fit()).empty());
  CHECK(probe(h, fit()).empty());
  CHECK_FALSE(h.down());
}

TEST_CASE("worker health: each unfit answer names its reason") {
  WorkerHealth h(shape());
  REQUIRE(probe(h, fit()).empty());
  CHECK(h.probe(nullptr) == "worker tcp://127.0.0.1:7001 sent an unreadable answer");
  CHECK(probe(h, fit(), "no share of its pool") == "worker tcp://127.0.0.1:7001: no share of its pool");
  auto other_model = fit(7, 12);
  other_model.model = "big";
  CHECK(probe(h, other_model) == "worker tcp://127.0.0.1:7001 now serves another model (big)");
  auto local = fit();
  local.kv_local_pages = 8;
  CHECK(probe(h, local) == "worker tcp://127.0.0.1:7001 now keeps 8 local KV pages; this server planned for 0");
  auto pages = fit();
  pages.kv_pages = 32;
  CHECK(probe(h, pages) == "worker tcp://127.0.0.1:7001 now has 32 KV pages of 16 tokens; this server planned for 64 of 16");
  auto draining = fit();
  draining.draining = true;
  CHECK(probe(h, draining) == "worker tcp://127.0.0.1:7001 is shutting down");
  CHECK(probe(h, fit(8)) == "worker tcp://127.0.0.1:7001 restarted: its KV cache is empty");
}

TEST_CASE("worker health: the link's own loss report is the reason") {
  WorkerHealth h(shape());
  const messages::Bytes lost = messages::worker_lost_result("connection refused");
  CHECK(h.probe(messages::check_step_result(lost)) == "connection refused");
  CHECK(h.lost_in(*messages::check_step_result(lost)) == "connection refused");
}

TEST_CASE("worker health: a step's result from a new process is a loss, from an older worker that cannot say it is not") {
  WorkerHealth h(shape());
  const messages::Bytes first = messages::step_result(1, {}, "", 1, fit(7));
  CHECK(h.lost_in(*messages::check_step_result(first)).empty());
  const messages::Bytes unsaid = messages::step_result(2, {}, "", 1, fit(0));
  CHECK(h.lost_in(*messages::check_step_result(unsaid)).empty());
  const messages::Bytes other = messages::step_result(3, {}, "", 1, fit(9));
  CHECK(h.lost_in(*messages::check_step_result(other)) == "worker tcp://127.0.0.1:7001 restarted: its KV cache is empty");
}

TEST_CASE("worker health: lost once, counted once, and back under the process it answers as") {
  WorkerHealth h(shape());
  REQUIRE(probe(h, fit(7)).empty());
  CHECK(h.lose("first"));
  CHECK_FALSE(h.lose("second"));
  CHECK(h.down());
  CHECK(h.reason() == "second");
  CHECK(h.losses() == 1);
  // While down, a fit answer from another process is the worker back, not a restart.
  CHECK(probe(h, fit(9)).empty());
  h.back(9);
  CHECK_FALSE(h.down());
  CHECK(h.reason().empty());
  CHECK(probe(h, fit(9)).empty());
  CHECK(probe(h, fit(7)) == "worker tcp://127.0.0.1:7001 restarted: its KV cache is empty");
}
