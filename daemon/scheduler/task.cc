#include "daemon/scheduler/task.h"

#include "absl/strings/match.h"

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
