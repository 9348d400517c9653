// Clock: the daemon's only source of time, injected so tests control it: what time it is, and
// waiting until a time (or until something else happens first).
//
//   SystemClock clock;           // production
//   FakeClock fake;              // tests: fake.Advance(absl::Seconds(31));
//   absl::Time now = clock.Now();
//   // A loop that runs every second until `stopping_` (guarded by mu_) is set:
//   while (!clock.AwaitUntil(mu_, absl::Condition(&stopping_), clock.Now() + absl::Seconds(1)))
//     Tick();
//
// Thread safety: both implementations are thread-safe.
#ifndef GPUKIT_DAEMON_SCHEDULER_CLOCK_H_
#define GPUKIT_DAEMON_SCHEDULER_CLOCK_H_

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gpukit {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // Blocks until `cond` holds or Now() reaches `deadline`, whichever comes first, and returns
  // whether `cond` held. `mu` guards what `cond` reads: the caller must not hold it (it is
  // held while `cond` is evaluated and released on return), and whoever makes `cond` true does
  // so under `mu`, which wakes the wait. A deadline already past returns at once.
  virtual bool AwaitUntil(absl::Mutex& mu, const absl::Condition& cond,
                          absl::Time deadline) const = 0;
};

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool AwaitUntil(absl::Mutex& mu, const absl::Condition& cond,
                  absl::Time deadline) const override {
    absl::MutexLock lock(&mu);
    return mu.AwaitWithDeadline(cond, deadline);
  }
};

// Time that moves only when told to; starts at an arbitrary fixed instant. A wait ends when
// Advance reaches its deadline (or its condition holds); no real time passes for it.
class FakeClock final : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  // Moves time on by `d` and wakes the waits whose deadline it reaches.
  void Advance(absl::Duration d) {
    absl::MutexLock waiters_lock(&waiters_mu_);
    absl::Time now;
    {
      absl::MutexLock lock(&mu_);
      now_ += d;
      now = now_;
    }
    // Writing under the waiter's mutex makes its Await evaluate the condition again.
    for (Waiter* waiter : waiters_) {
      absl::MutexLock lock(waiter->mu);
      if (now >= waiter->deadline) waiter->time_up = true;
    }
  }
  bool AwaitUntil(absl::Mutex& mu, const absl::Condition& cond,
                  absl::Time deadline) const override {
    Waiter waiter{&mu, deadline, /*time_up=*/false};
    {
      absl::MutexLock lock(&waiters_mu_);
      waiter.time_up = Now() >= deadline;  // not yet seen by Advance: no lock needed
      waiters_.push_back(&waiter);
    }
    bool met = false;
    {
      absl::MutexLock lock(&mu);
      const std::pair<const absl::Condition*, const Waiter*> state{&cond, &waiter};
      mu.Await(absl::Condition(
          +[](const std::pair<const absl::Condition*, const Waiter*>* s) {
            return s->first->Eval() || s->second->time_up;
          },
          &state));
      met = cond.Eval();
    }
    absl::MutexLock lock(&waiters_mu_);
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &waiter));
    return met;
  }

 private:
  // One AwaitUntil in progress, on its caller's stack.
  struct Waiter {
    absl::Mutex* mu;
    absl::Time deadline;
    bool time_up;  // guarded by *mu once listed in waiters_
  };

  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1'700'000'000);
  // Taken before mu_ and before a waiter's mutex; a waiter holds none of them when it takes
  // this one, so Advance can wake waiters without a lock-order cycle.
  mutable absl::Mutex waiters_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable std::vector<Waiter*> waiters_ ABSL_GUARDED_BY(waiters_mu_);
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_CLOCK_H_
