// A small fixed pool of worker threads (one per core by default: no oversubscription).
// parallel_for hands out task indices dynamically; results never depend on which worker ran a
// task, so a run is deterministic for any number of threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace orthojit::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads >= 1; the caller is one of them
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs body(task, worker) for task in [0, count), worker in [0, size()); returns when all ran.
  // Calls from several application threads take turns (one job at a time); a body must not call
  // parallel_for on the same pool (that would wait for itself).
  void parallel_for(int64_t count, const std::function<void(int64_t task, int worker)>& body);

 private:
  void worker_loop(int worker);
  void run_tasks(int worker);

  std::vector<std::thread> workers_;
  std::mutex job_mutex_;  // held for a whole parallel_for: jobs from different callers take turns
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int)>* body_ = nullptr;
  int64_t count_ = 0, next_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  int busy_workers_ = 0;
  bool stop_ = false;
};

// The process-wide pool with one thread per logical core.
ThreadPool& shared_thread_pool();

}  // namespace orthojit::cpu
