#include "engine/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#define TROUPE_PAUSE() _mm_pause()
#else
#define TROUPE_PAUSE() std::this_thread::yield()
#endif

namespace troupe::cpu {
namespace {
// About 0.5 ms of spinning: longer than the gap between two kernels of one step,
// much shorter than the gap between two steps of an idle server.
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  fn(0);
  // A worker descheduled by another process can take a whole time slice to
  // finish: after a short spin, yield the core so it can run.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < 4000) {
      TROUPE_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t parts = std::min<int64_t>(n, n_threads_);
  if (parts == 1) {
    fn(0, n);
    return;
  }
  run([&](int t) {
    if (t >= parts) return;
    const int64_t begin = n * t / parts, end = n * (t + 1) / parts;
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      TROUPE_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace troupe::cpu
