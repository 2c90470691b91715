// The checks of `troupe serve`'s options that need no model or socket
// (service/service_options.h): one case per refusal, and the context fitted
// to the KV pool.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include "service/service_options.h"

using namespace troupe;
using namespace troupe::service;

namespace {

ServiceOptions loopback() {
  ServiceOptions o;
  o.listen = "tcp://127.0.0.1:7700";
  o.events = "tcp://127.0.0.1:7701";
  return o;
}

std::string refusal(const ServiceOptions& o) {
  try {
    check_service_options(o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("service options: loopback endpoints and the defaults pass") {
  CHECK(refusal(loopback()).empty());
  auto o = loopback();
  o.http = "127.0.0.1:8080";
  o.workers = {"tcp://10.0.0.5:7800", "tcp://10.0.0.6:7800"};
  o.speculation = SpeculationDefault::every(SpeculationMode::ngram);
  CHECK(refusal(o).empty());
}

TEST_CASE("service options: --auth curve needs both the server key and the clients' directory") {
  auto o = loopback();
  o.server_key = "server.secret";
  CHECK(refusal(o) == "--auth curve needs both --server-key (this server's .secret) and --clients-dir");
  o.server_key.clear();
  o.clients_dir = "clients";
  CHECK(refusal(o) == "--auth curve needs both --server-key (this server's .secret) and --clients-dir");
}

TEST_CASE("service options: a non-loopback client, event, HTTP or join endpoint needs CURVE or --insecure") {
  auto o = loopback();
  o.listen = "tcp://0.0.0.0:7700";
  CHECK(refusal(o).starts_with("tcp://0.0.0.0:7700 is not a loopback endpoint: serve it with --auth curve"));
  o = loopback();
  o.events = "tcp://0.0.0.0:7701";
  CHECK(refusal(o).starts_with("tcp://0.0.0.0:7701 is not a loopback endpoint"));
  o = loopback();
  o.http = "0.0.0.0:8080";
  CHECK(refusal(o).starts_with("--http 0.0.0.0:8080 is not a loopback address"));
  o = loopback();
  o.join_listen = "tcp://0.0.0.0:7900";
  CHECK(refusal(o).starts_with("--join-listen tcp://0.0.0.0:7900 is not a loopback endpoint"));
  o.insecure = true;
  o.listen = "tcp://0.0.0.0:7700";
  o.http = "0.0.0.0:8080";
  CHECK(refusal(o).empty());
  o = loopback();
  o.listen = "tcp://0.0.0.0:7700";
  o.server_key = "server.secret";
  o.clients_dir = "clients";
  CHECK(refusal(o).empty());
}

TEST_CASE("service options: --worker-key needs the server's own pair") {
  auto o = loopback();
  o.worker_key = "worker.public";
  CHECK(refusal(o) == "--worker-key needs --server-key: the pair this server shows workers");
}

TEST_CASE("service options: a worker given twice is refused") {
  auto o = loopback();
  o.workers = {"tcp://127.0.0.1:7800", "tcp://127.0.0.1:7801", "tcp://127.0.0.1:7800"};
  CHECK(refusal(o) == "--worker tcp://127.0.0.1:7800 is given twice; each worker serves one front end once");
}

TEST_CASE("service options: a draft model in process and in a worker at once is refused") {
  auto o = loopback();
  o.draft_model_path = "draft.gguf";
  o.draft_worker = "tcp://127.0.0.1:7810";
  CHECK(refusal(o) == "give a draft model or a draft worker, not both");
}

TEST_CASE("service options: tiers or a draft model with several workers are refused") {
  auto o = loopback();
  o.workers = {"tcp://127.0.0.1:7800", "tcp://127.0.0.1:7801"};
  o.tier_paths = {"small.gguf"};
  CHECK(refusal(o).starts_with("--tiers with several --worker (or --join-listen) is not supported yet"));
  o.tier_paths.clear();
  o.draft_worker = "tcp://127.0.0.1:7810";
  CHECK(refusal(o).starts_with("a draft model with several --worker (or --join-listen) is not supported yet"));
  o.workers = {"tcp://127.0.0.1:7800"};
  o.join_listen = "tcp://127.0.0.1:7900";  // workers may join: several all the same
  CHECK(refusal(o).starts_with("a draft model with several --worker (or --join-listen) is not supported yet"));
}

TEST_CASE("service options: --speculation draft needs a draft model, a draft worker or tiers") {
  auto o = loopback();
  o.speculation = SpeculationDefault::every(SpeculationMode::draft);
  CHECK(refusal(o) == "--speculation draft needs --draft-model or --draft-worker");
  o.speculation = {.greedy = SpeculationMode::draft, .sampled = SpeculationMode::off};
  CHECK(refusal(o) == "--speculation draft needs --draft-model or --draft-worker");
  o.tier_paths = {"small.gguf"};  // the first tier drafts
  CHECK(refusal(o).empty());
}

TEST_CASE("service options: the budget rule needs tiers and a hold, the tail signal a hold") {
  auto o = loopback();
  o.escalate_budget = 0.3f;
  CHECK(refusal(o) == "--escalate-budget needs --tiers: it is the share of requests the next tier takes");
  o.tier_paths = {"small.gguf"};
  CHECK(refusal(o).empty());
  o.escalate_hold = 0;
  CHECK(refusal(o) == "--escalate-budget ranks held answers by their confidence; it needs --escalate-hold > 0");
  o.escalate_budget = 0;
  o.escalate_signal = HoldSignal::tail;
  CHECK(refusal(o) == "--escalate-signal tail judges held tokens; it needs --escalate-hold > 0");
  o.escalate_hold = 48;
  CHECK(refusal(o).empty());
}

TEST_CASE("service options: the context defaults to the model's, at most 8192 and the pool, and an explicit one must fit") {
  CHECK(fitted_context(0, 32768, 1024, 16) == 8192);
  CHECK(fitted_context(0, 2048, 1024, 16) == 2048);
  CHECK(fitted_context(0, 32768, 256, 16) == 4096);
  CHECK(fitted_context(4096, 32768, 256, 16) == 4096);
  CHECK_THROWS_WITH(fitted_context(8192, 32768, 256, 16),
                    "--context 8192 is more than the KV pool holds: 4096 tokens (256 pages of 16); raise --kv-tokens "
                    "or lower --context");
}
