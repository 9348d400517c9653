// Partition: a named slice of one device, like a Kubernetes namespace with a ResourceQuota.
//
// A partition has a memory quota (bytes its sessions may hold at once), a compute share
// (the fraction of the device's time it is guaranteed when the device is contended), an
// optional bandwidth cap (the most device time it may take even when the device is idle),
// queue limits and a session limit. Partitions of one device may not promise more than the
// device has: their memory quotas and compute shares each sum to at most the device.
//
//   PartitionSpec spec{.name = "inference", .device_index = 0,
//                      .memory_quota_bytes = 8LL << 30, .compute_share = 0.5};
//   GPUKIT_RETURN_IF_ERROR(ValidatePartitionSpec(spec));
//   Decision d = AdmitPartition(spec, others_on_device0, device0_memory_bytes);
//
// Thread safety: pure functions over values.
#ifndef GPUKIT_DAEMON_SCHEDULER_PARTITION_H_
#define GPUKIT_DAEMON_SCHEDULER_PARTITION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/qos.h"

namespace gpukit {

inline constexpr absl::string_view kDefaultPartition = "default";

struct PartitionSpec {
  std::string name;  // 1-63 of [A-Za-z0-9._-]
  int device_index = 0;
  int64_t memory_quota_bytes = 0;  // > 0
  double compute_share = 0;        // (0, 1]
  double bandwidth_cap = 0;        // 0: none; else in [compute_share, 1]
  int max_queued_tasks = 1024;     // tasks waiting at once; further submits get QUEUE_FULL
  // Tasks admitted or running at once. Each op of a pipelined session holds one until its
  // completion is seen: the default holds 32 sessions at their base window (a quarter of
  // maxOpsInFlight, 32); ops past a base window take slots only while fewer than half
  // (rounded down) are taken, queued tasks counted (OpPipeline).
  int max_running_tasks = 1024;
  int max_sessions = 0;            // 0: only the daemon's max_sessions applies
  // Reclaimed arrays of this partition's sessions go to host memory and come back on next
  // use; without it, memory pressure refuses allocations instead.
  bool spill = false;
  // Whether its SMs are reserved: its streams run on a range of about compute_share of the
  // device's SMs that no other partition's streams use, idle while it is idle
  // (daemon/scheduler/sm_ranges.h). False: shared, on every SM no partition reserves.
  bool reserve_sms = false;
  // Requests and limits of sessions that open without any.
  ResourceSpec session_defaults;
};

// INVALID_ARGUMENT naming the field and value.
absl::Status ValidatePartitionSpec(const PartitionSpec& spec);

// The "default" partition that a configuration without one implies: what `others` (the
// partitions that exist beside it; those on device 0 count) leave of device 0's
// `device0_bytes` and of its time. nullopt when they leave no memory or almost no time (a
// share of at most 1e-6). Used at start-up (Core) and on a reload (PartitionReload).
std::optional<PartitionSpec> ImpliedDefaultPartition(absl::Span<const PartitionSpec> others,
                                                     int64_t device0_bytes);

// Which fields of a PartitionSpec an update sets (Scheduler::UpdatePartition). A partition's
// name and device never change, so they have no bit here.
struct PartitionFieldMask {
  bool memory_quota_bytes = false;
  bool compute_share = false;
  bool bandwidth_cap = false;
  bool max_queued_tasks = false;
  bool max_running_tasks = false;
  bool max_sessions = false;
  bool spill = false;
  bool reserve_sms = false;
  bool session_defaults = false;

  // Every field an update may set.
  static PartitionFieldMask All();
  bool empty() const;
  friend bool operator==(const PartitionFieldMask&, const PartitionFieldMask&) = default;
};

// The fields `mask` names, taken from `values`; the others (and name and device) from `base`.
PartitionSpec ApplyPartitionFields(PartitionSpec base, const PartitionFieldMask& mask,
                                   const PartitionSpec& values);

// The fields in which `to` differs from `from` (name and device aside).
PartitionFieldMask ChangedPartitionFields(const PartitionSpec& from, const PartitionSpec& to);

// Whether `spec` fits on its device beside `others` (the device's other partitions, not
// including an older version of `spec`): quotas and shares each sum to at most the device.
// Refused with kDeviceOvercommitted, naming what is left.
Decision AdmitPartition(const PartitionSpec& spec, absl::Span<const PartitionSpec> others,
                        int64_t device_memory_bytes);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_PARTITION_H_
