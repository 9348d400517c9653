#include "daemon/scheduler/reason.h"

#include "absl/strings/cord.h"

namespace gpukit {
namespace {
constexpr absl::string_view kReasonPayloadUrl = "type.gpukit.dev/gpukit.v1.Reason";
}  // namespace

absl::string_view RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kNone:
      return "REASON_UNSPECIFIED";
    case RejectReason::kDeviceMemoryExhausted:
      return "REASON_DEVICE_MEMORY_EXHAUSTED";
    case RejectReason::kArrayTooLarge:
      return "REASON_ARRAY_TOO_LARGE";
    case RejectReason::kTooManySessions:
      return "REASON_TOO_MANY_SESSIONS";
    case RejectReason::kTooManyArrays:
      return "REASON_TOO_MANY_ARRAYS";
    case RejectReason::kPartitionQuotaExceeded:
      return "REASON_PARTITION_QUOTA_EXCEEDED";
    case RejectReason::kSessionLimitExceeded:
      return "REASON_SESSION_LIMIT_EXCEEDED";
    case RejectReason::kQueueFull:
      return "REASON_QUEUE_FULL";
    case RejectReason::kDeadlineExceeded:
      return "REASON_DEADLINE_EXCEEDED";
    case RejectReason::kDeviceOvercommitted:
      return "REASON_DEVICE_OVERCOMMITTED";
    case RejectReason::kPartitionBusy:
      return "REASON_PARTITION_BUSY";
    case RejectReason::kCancelled:
      return "REASON_CANCELLED";
  }
  return "REASON_UNSPECIFIED";
}

absl::Status WithReason(absl::Status status, RejectReason reason) {
  status.SetPayload(kReasonPayloadUrl, absl::Cord(RejectReasonName(reason)));
  return status;
}

RejectReason ReasonOf(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kReasonPayloadUrl);
  if (!payload.has_value()) return RejectReason::kNone;
  for (int i = 1; i < kRejectReasonCount; ++i) {
    const auto reason = static_cast<RejectReason>(i);
    if (*payload == RejectReasonName(reason)) return reason;
  }
  return RejectReason::kNone;
}

}  // namespace gpukit
