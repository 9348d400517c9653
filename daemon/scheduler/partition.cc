#include "daemon/scheduler/partition.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/names.h"
#include "runtime/base/units.h"

namespace gpukit {
namespace {

// Shares are summed in floating point; allow for rounding (0.1 + 0.2 + 0.7 is 1.0000000000000002).
constexpr double kShareSlack = 1e-9;

}  // namespace

absl::Status ValidatePartitionSpec(const PartitionSpec& spec) {
  if (!IsValidName(spec.name, 63)) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition name \"", absl::CHexEscape(spec.name.substr(0, 80)),
                     "\" must be 1 to 63 characters of [A-Za-z0-9._-]"));
  }
  if (spec.device_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device = ", spec.device_index, " must be >= 0"));
  }
  if (spec.memory_quota_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory quota = ", spec.memory_quota_bytes, " bytes must be > 0"));
  }
  if (!(spec.compute_share > 0.0 && spec.compute_share <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("compute share = ", spec.compute_share, " must be in (0, 1]"));
  }
  if (spec.bandwidth_cap != 0.0 &&
      !(spec.bandwidth_cap >= spec.compute_share && spec.bandwidth_cap <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bandwidth cap = ", spec.bandwidth_cap,
                     " must be 0 (none) or in [compute share = ", spec.compute_share, ", 1]"));
  }
  if (spec.max_queued_tasks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max queued tasks = ", spec.max_queued_tasks, " must be >= 1"));
  }
  if (spec.max_running_tasks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max running tasks = ", spec.max_running_tasks, " must be >= 1"));
  }
  if (spec.max_sessions < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max sessions = ", spec.max_sessions, " must be >= 0 (0: no limit)"));
  }
  if (absl::Status s = ValidateResourceSpec(spec.session_defaults); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("session defaults: ", s.message()));
  }
  return absl::OkStatus();
}

Decision AdmitPartition(const PartitionSpec& spec, absl::Span<const PartitionSpec> others,
                        int64_t device_memory_bytes) {
  int64_t other_bytes = 0;
  double other_share = 0;
  for (const PartitionSpec& other : others) {
    if (other.device_index != spec.device_index) continue;
    other_bytes += other.memory_quota_bytes;
    other_share += other.compute_share;
  }
  const int64_t free_bytes = std::max<int64_t>(0, device_memory_bytes - other_bytes);
  if (spec.memory_quota_bytes > free_bytes) {
    return {false, RejectReason::kDeviceOvercommitted,
            absl::StrCat("partition \"", spec.name, "\" asks for a memory quota of ",
                         FormatBytes(spec.memory_quota_bytes), " but device ", spec.device_index,
                         " has ", FormatBytes(free_bytes), " not promised to other partitions")};
  }
  const double free_share = std::max(0.0, 1.0 - other_share);
  if (spec.compute_share > free_share + kShareSlack) {
    return {false, RejectReason::kDeviceOvercommitted,
            absl::StrCat("partition \"", spec.name, "\" asks for a compute share of ",
                         spec.compute_share, " but device ", spec.device_index, " has ", free_share,
                         " not promised to other partitions")};
  }
  return {};
}

}  // namespace gpukit
