// Thread pool.
#include "cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "support/host_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace orthojit::cpu {
namespace {

// ORTHOJIT_THREAD_SPIN_US, when set to a number of microseconds (0 to 100000); else the default.
int spin_from_environment() {
  if (const char* text = std::getenv("ORTHOJIT_THREAD_SPIN_US"); text && *text) {
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (end && *end == '\0' && value >= 0 && value <= 100000) return static_cast<int>(value);
  }
  return ThreadPool::kSpinMicroseconds;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int threads, int spin_microseconds) : spin_microseconds_(spin_microseconds >= 0 ? spin_microseconds : spin_from_environment()) {
  if (threads > kMaxThreads)
    throw std::invalid_argument("a thread pool of " + std::to_string(threads) + " threads; at most " + std::to_string(kMaxThreads));
  for (int worker = 1; worker < std::max(threads, 1); ++worker) workers_.emplace_back([this, worker] { worker_loop(worker); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& thread : workers_) thread.join();
}

template <class Ready>
void ThreadPool::spin_until(Ready ready) const {
  if (spin_microseconds_ <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_microseconds_);
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return;
    // Give the core away between rounds: when more threads are runnable than there are cores
    // (several ranks per machine, each with a pool), a spinning worker must not hold one that a
    // working thread is waiting for.
    std::this_thread::yield();
  }
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
    if (finished_.fetch_add(1) + 1 == count_) done_.notify_all();
  }
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0;
  while (true) {
    // Watch for the next job before sleeping; the decision is taken again under the mutex.
    spin_until([&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      if (stop_.load()) return;
      seen = generation_.load();
      busy_workers_.fetch_add(1);
    }
    run_tasks(worker);
    std::lock_guard<std::mutex> lock(mutex_);
    if (busy_workers_.fetch_sub(1) == 1) done_.notify_all();
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
    finished_.store(0);
    generation_.fetch_add(1);
  }
  wake_.notify_all();  // no system call when every worker is still spinning
  run_tasks(0);
  // Every task finished, and every worker out of run_tasks (body_ must outlive them). A worker
  // that has seen the generation but not yet counted itself busy takes no task: next_ is at
  // count_ already, and the next job's fields are written under the mutex it then waits for.
  auto all_done = [&] { return finished_.load(std::memory_order_acquire) == count && busy_workers_.load(std::memory_order_acquire) == 0; };
  spin_until(all_done);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, all_done);
  body_ = nullptr;
}

ThreadPool& shared_thread_pool() {
  static ThreadPool pool(host_cpu().logical_cores);
  return pool;
}

}  // namespace orthojit::cpu
