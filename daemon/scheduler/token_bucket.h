// TokenBucket: pacing in device time.
//
// Tokens are nanoseconds of device time. They accrue at `rate` device-seconds per second of
// wall time (a partition's compute share or bandwidth cap) up to `burst`. Work is charged
// when it is let go, with its estimated device time, which may drive the balance negative;
// once it has run, Settle replaces the estimate with the device time it used. Work may start
// while the balance is positive, so a partition that ran over its rate waits until the
// debt is repaid: over any window its device time stays within rate * window + burst
// + one task (+ the estimates' errors of the work still running).
//
//   TokenBucket bucket(/*rate=*/0.25, absl::Milliseconds(50), clock.Now());
//   if (bucket.Ready(clock.Now())) {
//     bucket.Charge(estimate); ...run...; bucket.Settle(estimate, device_time);
//   } else {
//     wake_at = bucket.ReadyAt(clock.Now());
//   }
//
// Thread safety: none; the owner locks.
#ifndef GPUKIT_DAEMON_SCHEDULER_TOKEN_BUCKET_H_
#define GPUKIT_DAEMON_SCHEDULER_TOKEN_BUCKET_H_

#include <cstdint>

#include "absl/time/time.h"

namespace gpukit {

class TokenBucket {
 public:
  // `rate` in (0, 1]; starts full.
  TokenBucket(double rate, absl::Duration burst, absl::Time now);

  bool Ready(absl::Time now);
  // When the balance turns positive (now, if it is).
  absl::Time ReadyAt(absl::Time now);
  // Both apply to the balance as of the last accrual: accrue (BalanceNs(now)) first.
  void Charge(absl::Duration device_time);
  // Replaces an earlier charge of `charged` with `used`: charges the difference, or gives
  // it back up to the burst. Settle(charged, 0) refunds work that never ran.
  void Settle(absl::Duration charged, absl::Duration used);
  void SetRate(double rate, absl::Time now);
  // Forgives debt beyond `max_debt`: the balance becomes at least -max_debt. Applies to the
  // balance as of the last accrual, like Charge.
  void LimitDebt(absl::Duration max_debt);

  double rate() const { return rate_; }
  // Balance in nanoseconds after accruing up to `now`; negative while in debt.
  int64_t BalanceNs(absl::Time now);

 private:
  void Accrue(absl::Time now);

  double rate_;
  int64_t burst_ns_;
  double balance_ns_;
  absl::Time last_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_TOKEN_BUCKET_H_
