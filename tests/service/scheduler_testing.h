#pragma once
// What the scheduler's tests share (scheduler.test.cpp,
// scheduler_failover.test.cpp): a small config on the synthetic tokenizer,
// requests, and a Loop that drives a scheduler against the fake engine,
// keeps host-tier pages as the KV allocator would and records every frame.
#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "messages/step_frames.h"
#include "service/kv_tiers.h"
#include "service/scheduler.h"
#include "tests/service/harness.h"

namespace troupe::test {

using namespace troupe::service;


inline std::vector<int32_t> tokens(int32_t n, int32_t first = 60) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline SchedulerConfig config(int32_t pages = 64, int32_t page_size = 4) {
  SchedulerConfig c;
  c.tokenizer = test::synthetic_tokenizer();
  c.kv_pages = pages;
  c.page_size = page_size;
  c.planner.token_budget = 16;
  c.planner.max_context = 256;
  c.model_name = "test";
  int64_t t = 0;
  c.clock = [t]() mutable { return t += 1000000; };  // a millisecond per reading
  return c;
}

inline AdmitRequest request(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens, const std::string& peer = "client") {
  AdmitRequest a;
  a.peer = peer;
  a.client_id = id;
  a.prompt = std::move(prompt);
  a.sampling.temperature = 0;
  a.sampling.max_tokens = max_tokens;
  return a;
}

// Drives a scheduler against the fake engine, keeping host-tier pages as the
// KV allocator would, and records every frame.
struct Loop {
  explicit Loop(Scheduler& scheduler) : s(scheduler) {}
  Scheduler& s;
  FakeEngine engine;
  KvTiers tiers{int64_t{1} << 62};
  std::vector<Frame> seen;
  std::vector<std::string> plans;  // every StepPlan sent
  std::vector<persistence::KvSpill> spills;
  std::vector<AdmitRequest> moved;  // escalated, or moved off a lost worker
  int8_t worker = 0;                // the last worker change reported

  void collect() {
    Outbound out = s.take_outbound();
    for (auto& a : out.escalations) moved.push_back(std::move(a));
    if (out.worker != 0) worker = out.worker;
    for (auto& f : frames(out)) seen.push_back(std::move(f));
    for (auto& sp : out.spills) spills.push_back(std::move(sp));
    for (auto& p : out.swap_outs) tiers.keep(std::move(p));
    for (uint64_t seq : out.swap_drops) tiers.drop(seq);
    for (uint64_t seq : out.swap_fetches) {
      s.swap_arrived(tiers.take(seq));
      collect();
    }
  }
  // One plan out and answered; false when there was nothing to send.
  bool step() {
    SchedulerPlan plan = s.next_step();
    collect();
    if (plan.kind == SchedulerPlan::Kind::none) {
      plan = s.next_step();  // a swap-in arrived: plan again
      collect();
      if (plan.kind == SchedulerPlan::Kind::none) return false;
    }
    REQUIRE(plan.kind == SchedulerPlan::Kind::step);
    plans.push_back(plan.bytes);
    s.apply(engine.answer(plan.bytes), "");
    collect();
    return true;
  }
  void run(int max_steps = 500) {
    for (int i = 0; i < max_steps && step(); ++i) {
    }
  }
  std::vector<Frame> of(uint64_t id) const {
    std::vector<Frame> out;
    for (const auto& f : seen)
      if (f.id == id) out.push_back(f);
    return out;
  }
  std::vector<int32_t> tokens_of(uint64_t id, int32_t sample = 0) const {
    std::vector<int32_t> out;
    for (const auto& f : of(id))
      if (f.kind == wire::ResponseBody::Tokens && f.sample == sample) out.insert(out.end(), f.tokens.begin(), f.tokens.end());
    return out;
  }
};

inline const wire::step::StepPlan& plan_of(const std::string& bytes) {
  const auto* p = messages::check_step_plan(bytes);
  REQUIRE(p);
  return *p;
}

inline void require_no_pages_in_use(Scheduler& s) {
  const messages::StatsFields st = s.stats();
  CHECK(st.running == 0);
  CHECK(st.waiting == 0);
  CHECK(st.pages_used == 0);
}

}  // namespace troupe::test
