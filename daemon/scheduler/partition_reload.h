// PartitionReload: how the running partitions become those of a reloaded configuration file
// (SIGHUP), as a plan the daemon then applies; the policy apart from its mechanism
// (daemon/config_reload.h applies it through the core).
//
// The file is the truth for the partitions it names, and for those the previous file named:
//   - a partition of the new file that is not running is created;
//   - a running one whose spec differs is updated (memory, compute, bandwidth, queue and
//     session limits, spill, session defaults); its sessions stay, and a quota below their
//     use takes nothing away (Scheduler::UpdatePartition);
//   - one the previous file named and the new one does not is deleted if it has no
//     sessions, else kept as it is, with the reason;
//   - one made through the Admin API (named by neither file) is left alone;
//   - a partition whose device changes is deleted and created again if it has no sessions,
//     else kept on its old device, with the reason.
// Without a partition named "default" in the new file, "default" gets what the other
// partitions that will exist leave of device 0 (as at start-up, core.h), and goes (as a
// removed one does) when they leave nothing.
//
// The plan is refused as a whole (INVALID_ARGUMENT naming the device, the partitions and
// the numbers) when the partitions that will exist do not fit their devices, so a reload
// applies all of it or nothing. Applying it in order (deletions, then every update lowered
// to the smaller of its old and new memory and compute, then the updates' full specs, then
// creations) never needs more of a device than the end state or the running state does, so
// no step is refused for a transient overcommit.
//
//   GPUKIT_ASSIGN_OR_RETURN(PartitionReloadPlan plan,
//       PlanPartitionReload(scheduler.ListPartitions(), previous_names, file_partitions,
//                           devices));
//
// Thread safety: pure functions over values.
#ifndef GPUKIT_DAEMON_SCHEDULER_PARTITION_RELOAD_H_
#define GPUKIT_DAEMON_SCHEDULER_PARTITION_RELOAD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/scheduler/partition.h"
#include "daemon/scheduler/scheduler.h"

namespace gpukit {

struct PartitionUpdate {
  PartitionSpec from;
  PartitionSpec to;
  // `to` with memory and compute lowered to the smaller of `from`'s and `to`'s (and a
  // bandwidth cap no lower than that compute), applied before any update's `to`.
  PartitionSpec lowered;
  std::vector<std::string> changes;  // "memory 1 GiB -> 2 GiB", one per field that changed
};

struct PartitionKept {
  std::string name;
  std::string reason;  // "removed from the file but has 2 session(s)"
};

struct PartitionReloadPlan {
  std::vector<std::string> deletions;  // names, each with no sessions when planned
  std::vector<PartitionUpdate> updates;
  std::vector<PartitionSpec> creations;
  std::vector<PartitionKept> kept;
  bool empty() const {
    return deletions.empty() && updates.empty() && creations.empty() && kept.empty();
  }
};

// `running`: every partition now (Scheduler::ListPartitions: specs and session counts).
// `previous_file`: the names the previous file gave (with "default" when it was implied).
// `file`: the new file's partitions, each already valid (ValidatePartitionSpec), in order.
// `devices`: every device. INVALID_ARGUMENT when two partitions share a name, one names a
// device that does not exist, or the partitions that will exist do not fit their devices.
absl::StatusOr<PartitionReloadPlan> PlanPartitionReload(absl::Span<const PartitionStatus> running,
                                                        absl::Span<const std::string> previous_file,
                                                        absl::Span<const PartitionSpec> file,
                                                        absl::Span<const DeviceCapacity> devices);

// What differs from `from` to `to`, one entry per field ("compute 0.5 -> 0.25"); empty
// when nothing does. Names the fields as the config file does.
std::vector<std::string> DescribePartitionChanges(const PartitionSpec& from,
                                                  const PartitionSpec& to);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_PARTITION_RELOAD_H_
