// Thread pool.
#include "cpu/thread_pool.h"

#include <algorithm>

#include "support/host_cpu.h"

namespace orthojit::cpu {

ThreadPool::ThreadPool(int threads) {
  for (int worker = 1; worker < std::max(threads, 1); ++worker) workers_.emplace_back([this, worker] { worker_loop(worker); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& thread : workers_) thread.join();
}

void ThreadPool::run_tasks(int worker) {
  while (true) {
    int64_t task;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_ >= count_) return;
      task = next_++;
    }
    (*body_)(task, worker);
    std::lock_guard<std::mutex> lock(mutex_);
    if (++finished_ == count_) done_.notify_all();
  }
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++busy_workers_;
    }
    run_tasks(worker);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_workers_ == 0) done_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int64_t, int)>& body) {
  if (count <= 0) return;
  if (workers_.empty() || count == 1) {
    for (int64_t task = 0; task < count; ++task) body(task, 0);
    return;
  }
  std::lock_guard<std::mutex> job(job_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    count_ = count;
    next_ = 0;
    finished_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  run_tasks(0);
  std::unique_lock<std::mutex> lock(mutex_);
  // Wait for every task, and for every worker to leave run_tasks (body_ must outlive them).
  done_.wait(lock, [&] { return finished_ == count_ && busy_workers_ == 0; });
  body_ = nullptr;
}

ThreadPool& shared_thread_pool() {
  static ThreadPool pool(host_cpu().logical_cores);
  return pool;
}

}  // namespace orthojit::cpu
