// The workers a front end runs its model on (service/worker_pool.h): one
// case per refusal, and the pool they make together.
#include <catch2/catch.hpp>

#include <string>

#include "service/worker_pool.h"

using namespace troupe;
using namespace troupe::service;

namespace {

constexpr uint64_t kModel = 0xabc;

messages::WorkerInfo worker(uint64_t process, int32_t kv_pages = 512) {
  messages::WorkerInfo w;
  w.model = "qwen";
  w.model_fingerprint = kModel;
  w.n_vocab = 1000;
  w.kv_pages = kv_pages;
  w.page_size = 16;
  w.process = process;
  w.can_copy_pages = w.can_transfer_pages = w.can_shift_kv = w.can_evict_kv = true;
  return w;
}

WorkerPool pool() { return WorkerPool("model.gguf", kModel, 1000); }

}  // namespace

TEST_CASE("worker pool: workers of the front end's model join, the pool is the smallest, and does what all do") {
  WorkerPool p = pool();
  auto a = worker(1, 512), b = worker(2, 256);
  a.kv_local_pages = 40, b.kv_local_pages = 60;
  b.can_shift_kv = false;
  b.can_evict_kv = false;  // a CUDA worker
  REQUIRE(p.refusal("tcp://127.0.0.1:7801", a).empty());
  p.add("tcp://127.0.0.1:7801", a);
  REQUIRE(p.refusal("tcp://127.0.0.1:7802", b).empty());
  p.add("tcp://127.0.0.1:7802", b);
  CHECK(p.kv_pages() == 256);
  CHECK(p.kv_local_pages() == 40);
  CHECK(p.page_size() == 16);
  CHECK(p.can_copy());
  CHECK_FALSE(p.can_shift());
  CHECK_FALSE(p.can_evict());
  CHECK(p.has("tcp://127.0.0.1:7802"));
  CHECK_FALSE(p.has("tcp://127.0.0.1:7803"));
  CHECK(p.describe() ==
        "verifier in 2 workers: tcp://127.0.0.1:7801 (qwen, KV 512 pages x 16 tokens), tcp://127.0.0.1:7802 (qwen, KV 256 "
        "pages x 16 tokens)");
}

TEST_CASE("worker pool: a worker of another model is refused") {
  auto w = worker(1);
  w.model_fingerprint = 0xdef;
  w.model = "llama";
  CHECK(pool().refusal("tcp://127.0.0.1:7801", w) ==
        "the worker at tcp://127.0.0.1:7801 serves another model (llama) than model.gguf; every worker must load the "
        "front end's model file");
}

TEST_CASE("worker pool: a worker with another vocabulary is refused") {
  auto w = worker(1);
  w.model_fingerprint = 0;  // an older worker: it cannot say which file
  w.n_vocab = 999;
  CHECK(pool().refusal("tcp://127.0.0.1:7801", w) ==
        "the worker at tcp://127.0.0.1:7801 serves a model with 999 tokens; model.gguf has 1000");
}

TEST_CASE("worker pool: one process under two endpoints is refused") {
  WorkerPool p = pool();
  p.add("tcp://127.0.0.1:7801", worker(7));
  CHECK(p.refusal("tcp://[::1]:7801", worker(7)) ==
        "--worker tcp://[::1]:7801 and tcp://127.0.0.1:7801 are the same worker process");
  CHECK(p.refusal("tcp://127.0.0.1:7801", worker(7)).empty());  // itself, asked again
}

TEST_CASE("worker pool: another page size or KV type than the workers before is refused") {
  WorkerPool p = pool();
  p.add("tcp://127.0.0.1:7801", worker(1));
  auto w = worker(2);
  w.kv_type = 1;  // q8_0
  CHECK(p.refusal("tcp://127.0.0.1:7802", w) ==
        "the worker at tcp://127.0.0.1:7802 keeps KV pages of 16 tokens (q8_0), the one at tcp://127.0.0.1:7801 of 16 "
        "(f16); a request moves between workers, so they need the same page size and KV type");
  w = worker(2);
  w.page_size = 32;
  CHECK(p.refusal("tcp://127.0.0.1:7802", w).starts_with("the worker at tcp://127.0.0.1:7802 keeps KV pages of 32 tokens"));
}

TEST_CASE("worker pool: once serving, a worker that cannot hold the server's context is refused") {
  WorkerPool p = pool();
  p.add("tcp://127.0.0.1:7801", worker(1));
  p.set_max_context(8192);
  CHECK(p.refusal("tcp://127.0.0.1:7802", worker(2, 256)) ==
        "the worker at tcp://127.0.0.1:7802 holds 4096 tokens of KV, less than this server's context of 8192; give it "
        "more --kv-tokens");
  CHECK(p.refusal("tcp://127.0.0.1:7802", worker(2, 512)).empty());
}
