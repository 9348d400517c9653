#include "daemon/service/worker_pool.h"

#include <algorithm>
#include <utility>

#include "runtime/base/thread_name.h"

namespace gpukit::service {

WorkerPool::WorkerPool(int max_threads, absl::Duration idle_timeout)
    : max_threads_(std::max(max_threads, 1)), idle_timeout_(idle_timeout) {}

WorkerPool::~WorkerPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  for (std::thread& thread : threads) thread.join();
  JoinEnded();
}

void WorkerPool::Schedule(std::function<void()> work) {
  {
    absl::MutexLock lock(&mu_);
    PushLocked(std::move(work));
  }
  JoinEnded();
}

bool WorkerPool::TrySchedule(std::function<void()> work) {
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(queue_.size()) >= idle_ &&
        static_cast<int>(threads_.size()) >= max_threads_) {
      return false;
    }
    PushLocked(std::move(work));
  }
  JoinEnded();
  return true;
}

void WorkerPool::PushLocked(std::function<void()> work) {
  queue_.push_back(std::move(work));
  // Idle threads take the queued work first; a new thread only for what they cannot.
  if (static_cast<int>(queue_.size()) > idle_ &&
      static_cast<int>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this] {
      NameThisThread("gk-worker");
      Loop();
    });
  }
}

int WorkerPool::threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void WorkerPool::JoinEnded() {
  std::vector<std::thread> ended;
  {
    absl::MutexLock lock(&mu_);
    ended.swap(ended_);
  }
  for (std::thread& thread : ended) thread.join();
}

void WorkerPool::Loop() {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
  while (true) {
    ++idle_;
    const bool woken = mu_.AwaitWithTimeout(absl::Condition(&ready), idle_timeout_);
    --idle_;
    if (queue_.empty()) {
      if (stopping_) return;  // the destructor joins this thread
      if (!woken) {
        // Idle too long: hand this thread's handle to whoever joins next, and end.
        auto self = std::find_if(threads_.begin(), threads_.end(), [](const std::thread& t) {
          return t.get_id() == std::this_thread::get_id();
        });
        if (self != threads_.end()) {
          ended_.push_back(std::move(*self));
          threads_.erase(self);
          return;
        }
      }
      continue;
    }
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    work();
    work = nullptr;  // drops what it holds before the lock is taken again
    mu_.Lock();
  }
}

}  // namespace gpukit::service
