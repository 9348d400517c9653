// Task: one unit of device work (an op, a kernel launch, a transfer) as the scheduler
// tracks it, and its state machine:
//
//   Pending -> Queued -> Admitted -> Running -> Succeeded | Failed
//                 |          |
//                 +----------+--> Cancelled | Expired   (Expired: its deadline passed in the queue)
//
// Pending lasts only while Submit decides; a refused submit never becomes a task. Every
// state change is stamped with the scheduler's clock.
//
// Thread safety: plain values.
#ifndef GPUKIT_DAEMON_SCHEDULER_TASK_H_
#define GPUKIT_DAEMON_SCHEDULER_TASK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/scheduler/qos.h"

namespace gpukit {

enum class TaskState { kPending, kQueued, kAdmitted, kRunning, kSucceeded, kFailed, kCancelled,
                       kExpired };
inline constexpr int kTaskStateCount = 8;

enum class TaskKind { kOp, kKernel, kTransfer };

// "Pending", "Queued", ..., "Expired".
absl::string_view TaskStateName(TaskState state);
// Case-insensitive inverse of TaskStateName.
std::optional<TaskState> ParseTaskState(absl::string_view name);
// "op", "kernel", "transfer".
absl::string_view TaskKindName(TaskKind kind);

inline bool IsTerminal(TaskState s) {
  return s == TaskState::kSucceeded || s == TaskState::kFailed || s == TaskState::kCancelled ||
         s == TaskState::kExpired;
}

// What a client asks to run.
struct TaskRequest {
  TaskKind kind = TaskKind::kOp;
  std::string name;  // op or kernel name, "upload", "download"
  // Higher runs first among tasks of the same QoS class; clamped to [-100, 100].
  int priority = 0;
  // How long the task may wait in the queue, from Submit; past it, it expires. A duration,
  // not a time: the scheduler resolves it against its own clock (Submit), so a caller
  // cannot hand it a time read from another one. Zero or less: it expires at once, without
  // being admitted (a call whose deadline has passed). Infinite: it waits as long as it must.
  absl::Duration queue_timeout = absl::InfiniteDuration();
};

// A task as operators see it.
struct TaskInfo {
  uint64_t id = 0;
  std::string session_id;
  std::string partition;
  QosClass qos = QosClass::kBestEffort;
  TaskKind kind = TaskKind::kOp;
  std::string name;
  int priority = 0;
  TaskState state = TaskState::kPending;
  absl::Time submitted;                        // entered Pending
  absl::Time admitted = absl::InfinitePast();  // unset until the state is reached
  absl::Time started = absl::InfinitePast();
  absl::Time finished = absl::InfinitePast();
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration device_time;  // measured, once finished
  std::string error;           // Failed, Cancelled, Expired: why
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_TASK_H_
