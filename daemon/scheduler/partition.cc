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

std::optional<PartitionSpec> ImpliedDefaultPartition(absl::Span<const PartitionSpec> others,
                                                     int64_t device0_bytes) {
  int64_t bytes = device0_bytes;
  double share = 1.0;
  for (const PartitionSpec& p : others) {
    if (p.device_index != 0) continue;
    bytes -= p.memory_quota_bytes;
    share -= p.compute_share;
  }
  if (bytes <= 0 || share <= 1e-6) return std::nullopt;
  PartitionSpec d;
  d.name = std::string(kDefaultPartition);
  d.device_index = 0;
  d.memory_quota_bytes = bytes;
  d.compute_share = std::min(share, 1.0);
  return d;
}

PartitionFieldMask PartitionFieldMask::All() {
  return {.memory_quota_bytes = true,
          .compute_share = true,
          .bandwidth_cap = true,
          .max_queued_tasks = true,
          .max_running_tasks = true,
          .max_sessions = true,
          .spill = true,
          .reserve_sms = true,
          .session_defaults = true};
}

bool PartitionFieldMask::empty() const { return *this == PartitionFieldMask{}; }

PartitionSpec ApplyPartitionFields(PartitionSpec base, const PartitionFieldMask& mask,
                                   const PartitionSpec& values) {
  if (mask.memory_quota_bytes) base.memory_quota_bytes = values.memory_quota_bytes;
  if (mask.compute_share) base.compute_share = values.compute_share;
  if (mask.bandwidth_cap) base.bandwidth_cap = values.bandwidth_cap;
  if (mask.max_queued_tasks) base.max_queued_tasks = values.max_queued_tasks;
  if (mask.max_running_tasks) base.max_running_tasks = values.max_running_tasks;
  if (mask.max_sessions) base.max_sessions = values.max_sessions;
  if (mask.spill) base.spill = values.spill;
  if (mask.reserve_sms) base.reserve_sms = values.reserve_sms;
  if (mask.session_defaults) base.session_defaults = values.session_defaults;
  return base;
}

PartitionFieldMask ChangedPartitionFields(const PartitionSpec& from, const PartitionSpec& to) {
  return {.memory_quota_bytes = from.memory_quota_bytes != to.memory_quota_bytes,
          .compute_share = from.compute_share != to.compute_share,
          .bandwidth_cap = from.bandwidth_cap != to.bandwidth_cap,
          .max_queued_tasks = from.max_queued_tasks != to.max_queued_tasks,
          .max_running_tasks = from.max_running_tasks != to.max_running_tasks,
          .max_sessions = from.max_sessions != to.max_sessions,
          .spill = from.spill != to.spill,
          .reserve_sms = from.reserve_sms != to.reserve_sms,
          .session_defaults = !(from.session_defaults == to.session_defaults)};
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
