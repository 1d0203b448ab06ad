#include "runtime/muon/background_digest.h"

namespace orthojit::runtime {

BackgroundDigest::BackgroundDigest(Sha256& digest) : digest_(digest), worker_([this] { run(); }) {}

BackgroundDigest::~BackgroundDigest() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();  // the worker empties the queue before it stops
}

void BackgroundDigest::push(std::string_view data) {
  if (data.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(data);
    pushed_ += data.size();
  }
  changed_.notify_all();
}

void BackgroundDigest::hashed_through(uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return hashed_ >= bytes || hashed_ >= pushed_; });
}

void BackgroundDigest::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return hashed_ >= pushed_; });
}

void BackgroundDigest::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and nothing is left
    const std::string_view data = queue_.front();
    queue_.pop_front();
    lock.unlock();
    digest_.update(data);  // outside the lock: the caller's I/O goes on meanwhile
    lock.lock();
    hashed_ += data.size();
    changed_.notify_all();
  }
}

}  // namespace orthojit::runtime
