// SmPlacement: which SMs of its device each partition's streams may run on, the hardware
// means behind a partition's compute share (issue 16).
//
// A partition's SMs are either shared (PartitionSpec::reserve_sms false, the default) or
// reserved. Reserved SMs belong to their partition alone: no other partition's stream runs
// there, and they idle while it is idle, so its work never waits for SMs behind another
// partition's kernels. PlaceSms lays a device's partitions out over its SM groups
// (runtime/sm_layout.h) in plain steps:
//   1. With no reserved partition on the device, nothing is placed: every stream may use
//      every SM, as gpukitd always did (the default, so an unconfigured gpukitd is unchanged).
//   2. Reserved partitions, in name order, take consecutive ranges from the device's first
//      SM group on, each compute_share of the groups wide. Shares are scaled by 1 / total
//      when the shares of all the device's partitions sum above 1 (admission allows a
//      rounding's excess), so that the ranges fit and leave room for step 3.
//   3. Shared partitions all run on what the reserved ones leave: the range from the last
//      reserved one's end to the device's end, together.
// The device rounds each range's boundaries to whole groups (PlaceSmGroups): neighbours never
// share a group, and a range below half a group still gets one (then it may share it with a
// neighbour). SMs of no range (reserved shares summing below 1 with no shared partition)
// run only gpukitd's own copies.
//
// Within a placement, QoS classes keep their stream priorities, and BestEffort streams keep
// `best_effort_sm_share`: they take that share of the placement, from its start.
//
//   absl::flat_hash_map<std::string, SmPlacement> placed = PlaceSms(partitions_on_device0);
//   StreamOptions options = StreamOptionsFor(placed["team-a"], QosClass::kBurstable, 0.5);
//
// Thread safety: pure functions over values.
#ifndef GPUKIT_DAEMON_CORE_SM_PLACEMENT_H_
#define GPUKIT_DAEMON_CORE_SM_PLACEMENT_H_

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "daemon/scheduler/partition.h"
#include "daemon/scheduler/qos.h"
#include "runtime/device.h"

namespace gpukit {

// Where a partition's streams run: the fractions [first, first + share) of its device's SM
// groups, or, without `first`, every SM.
struct SmPlacement {
  std::optional<double> first;
  double share = 1;
  friend bool operator==(const SmPlacement&, const SmPlacement&) = default;
};

// The placement of every partition in `partitions`, which are those of one device (see the
// file comment). Partitions missing from the answer (none when the input is one device's)
// run on every SM. O(partitions log partitions).
absl::flat_hash_map<std::string, SmPlacement> PlaceSms(absl::Span<const PartitionSpec> partitions);

// The options a stream of class `qos` is made with in `placement`: the class's priority
// (PriorityOf), the placement, and for BestEffort `best_effort_sm_share` (in (0, 1]) of it.
StreamOptions StreamOptionsFor(const SmPlacement& placement, QosClass qos,
                               double best_effort_sm_share);

// The priority a QoS class's streams are created with.
StreamPriority PriorityOf(QosClass qos);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CORE_SM_PLACEMENT_H_
