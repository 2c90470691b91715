// The front end ↔ worker messages (step.fbs, draft.fbs): built and read
// back, told apart by their identifiers, and the draft model's q checked
// before the verifier trusts it.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "messages/draft_frames.h"
#include "messages/join_frames.h"
#include "messages/step_frames.h"

using namespace troupe;
using namespace troupe::messages;

TEST_CASE("a draft plan and its result carry sequences, drafts and q, and are not step messages") {
  const std::vector<int32_t> tokens{5, 6, 7};
  SamplingFields sampling;
  sampling.temperature = 0.5f;
  sampling.seed = 9;
  const DraftSequenceSpec seqs[] = {{11, 0, tokens, 4, &sampling}, {12, 40, std::span(tokens).last(1), 2, nullptr}};
  const uint64_t forget[] = {3, 4};
  const Bytes plan = draft_plan(7, seqs, forget);
  const auto* p = check_draft_plan(plan);
  REQUIRE(p);
  CHECK(p->step() == 7);
  REQUIRE(p->sequences()->size() == 2);
  CHECK(p->sequences()->Get(0)->sampling()->temperature() == 0.5f);
  CHECK(p->sequences()->Get(0)->sampling()->seed() == 9);
  CHECK(p->sequences()->Get(1)->sampling() == nullptr);
  CHECK(p->sequences()->Get(1)->start() == 40);
  CHECK(p->forget()->size() == 2);
  CHECK(check_step_plan(plan) == nullptr);  // a verifier worker refuses it

  DraftProposalFields a{11, {8, 9}, {{{8, 0.75f}, {3, 0.25f}}, {{9, 1.0f}}}, false};
  DraftProposalFields b{12, {}, {}, true};
  const DraftProposalFields props[] = {a, b};
  const Bytes result = draft_result(7, props, "", 3.5, 1.25, {"draft", 100, 42}, 0.75);
  const auto* r = check_draft_result(result);
  REQUIRE(r);
  CHECK(r->round_ms() == 1.25);
  CHECK(r->catch_up_ms() == 0.75);
  CHECK(r->vocabulary() == 42);
  const auto* pa = r->proposals()->Get(0);
  const auto q = read_draft_q(pa->q_sizes(), pa->q_tokens(), pa->q_probs(), 2, 100);
  CHECK(q == a.q);
  CHECK(r->proposals()->Get(1)->resync());
  CHECK(read_draft_q(r->proposals()->Get(1)->q_sizes(), nullptr, nullptr, 0, 100).empty());
  CHECK(check_step_result(result) == nullptr);

  // And the other way round: step messages are not draft messages.
  CHECK(check_draft_plan(step_plan(1, {}, {})) == nullptr);
  CHECK(check_draft_result(step_result(1, {}, "", 0)) == nullptr);
}

TEST_CASE("q that does not fit its drafts or is not a distribution is refused with the reason") {
  auto bytes_of = [](const std::vector<DraftDistribution>& q) {
    DraftProposalFields p{1, std::vector<int32_t>(q.size(), 1), q, false};
    return draft_result(1, std::span(&p, 1), "", 0, 0, {});
  };
  auto read = [&](const std::vector<DraftDistribution>& q, int32_t drafts, int32_t n_vocab) {
    const Bytes b = bytes_of(q);
    const auto* p = check_draft_result(b)->proposals()->Get(0);
    return read_draft_q(p->q_sizes(), p->q_tokens(), p->q_probs(), drafts, n_vocab);
  };
  CHECK_THROWS_WITH(read({{{1, 1.0f}}}, 2, 10), Catch::Contains("1 for 2 drafts"));
  CHECK_THROWS_WITH(read({{{12, 1.0f}}}, 1, 10), Catch::Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(read({{{1, 0.5f}, {2, 0.2f}}}, 1, 10), Catch::Contains("sum to"));
  CHECK_THROWS_WITH(read({{{1, -0.5f}, {2, 1.5f}}}, 1, 10), Catch::Contains("negative"));
  CHECK_THROWS_WITH(read({{{1, std::numeric_limits<float>::quiet_NaN()}}}, 1, 10), Catch::Contains("not finite"));
  CHECK(read({{{1, 0.5f}, {2, 0.5f}}}, 1, 10).size() == 1);
}

namespace {

// A plan whose forget vector holds 8 bytes aligned only to 4 (built as two
// uints, given length 1), `pad` bytes further along the buffer.
template <typename MakeRoot>
std::string plan_with_forget(int pad, const char* identifier, MakeRoot make_root) {
  flatbuffers::FlatBufferBuilder fbb;
  for (int i = 0; i < pad; ++i) fbb.PushElement<uint32_t>(0);
  fbb.StartVector(2, sizeof(uint32_t));
  fbb.PushElement<uint32_t>(0);
  fbb.PushElement<uint32_t>(7);
  const flatbuffers::Offset<flatbuffers::Vector<uint64_t>> forget(fbb.EndVector(1));
  fbb.Finish(make_root(fbb, forget), identifier);
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

}  // namespace

TEST_CASE("a step or draft plan whose 8-byte forget ids are misaligned is refused, an aligned one read") {
  // Found by tests/fuzz (worker_frames): the verifier passes such a vector, and
  // the runners read its ids misaligned (UBSan: undefined behaviour).
  int misaligned = 0;
  for (int pad = 0; pad < 2; ++pad) {
    const std::string step = plan_with_forget(pad, wire::step::StepPlanIdentifier(), [](auto& fbb, auto forget) {
      return wire::step::CreateStepPlan(fbb, 1, 0, forget);
    });
    const std::string draft = plan_with_forget(pad, wire::draft::DraftPlanIdentifier(), [](auto& fbb, auto forget) {
      return wire::draft::CreateDraftPlan(fbb, 1, 0, forget);
    });
    const auto* raw = flatbuffers::GetRoot<wire::step::StepPlan>(step.data());
    const bool aligned = (reinterpret_cast<const char*>(raw->forget()->Data()) - step.data()) % 8 == 0;
    misaligned += aligned ? 0 : 1;
    CAPTURE(pad, aligned);
    CHECK((check_step_plan(step) != nullptr) == aligned);
    CHECK((check_draft_plan(draft) != nullptr) == aligned);
  }
  CHECK(misaligned == 1);  // one of the two paddings puts the ids 4 bytes off
}

TEST_CASE("a worker's join announcement and its answer round-trip, and anything else is no announcement") {
  const messages::Bytes request = messages::join_request("tcp://10.0.0.7:7701", 42);
  const auto* r = messages::check_join_request(request);
  REQUIRE(r);
  CHECK(r->endpoint()->str() == "tcp://10.0.0.7:7701");
  CHECK(r->instance() == 42);
  CHECK(messages::check_join_request(messages::join_request("", 42)) == nullptr);  // no endpoint to dial
  CHECK(messages::check_join_request(messages::step_plan(0, {}, {})) == nullptr);  // another kind of message
  CHECK(messages::check_join_request("not a flatbuffer") == nullptr);
  const messages::Bytes yes = messages::join_reply(true, ""), no = messages::join_reply(false, "serves another model");
  REQUIRE(messages::check_join_reply(yes));
  CHECK(messages::check_join_reply(yes)->accepted());
  REQUIRE(messages::check_join_reply(no));
  CHECK_FALSE(messages::check_join_reply(no)->accepted());
  CHECK(messages::check_join_reply(no)->reason()->str() == "serves another model");
}

TEST_CASE("a drain's two flags: the worker says it drains, the front end releases it") {
  messages::WorkerInfo w;
  w.draining = true;
  const messages::Bytes result = messages::step_result(3, {}, "", 1, w);
  REQUIRE(messages::check_step_result(result));
  CHECK(messages::check_step_result(result)->draining());
  // Each checked root points into its buffer, so every buffer outlives the root read from it.
  const messages::Bytes working = messages::step_result(3, {}, "", 1, {});
  REQUIRE(messages::check_step_result(working));
  CHECK_FALSE(messages::check_step_result(working)->draining());
  const messages::Bytes release_bytes = messages::release_plan(), plain = messages::step_plan(0, {}, {});
  const auto* release = messages::check_step_plan(release_bytes);
  REQUIRE(release);
  CHECK(release->release());
  REQUIRE(messages::check_step_plan(plain));
  CHECK_FALSE(messages::check_step_plan(plain)->release());
}

TEST_CASE("a worker says what its KV can do: copies, transfers, shifts and evictions each its own flag") {
  messages::WorkerInfo w;
  w.can_shift_kv = true;
  w.can_evict_kv = true;
  const messages::Bytes evicts = messages::step_result(1, {}, "", 1, w);
  const auto* r = messages::check_step_result(evicts);
  REQUIRE(r);
  CHECK(r->can_shift_kv());
  CHECK(r->can_evict_kv());
  CHECK_FALSE(r->can_copy_pages());
  w.can_evict_kv = false;  // a CUDA worker, or a sliding-window model
  const messages::Bytes keeps = messages::step_result(1, {}, "", 1, w);
  REQUIRE(messages::check_step_result(keeps));
  CHECK_FALSE(messages::check_step_result(keeps)->can_evict_kv());
}
