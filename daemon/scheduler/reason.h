// RejectReason: why the scheduler refused or ended a request, in a form machines can read.
//
// A refusal is an absl::Status (usually RESOURCE_EXHAUSTED) with the reason attached as a
// payload; the service layer copies it into the "gpukit-reason" trailer, clients read it
// back, and the scheduler counts refusals per partition and reason.
//
//   return WithReason(absl::ResourceExhaustedError("queue is full"), RejectReason::kQueueFull);
//   if (ReasonOf(status) == RejectReason::kQueueFull) ...
//
// Thread safety: pure functions.
#ifndef GPUKIT_DAEMON_SCHEDULER_REASON_H_
#define GPUKIT_DAEMON_SCHEDULER_REASON_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpukit {

// The values and names match the proto enum gpukit.v1.Reason.
enum class RejectReason {
  kNone = 0,
  kDeviceMemoryExhausted = 1,   // the device (after any reclaim) has no room
  kArrayTooLarge = 2,           // above limits.maxArraySize
  kTooManySessions = 3,         // daemon or partition at its max sessions
  kTooManyArrays = 4,           // session at max_arrays_per_session
  kPartitionQuotaExceeded = 5,  // the partition's memory quota or compute share is used up
  kSessionLimitExceeded = 6,    // the session's own memory limit
  kQueueFull = 7,               // the partition's queue is at max_queued_tasks
  kDeadlineExceeded = 8,        // the task's deadline passed while it waited
  kDeviceOvercommitted = 9,     // partitions would exceed the device's memory or compute
  kPartitionBusy = 10,          // delete refused: sessions are in the partition
  kCancelled = 11,              // cancelled by its client, an operator or session end
};
inline constexpr int kRejectReasonCount = 12;

// "REASON_DEVICE_MEMORY_EXHAUSTED", ... as in the proto.
absl::string_view RejectReasonName(RejectReason reason);

// Attaches `reason` to `status` (as a payload) and reads it back (kNone when absent).
absl::Status WithReason(absl::Status status, RejectReason reason);
RejectReason ReasonOf(const absl::Status& status);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_REASON_H_
