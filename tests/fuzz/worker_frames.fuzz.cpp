// The frames between `troupe serve` and its workers (messages/step.fbs,
// draft.fbs), each way: a StepPlan into the target verifier (StepRunner on a
// real backend), a DraftPlan into the draft model (DraftRunner), a StepResult
// into a scheduler whose step is out, a DraftResult into one waiting for its
// drafts. Every input goes to all four: the identifiers and root types tell
// them apart, and a frame of one kind sent to another must be refused too.
//
// Properties: no crash or sanitizer report; the runners always answer with a
// frame their front end can read (they "never throw"); the schedulers keep
// planning after any result.
#include <cstddef>
#include <cstdint>
#include <string>

#include "messages/draft_frames.h"
#include "messages/step_frames.h"
#include "tests/fuzz/worker_setup.h"
#include "worker/draft_runner.h"
#include "worker/step_runner.h"

using namespace troupe;

namespace {

struct Workers {
  std::shared_ptr<Backend> verifier = fuzz::tiny_backend();
  std::shared_ptr<Backend> drafter = fuzz::tiny_backend();
  std::shared_ptr<const Tokenizer> tokenizer = fuzz::tiny_tokenizer(*verifier);
  Workers() { fuzz::remove_tiny_model(); }
};

Workers& workers() {
  static Workers w;
  return w;
}

}  // namespace

// Loading happens before the first input, so it is not timed as one.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)workers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Workers& w = workers();
  const std::string bytes(reinterpret_cast<const char*>(data), size);  // aligned, as a received frame is

  // Fresh runners: a plan must not depend on what an earlier input taught them.
  {
    worker::StepRunner runner(w.verifier);
    if (!messages::check_step_result(runner.run(bytes))) fuzz::fail("StepRunner answered an unreadable StepResult");
  }
  {
    worker::DraftRunner runner(w.drafter, "fuzz-draft");
    if (!messages::check_draft_result(runner.run(bytes))) fuzz::fail("DraftRunner answered an unreadable DraftResult");
  }

  std::string plan;
  auto stepping = fuzz::stepping_scheduler(w.tokenizer, plan);
  stepping->apply(bytes, "");
  (void)stepping->take_outbound();
  (void)stepping->next_step();

  auto drafting = fuzz::drafting_scheduler(w.tokenizer, plan);
  drafting->apply_drafts(bytes, "");
  (void)drafting->take_outbound();
  (void)drafting->next_step();
  return 0;
}
