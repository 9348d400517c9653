// DeviceTimeEstimates: what a session's next task of a given name will cost in device time,
// learned from the device times measured when its earlier tasks of that name finished.
//
// The scheduler counts work in flight in device time (the BestEffort and Burstable bounds,
// pacing charged when a task is let go), but a task's device time is known only once it
// has run. So each session keeps, per task name (an op, a kernel, "upload"), an estimate:
// the first measurement as it is; then a rise is taken at once and a fall by a quarter of
// the difference per measurement. Underestimating lets more work in flight than a bound
// allows, which is what the bound protects Guaranteed work from; overestimating only holds
// back a little concurrency; hence the asymmetry. A name never measured gets the caller's
// fallback.
//
//   DeviceTimeEstimates estimates;
//   absl::Duration e = estimates.Estimate("matmul", absl::Milliseconds(1));  // 1 ms: unknown
//   estimates.Learn("matmul", absl::Microseconds(300));
//   e = estimates.Estimate("matmul", absl::Milliseconds(1));                 // 300 us
//
// Estimate and Learn cost one hash lookup of the name. At most kMaxNames names are kept;
// once full, new names are not learned (they keep the fallback), so a client cannot grow
// it without bound.
//
// Thread safety: none; the owner locks.
#ifndef GPUKIT_DAEMON_SCHEDULER_DEVICE_TIME_ESTIMATE_H_
#define GPUKIT_DAEMON_SCHEDULER_DEVICE_TIME_ESTIMATE_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gpukit {

class DeviceTimeEstimates {
 public:
  static constexpr int kMaxNames = 512;

  // The estimate for `name`, or `fallback` if none of its tasks has been measured.
  absl::Duration Estimate(absl::string_view name, absl::Duration fallback) const;
  // Folds in the device time a task of `name` used (negative counts as zero).
  void Learn(absl::string_view name, absl::Duration device_time);
  int size() const { return static_cast<int>(estimate_ns_.size()); }

 private:
  absl::flat_hash_map<std::string, int64_t> estimate_ns_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_DEVICE_TIME_ESTIMATE_H_
