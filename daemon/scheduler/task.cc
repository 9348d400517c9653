#include "daemon/scheduler/task.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpukit {

absl::string_view TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kPending:
      return "Pending";
    case TaskState::kQueued:
      return "Queued";
    case TaskState::kAdmitted:
      return "Admitted";
    case TaskState::kRunning:
      return "Running";
    case TaskState::kSucceeded:
      return "Succeeded";
    case TaskState::kFailed:
      return "Failed";
    case TaskState::kCancelled:
      return "Cancelled";
    case TaskState::kExpired:
      return "Expired";
  }
  return "Pending";
}

std::optional<TaskState> ParseTaskState(absl::string_view name) {
  for (int i = 0; i < kTaskStateCount; ++i) {
    const auto state = static_cast<TaskState>(i);
    if (absl::EqualsIgnoreCase(name, TaskStateName(state))) return state;
  }
  return std::nullopt;
}

absl::Status CheckTaskTransition(uint64_t task_id, TaskState from, TaskState to) {
  if (TaskTransitionAllowed(from, to)) return absl::OkStatus();
  std::string allowed;
  for (int i = 0; i < kTaskStateCount; ++i) {
    const auto next = static_cast<TaskState>(i);
    if (!TaskTransitionAllowed(from, next)) continue;
    absl::StrAppend(&allowed, allowed.empty() ? "" : ", ", TaskStateName(next));
  }
  return absl::InternalError(
      absl::StrCat("task ", task_id, ": ", TaskStateName(from), " -> ", TaskStateName(to),
                   " is not a transition of the task state machine (from ", TaskStateName(from),
                   ": ", allowed.empty() ? "none" : allowed, ")"));
}

absl::string_view TaskKindName(TaskKind kind) {
  switch (kind) {
    case TaskKind::kOp:
      return "op";
    case TaskKind::kKernel:
      return "kernel";
    case TaskKind::kTransfer:
      return "transfer";
  }
  return "op";
}

}  // namespace gpukit
