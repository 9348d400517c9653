// The stream options of a partition's streams: where they run (PlaceSms,
// daemon/scheduler/sm_ranges.h, says which fraction of the SMs) and at which priority.
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

#include "daemon/scheduler/qos.h"
#include "daemon/scheduler/sm_ranges.h"
#include "runtime/device.h"

namespace gpukit {

// The options a stream of class `qos` is made with in `placement`: the class's priority
// (PriorityOf), the placement, and for BestEffort `best_effort_sm_share` (in (0, 1]) of it.
StreamOptions StreamOptionsFor(const SmPlacement& placement, QosClass qos,
                               double best_effort_sm_share);

// The priority a QoS class's streams are created with.
StreamPriority PriorityOf(QosClass qos);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CORE_SM_PLACEMENT_H_
