#include "daemon/scheduler/device_time_estimate.h"

#include <algorithm>

namespace gpukit {

absl::Duration DeviceTimeEstimates::Estimate(absl::string_view name,
                                             absl::Duration fallback) const {
  auto it = estimate_ns_.find(name);
  return it == estimate_ns_.end() ? fallback : absl::Nanoseconds(it->second);
}

void DeviceTimeEstimates::Learn(absl::string_view name, absl::Duration device_time) {
  const int64_t measured_ns = std::max<int64_t>(absl::ToInt64Nanoseconds(device_time), 0);
  auto it = estimate_ns_.find(name);
  if (it == estimate_ns_.end()) {
    if (size() < kMaxNames) estimate_ns_.emplace(std::string(name), measured_ns);
    return;
  }
  int64_t& estimate_ns = it->second;
  if (measured_ns >= estimate_ns) {
    estimate_ns = measured_ns;
  } else {
    estimate_ns -= (estimate_ns - measured_ns + 3) / 4;  // rounded up: it reaches the value
  }
}

}  // namespace gpukit
