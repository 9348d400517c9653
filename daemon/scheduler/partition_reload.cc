#include "daemon/scheduler/partition_reload.h"

#include <algorithm>
#include <map>
#include <optional>
#include <type_traits>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/units.h"

namespace gpukit {
namespace {

std::string Optional(const std::optional<int64_t>& bytes) {
  return bytes.has_value() ? FormatBytes(*bytes) : std::string("none");
}
std::string Optional(const std::optional<double>& share) {
  return share.has_value() ? absl::StrCat(*share) : std::string("none");
}

template <typename T>
void Compare(std::vector<std::string>& changes, absl::string_view field, const T& from,
             const T& to) {
  if (from == to) return;
  if constexpr (std::is_same_v<T, std::optional<int64_t>> ||
                std::is_same_v<T, std::optional<double>>) {
    changes.push_back(absl::StrCat(field, " ", Optional(from), " -> ", Optional(to)));
  } else if constexpr (std::is_same_v<T, bool>) {
    changes.push_back(
        absl::StrCat(field, " ", from ? "true" : "false", " -> ", to ? "true" : "false"));
  } else {
    changes.push_back(absl::StrCat(field, " ", from, " -> ", to));
  }
}

std::string KeptReason(const PartitionStatus& running, absl::string_view what) {
  return absl::StrCat(what, " but has ", running.sessions,
                      " session(s); kept as it is until they close");
}

}  // namespace

std::vector<std::string> DescribePartitionChanges(const PartitionSpec& from,
                                                  const PartitionSpec& to) {
  std::vector<std::string> changes;
  Compare(changes, "device", from.device_index, to.device_index);
  if (from.memory_quota_bytes != to.memory_quota_bytes) {
    changes.push_back(absl::StrCat("memory ", FormatBytes(from.memory_quota_bytes), " -> ",
                                   FormatBytes(to.memory_quota_bytes)));
  }
  Compare(changes, "compute", from.compute_share, to.compute_share);
  Compare(changes, "bandwidth", from.bandwidth_cap, to.bandwidth_cap);
  Compare(changes, "maxQueuedTasks", from.max_queued_tasks, to.max_queued_tasks);
  Compare(changes, "maxRunningTasks", from.max_running_tasks, to.max_running_tasks);
  Compare(changes, "maxSessions", from.max_sessions, to.max_sessions);
  Compare(changes, "spill", from.spill, to.spill);
  Compare(changes, "reserveSms", from.reserve_sms, to.reserve_sms);
  const ResourceSpec& a = from.session_defaults;
  const ResourceSpec& b = to.session_defaults;
  Compare(changes, "defaultRequests.memory", a.memory_request_bytes, b.memory_request_bytes);
  Compare(changes, "defaultLimits.memory", a.memory_limit_bytes, b.memory_limit_bytes);
  Compare(changes, "defaultRequests.compute", a.compute_request, b.compute_request);
  Compare(changes, "defaultLimits.compute", a.compute_limit, b.compute_limit);
  return changes;
}

absl::StatusOr<PartitionReloadPlan> PlanPartitionReload(absl::Span<const PartitionStatus> running,
                                                        absl::Span<const std::string> previous_file,
                                                        absl::Span<const PartitionSpec> file,
                                                        absl::Span<const DeviceCapacity> devices) {
  absl::flat_hash_map<std::string, const PartitionStatus*> now;
  for (const PartitionStatus& p : running) now[p.spec.name] = &p;
  const absl::flat_hash_set<std::string> previous(previous_file.begin(), previous_file.end());
  auto device_bytes = [&](int index) -> std::optional<int64_t> {
    for (const DeviceCapacity& d : devices) {
      if (d.index == index) return d.memory_bytes;
    }
    return std::nullopt;
  };

  PartitionReloadPlan plan;
  // The partitions that will exist, by name (sorted, so messages come in a stable order).
  std::map<std::string, PartitionSpec> after;
  absl::flat_hash_set<std::string> in_file;
  auto remove = [&](const PartitionStatus& p, absl::string_view what) {
    if (p.sessions == 0) {
      plan.deletions.push_back(p.spec.name);
    } else {
      plan.kept.push_back({p.spec.name, KeptReason(p, what)});
      after[p.spec.name] = p.spec;
    }
  };
  auto change = [&](const PartitionStatus& from, const PartitionSpec& to) {
    std::vector<std::string> changes = DescribePartitionChanges(from.spec, to);
    if (changes.empty()) {
      after[to.name] = from.spec;
      return;
    }
    PartitionSpec lowered = to;
    lowered.memory_quota_bytes = std::min(from.spec.memory_quota_bytes, to.memory_quota_bytes);
    lowered.compute_share = std::min(from.spec.compute_share, to.compute_share);
    plan.updates.push_back({from.spec, to, lowered, std::move(changes)});
    after[to.name] = to;
  };

  for (const PartitionSpec& spec : file) {
    if (!in_file.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("partition \"", spec.name, "\" is named twice"));
    }
    if (!device_bytes(spec.device_index).has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("partition \"", spec.name, "\": device ",
                                                     spec.device_index, " does not exist"));
    }
    auto it = now.find(spec.name);
    if (it == now.end()) {
      plan.creations.push_back(spec);
      after[spec.name] = spec;
      continue;
    }
    const PartitionStatus& current = *it->second;
    if (current.spec.device_index == spec.device_index) {
      change(current, spec);
    } else if (current.sessions == 0) {
      plan.deletions.push_back(spec.name);
      plan.creations.push_back(spec);
      after[spec.name] = spec;
    } else {
      plan.kept.push_back(
          {spec.name,
           KeptReason(current, absl::StrCat("moves from device ", current.spec.device_index, " to ",
                                            spec.device_index))});
      after[spec.name] = current.spec;
    }
  }

  // Running partitions the new file does not name: removed from the file, or the Admin API's.
  const bool implied_default = !in_file.contains(kDefaultPartition);
  const PartitionStatus* running_default = nullptr;
  for (const PartitionStatus& p : running) {
    if (in_file.contains(p.spec.name)) continue;
    if (p.spec.name == kDefaultPartition && previous.contains(p.spec.name)) {
      running_default = &p;  // the implied one, sized below
      continue;
    }
    if (previous.contains(p.spec.name)) {
      remove(p, "removed from the file");
    } else {
      after[p.spec.name] = p.spec;  // made through the Admin API: not the file's
    }
  }

  // "default" from what the others leave of device 0, as at start-up.
  if (implied_default && (running_default != nullptr || !now.contains(kDefaultPartition))) {
    std::vector<PartitionSpec> others;
    for (const auto& [name, spec] : after) others.push_back(spec);
    const std::optional<PartitionSpec> room =
        ImpliedDefaultPartition(others, device_bytes(0).value_or(0));
    if (running_default != nullptr && room.has_value()) {
      PartitionSpec sized = running_default->spec;
      sized.memory_quota_bytes = room->memory_quota_bytes;
      sized.compute_share = room->compute_share;
      if (sized.bandwidth_cap != 0 && sized.bandwidth_cap < sized.compute_share) {
        sized.bandwidth_cap = sized.compute_share;
      }
      change(*running_default, sized);
    } else if (running_default != nullptr) {
      remove(*running_default, "left no room by the file's partitions");
    } else if (room.has_value()) {
      plan.creations.push_back(*room);
      after[room->name] = *room;
    }
  }

  // All or nothing: the end state must fit every device.
  std::vector<PartitionSpec> end_state;
  for (const auto& [name, spec] : after) end_state.push_back(spec);
  for (size_t i = 0; i < end_state.size(); ++i) {
    std::vector<PartitionSpec> others = end_state;
    others.erase(others.begin() + static_cast<ptrdiff_t>(i));
    const Decision fits =
        AdmitPartition(end_state[i], others, device_bytes(end_state[i].device_index).value_or(0));
    if (!fits.admitted) {
      std::string kept;
      for (const PartitionKept& k : plan.kept) absl::StrAppend(&kept, "; ", k.name, " ", k.reason);
      return absl::InvalidArgumentError(
          absl::StrCat("the partitions do not fit their devices: ", fits.message, kept));
    }
  }
  return plan;
}

}  // namespace gpukit
