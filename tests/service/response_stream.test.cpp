// One sequence's answer as its client sees it: text in whole characters,
// stop strings held back and never shown, the end token not shown, usage.
#include <catch2/catch.hpp>

#include "service/response_stream.h"
#include "tests/service/harness.h"

using namespace troupe;
using namespace troupe::service;

namespace {

std::string text_of(const Outbound& out) {
  std::string all;
  for (const auto& f : test::frames(out)) all += f.text;
  return all;
}

}  // namespace

TEST_CASE("a stop string ends the stream and none of it reaches the client") {
  const auto tok = test::synthetic_tokenizer();
  messages::SamplingFields s;
  s.stop = {"END"};
  s.max_tokens = 100;
  ResponseStream stream(*tok, {"p", 1, 0}, s, false, false, true, 0);
  Outbound out;
  std::optional<wire::FinishReason> end;
  for (int32_t t : tok->encode("hello END world", false, false)) {
    end = stream.push(t, 0, 1, out);
    if (end) break;
  }
  REQUIRE(end);
  CHECK(*end == wire::FinishReason::stop_string);
  stream.flush(*end, out);
  CHECK(text_of(out) == "hello ");
  CHECK(stream.take_answer() == "hello ");
}

TEST_CASE("the end-of-generation token ends the stream without a frame, and max_tokens ends it after the last token") {
  const auto tok = test::synthetic_tokenizer();
  messages::SamplingFields s;
  s.max_tokens = 2;
  ResponseStream stream(*tok, {"p", 1, 0}, s, false, false, false, 0);
  Outbound out;
  CHECK_FALSE(stream.push(70, 0, 1, out));
  CHECK(stream.push(tok->end_of_generation_ids().front(), 0, 2, out) == wire::FinishReason::stop);
  CHECK(out.replies.size() == 1);
  CHECK(stream.completion() == 1);
  ResponseStream capped(*tok, {"p", 2, 0}, s, false, false, false, 0);
  CHECK_FALSE(capped.push(70, 0, 1, out));
  CHECK(capped.push(71, 0, 2, out) == wire::FinishReason::length);
}

TEST_CASE("a character split across tokens is sent whole, and the Done counts queue, first-token and total time") {
  const auto tok = test::synthetic_tokenizer();
  messages::SamplingFields s;
  s.max_tokens = 10;
  ResponseStream stream(*tok, {"p", 1, 0}, s, false, false, false, 1000000);
  Outbound out;
  const std::string text = "\xe4\xbd\xa0";  // one character, three bytes
  stream.scheduled(3000000);
  for (unsigned char byte : text) stream.push(byte, 0, 5000000, out);  // the byte tokens are ids 0..255
  stream.flush(wire::FinishReason::length, out);
  CHECK(text_of(out) == text);
  const messages::DoneFields d = stream.done(wire::FinishReason::length, 7, 4, nullptr, 9000000);
  CHECK(d.completion_tokens == 3);
  CHECK(d.prompt_tokens == 7);
  CHECK(d.cached_prompt_tokens == 4);
  CHECK(d.queue_ms == Approx(2.0));
  CHECK(d.ttft_ms == Approx(4.0));
  CHECK(d.total_ms == Approx(8.0));
}
