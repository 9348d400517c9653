// Task: one unit of device work (an op, a kernel launch, a transfer) as the scheduler
// tracks it, and its state machine:
//
//   Pending -> Queued -> Admitted -> Running -> Succeeded | Failed
//                 |          |
//                 |          +--> Succeeded | Failed   (the request ended before its work ran)
//                 +----------+--> Cancelled
//                 +--> Expired   (its deadline passed in the queue)
//
// TaskTransitionAllowed below is the one list of these edges; Scheduler::TransitionLocked,
// the only code that changes a task's state, refuses any other change with INTERNAL. Every
// state change is stamped with the scheduler's clock.
//
//   if (!TaskTransitionAllowed(state, TaskState::kRunning)) ...  // not Admitted: refuse Start
//
// Thread safety: plain values and pure functions.
#ifndef GPUKIT_DAEMON_SCHEDULER_TASK_H_
#define GPUKIT_DAEMON_SCHEDULER_TASK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/scheduler/qos.h"

namespace gpukit {

enum class TaskState {
  // Submit is deciding; lasts only under the scheduler's lock. A refused submit never
  // becomes a task, so no one outside the scheduler sees this state.
  kPending,
  // Waiting in its partition's queue (or about to skip it: Submit admits a task at once
  // when nothing waits ahead of it and it may run). Its deadline applies.
  kQueued,
  // Holds one of its partition's running slots and its charge in pacing and the device's
  // in-flight sums, while the request pins its inputs and reserves its output. Its deadline
  // no longer applies.
  kAdmitted,
  // Its work is on the device (Start). It can no longer be cancelled.
  kRunning,
  // Terminal: Finish with an OK status.
  kSucceeded,
  // Terminal: Finish with an error, from Running or from Admitted (the request failed
  // before the work ran).
  kFailed,
  // Terminal: cancelled while Queued or Admitted, by its client, an operator or the end of
  // its session.
  kCancelled,
  // Terminal: its deadline passed while it was Queued.
  kExpired,
};
inline constexpr int kTaskStateCount = 8;

// The state machine's edges, the one list of them: whether a task in state `from` may move
// to `to`. A terminal state allows nothing; no state allows itself.
constexpr bool TaskTransitionAllowed(TaskState from, TaskState to) {
  switch (from) {
    case TaskState::kPending:
      return to == TaskState::kQueued;
    case TaskState::kQueued:
      return to == TaskState::kAdmitted || to == TaskState::kCancelled || to == TaskState::kExpired;
    case TaskState::kAdmitted:
      return to == TaskState::kRunning || to == TaskState::kSucceeded || to == TaskState::kFailed ||
             to == TaskState::kCancelled;
    case TaskState::kRunning:
      return to == TaskState::kSucceeded || to == TaskState::kFailed;
    case TaskState::kSucceeded:
    case TaskState::kFailed:
    case TaskState::kCancelled:
    case TaskState::kExpired:
      return false;
  }
  return false;
}

enum class TaskKind { kOp, kKernel, kTransfer };

// "Pending", "Queued", ..., "Expired".
absl::string_view TaskStateName(TaskState state);
// Case-insensitive inverse of TaskStateName.
std::optional<TaskState> ParseTaskState(absl::string_view name);
// "op", "kernel", "transfer".
absl::string_view TaskKindName(TaskKind kind);

// OK if TaskTransitionAllowed(from, to); otherwise INTERNAL naming both states and the
// states `from` allows: "task 7: Cancelled -> Succeeded is not a transition of the task state
// machine (from Cancelled: none)". An illegal transition is a bug in the scheduler.
absl::Status CheckTaskTransition(uint64_t task_id, TaskState from, TaskState to);

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
