// Clock: the daemon's only source of time, injected so tests control it.
//
//   SystemClock clock;           // production
//   FakeClock fake;              // tests: fake.Advance(absl::Seconds(31));
//   absl::Time now = clock.Now();
//
// Thread safety: both implementations are thread-safe.
#ifndef GPUKIT_DAEMON_SCHEDULER_CLOCK_H_
#define GPUKIT_DAEMON_SCHEDULER_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gpukit {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

// Time that moves only when told to; starts at an arbitrary fixed instant.
class FakeClock final : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1'700'000'000);
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_CLOCK_H_
