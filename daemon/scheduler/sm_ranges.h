// PlaceSms: which fraction of its device's SMs each partition's streams may run on, the
// hardware means behind a partition's compute share (issue 16). Pure arithmetic over the
// partitions' specs, shared by the scheduler (which charges a task the SMs it could use) and
// the core (which makes streams there: daemon/core/sm_placement.h).
//
// A partition's SMs are either shared (PartitionSpec::reserve_sms false, the default) or
// reserved. Reserved SMs belong to their partition alone: no other partition's stream runs
// there, and they idle while it is idle, so its work never waits for SMs behind another
// partition's kernels. PlaceSms lays a device's partitions out in plain steps:
//   1. With no reserved partition on the device, nothing is placed: every stream may use
//      every SM, as gpukitd always did (the default, so an unconfigured gpukitd is unchanged).
//   2. Reserved partitions, in name order, take consecutive ranges from the start, each
//      compute_share of the SMs wide. Shares are scaled by 1 / total when the shares of all
//      the device's partitions sum above 1 (admission allows a rounding's excess), so that
//      the ranges fit and leave room for step 3.
//   3. Shared partitions all run on what the reserved ones leave: the range from the last
//      reserved one's end to the device's end, together.
// The device rounds each range's boundaries to whole SM groups (runtime/sm_layout.h).
//
//   absl::flat_hash_map<std::string, SmPlacement> placed = PlaceSms(partitions_on_device0);
//   double fraction = placed["team-a"].share;  // of the device's SMs
//
// Thread safety: pure functions over values.
#ifndef GPUKIT_DAEMON_SCHEDULER_SM_RANGES_H_
#define GPUKIT_DAEMON_SCHEDULER_SM_RANGES_H_

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "daemon/scheduler/partition.h"

namespace gpukit {

// Where a partition's streams run: the fractions [first, first + share) of its device's SMs,
// or, without `first`, every SM (share 1).
struct SmPlacement {
  std::optional<double> first;
  double share = 1;
  friend bool operator==(const SmPlacement&, const SmPlacement&) = default;
};

// The placement of every partition in `partitions`, which are those of one device (see the
// file comment). Partitions missing from the answer (none when the input is one device's)
// run on every SM. O(partitions log partitions).
absl::flat_hash_map<std::string, SmPlacement> PlaceSms(absl::Span<const PartitionSpec> partitions);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_SM_RANGES_H_
