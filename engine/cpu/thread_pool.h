#pragma once
// A fixed set of worker threads that stay warm between calls: after a job they
// spin briefly before sleeping, because a decode step issues hundreds of small
// parallel loops a few microseconds apart and waking a sleeping thread costs
// more than most of them.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe::cpu {

class ThreadPool {
 public:
  // n_threads counts the calling thread: ThreadPool(2) starts one worker.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index) once on every thread (the caller is thread 0) and
  // returns when all calls have returned. Not reentrant.
  void run(const std::function<void(int thread)>& fn);

  // Splits [0, n) into size() contiguous ranges and calls fn(begin, end) on
  // each non-empty range, one per thread.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace troupe::cpu
