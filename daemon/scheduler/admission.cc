#include "daemon/scheduler/admission.h"

#include "absl/strings/str_cat.h"
#include "runtime/base/units.h"

namespace gpukit {

absl::Status Decision::ToStatus() const {
  if (admitted) return absl::OkStatus();
  return WithReason(absl::ResourceExhaustedError(message), reason);
}

Decision AdmitSession(const SessionSnapshot& s) {
  if (s.daemon_sessions >= s.max_sessions) {
    return {false, RejectReason::kTooManySessions,
            absl::StrCat("the daemon has ", s.daemon_sessions, " open sessions, its max_sessions")};
  }
  if (s.partition_max_sessions > 0 && s.partition_sessions >= s.partition_max_sessions) {
    return {false, RejectReason::kTooManySessions,
            absl::StrCat("the partition has ", s.partition_sessions,
                         " open sessions, its max sessions")};
  }
  const int64_t memory_request = s.resources.memory_request_bytes.value_or(0);
  const int64_t memory_free =
      s.partition_memory_quota_bytes - s.partition_memory_requested_bytes;
  if (memory_request > memory_free) {
    return {false, RejectReason::kPartitionQuotaExceeded,
            absl::StrCat("requests.memory = ", FormatBytes(memory_request),
                         " does not fit: the partition's quota of ",
                         FormatBytes(s.partition_memory_quota_bytes), " has ",
                         FormatBytes(std::max<int64_t>(0, memory_free)),
                         " not requested by its other sessions")};
  }
  const double compute_request = s.resources.compute_request.value_or(0);
  const double compute_free = s.partition_compute_share - s.partition_compute_requested;
  if (compute_request > compute_free + 1e-9) {
    return {false, RejectReason::kPartitionQuotaExceeded,
            absl::StrCat("requests.compute = ", compute_request,
                         " does not fit: the partition's compute share of ",
                         s.partition_compute_share, " has ", std::max(0.0, compute_free),
                         " not requested by its other sessions")};
  }
  return {};
}

AllocationDecision AdmitAllocation(const AllocationSnapshot& s) {
  if (s.bytes > s.max_array_bytes) {
    return {{false, RejectReason::kArrayTooLarge,
             absl::StrCat("array of ", s.bytes,
                          " bytes exceeds limits.maxArraySize = ", s.max_array_bytes)}};
  }
  if (s.session_limit_bytes && s.session_used_bytes + s.bytes > *s.session_limit_bytes) {
    return {{false, RejectReason::kSessionLimitExceeded,
             absl::StrCat("array of ", FormatBytes(s.bytes), " would take the session to ",
                          FormatBytes(s.session_used_bytes + s.bytes), ", above its limits.memory = ",
                          FormatBytes(*s.session_limit_bytes))}};
  }
  const int64_t partition_shortfall = s.partition_used_bytes + s.bytes - s.partition_quota_bytes;
  if (s.device_used_bytes + s.bytes > s.device_capacity_bytes) {
    AllocationDecision d{{false, RejectReason::kDeviceMemoryExhausted,
                          absl::StrCat("array of ", s.bytes, " bytes does not fit on the device: ",
                                       FormatBytes(s.device_used_bytes), " of ",
                                       FormatBytes(s.device_capacity_bytes), " are in use")},
                         s.device_used_bytes + s.bytes - s.device_capacity_bytes,
                         true};
    if (partition_shortfall > 0) {
      // The partition is over its own quota too: it gives back its own memory first (which
      // frees the device as well) before other partitions are asked for theirs.
      d.shortfall_bytes = partition_shortfall;
      d.shortfall_is_device_wide = false;
    }
    return d;
  }
  if (partition_shortfall > 0) {
    return {{false, RejectReason::kPartitionQuotaExceeded,
             absl::StrCat("array of ", FormatBytes(s.bytes), " does not fit in the partition: ",
                          FormatBytes(s.partition_used_bytes), " of its quota of ",
                          FormatBytes(s.partition_quota_bytes), " are in use")},
            partition_shortfall, false};
  }
  return {};
}

Decision AdmitTask(int queued, int max_queued, absl::string_view partition) {
  if (queued >= max_queued) {
    return {false, RejectReason::kQueueFull,
            absl::StrCat("partition \"", partition, "\" has ", queued,
                         " tasks queued, its max queued tasks")};
  }
  return {};
}

}  // namespace gpukit
