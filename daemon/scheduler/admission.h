// Admission: the rules that decide whether a session, an allocation or a task may proceed.
//
// Policy apart from mechanism: each rule is a pure function over a snapshot of the numbers
// it needs and returns a Decision with a machine-readable reason. The Scheduler takes the
// snapshot under its lock, asks the rule, and applies the answer.
//
//   AllocationSnapshot s{.bytes = 4096, .max_array_bytes = 2 << 30, ...};
//   AllocationDecision d = AdmitAllocation(s);
//   if (!d.decision.admitted && d.shortfall_bytes > 0) ... reclaim, then ask again
//
// Thread safety: pure functions over values.
#ifndef GPUKIT_DAEMON_SCHEDULER_ADMISSION_H_
#define GPUKIT_DAEMON_SCHEDULER_ADMISSION_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "daemon/scheduler/qos.h"
#include "daemon/scheduler/reason.h"

namespace gpukit {

// Daemon-wide limits (the configuration's "limits").
struct AdmissionLimits {
  int64_t max_array_bytes = int64_t{2} << 30;  // one array; default 2 GiB
  int max_sessions = 1024;
  int max_arrays_per_session = 65536;
};

struct Decision {
  bool admitted = true;
  RejectReason reason = RejectReason::kNone;
  std::string message;  // why, naming the limit and the value, when refused

  // OK, or RESOURCE_EXHAUSTED carrying the reason.
  absl::Status ToStatus() const;
};

// A session asking to open in a partition. `resources` has its requests defaulted.
struct SessionSnapshot {
  int daemon_sessions = 0;
  int max_sessions = 0;
  int partition_sessions = 0;
  int partition_max_sessions = 0;  // 0: no partition limit
  ResourceSpec resources;
  int64_t partition_memory_requested_bytes = 0;  // sum of the open sessions' requests
  int64_t partition_memory_quota_bytes = 0;
  double partition_compute_requested = 0;
  double partition_compute_share = 0;
};

// Sessions are admitted by their requests, as Kubernetes schedules pods: the requests of a
// partition's sessions sum to at most its quota and compute share, so every request can be
// honoured at once. Limits may overcommit; memory above a request can be reclaimed.
Decision AdmitSession(const SessionSnapshot& s);

// One allocation of `bytes` by a session.
struct AllocationSnapshot {
  int64_t bytes = 0;
  int64_t max_array_bytes = 0;
  int64_t session_used_bytes = 0;
  std::optional<int64_t> session_limit_bytes;
  int64_t partition_used_bytes = 0;
  int64_t partition_quota_bytes = 0;
  int64_t device_used_bytes = 0;
  int64_t device_capacity_bytes = 0;
};

struct AllocationDecision {
  Decision decision;
  // When refused for the partition's quota or the device's memory: the bytes that would
  // have to be reclaimed (from the partition, or from the device) for it to fit. 0 when no
  // reclaim can help (the array or the session's limit is the problem).
  int64_t shortfall_bytes = 0;
  bool shortfall_is_device_wide = false;
};

// Checks, in order: the array size limit, the session's memory limit, the device's
// capacity, the partition's quota. The device comes first so that a daemon with one
// partition over the whole device (the default) says DEVICE_MEMORY_EXHAUSTED when it is
// full, as a user expects. When both are full the shortfall is the partition's and not
// device-wide: a partition over its quota reclaims its own memory before other
// partitions' (the caller asks again and learns what the device still lacks).
AllocationDecision AdmitAllocation(const AllocationSnapshot& s);

// A task joining a partition's queue of `queued` waiting tasks.
Decision AdmitTask(int queued, int max_queued, absl::string_view partition);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_ADMISSION_H_
