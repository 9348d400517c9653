#include "daemon/scheduler/token_bucket.h"

#include <algorithm>
#include <cmath>

namespace gpukit {

TokenBucket::TokenBucket(double rate, absl::Duration burst, absl::Time now)
    : rate_(rate),
      burst_ns_(absl::ToInt64Nanoseconds(burst)),
      balance_ns_(static_cast<double>(burst_ns_)),
      last_(now) {}

void TokenBucket::Accrue(absl::Time now) {
  if (now <= last_) return;
  const double elapsed_ns = absl::ToDoubleNanoseconds(now - last_);
  balance_ns_ = std::min(static_cast<double>(burst_ns_), balance_ns_ + elapsed_ns * rate_);
  last_ = now;
}

bool TokenBucket::Ready(absl::Time now) {
  Accrue(now);
  return balance_ns_ > 0;
}

absl::Time TokenBucket::ReadyAt(absl::Time now) {
  Accrue(now);
  if (balance_ns_ > 0) return now;
  // The first whole nanosecond at which the debt is more than repaid: floor(debt / rate) + 1
  // (ceil + 1 would be a nanosecond late whenever debt / rate is not whole). Step past any
  // rounding in the division so that Ready() holds then, as Accrue computes it.
  auto wait_ns = static_cast<int64_t>(std::floor(-balance_ns_ / rate_)) + 1;
  while (balance_ns_ + static_cast<double>(wait_ns) * rate_ <= 0) ++wait_ns;
  return now + absl::Nanoseconds(wait_ns);
}

void TokenBucket::Charge(absl::Duration device_time) {
  balance_ns_ -= absl::ToDoubleNanoseconds(std::max(device_time, absl::ZeroDuration()));
}

void TokenBucket::Settle(absl::Duration charged, absl::Duration used) {
  const double delta_ns = absl::ToDoubleNanoseconds(std::max(charged, absl::ZeroDuration())) -
                          absl::ToDoubleNanoseconds(std::max(used, absl::ZeroDuration()));
  if (delta_ns < 0) {
    balance_ns_ += delta_ns;  // used more than charged: the rest is charged now
  } else {
    balance_ns_ = std::min(static_cast<double>(burst_ns_), balance_ns_ + delta_ns);
  }
}

void TokenBucket::LimitDebt(absl::Duration max_debt) {
  balance_ns_ = std::max(balance_ns_, -absl::ToDoubleNanoseconds(max_debt));
}

void TokenBucket::SetRate(double rate, absl::Time now) {
  Accrue(now);
  rate_ = rate;
}

int64_t TokenBucket::BalanceNs(absl::Time now) {
  Accrue(now);
  return static_cast<int64_t>(balance_ns_);
}

}  // namespace gpukit
