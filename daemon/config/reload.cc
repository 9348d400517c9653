#include "daemon/config/reload.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/scheduler/partition_reload.h"
#include "runtime/base/units.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace {

// The names the running file's partitions have, with "default" when it was implied.
std::vector<std::string> FileNames(const DaemonConfig& config) {
  std::vector<std::string> names;
  for (const PartitionSpec& p : config.core.partitions) names.push_back(p.name);
  if (std::find(names.begin(), names.end(), kDefaultPartition) == names.end()) {
    names.emplace_back(kDefaultPartition);
  }
  return names;
}

// Settings a reload does not apply that differ between `a` and `b`, by config key.
std::vector<std::string> RestartOnlyChanges(const DaemonConfig& a, const DaemonConfig& b) {
  std::vector<std::string> changed;
  auto note = [&](bool differs, absl::string_view key) {
    if (differs) changed.emplace_back(key);
  };
  note(a.listen != b.listen, "listen");
  note(a.tcp.cert_file != b.tcp.cert_file || a.tcp.key_file != b.tcp.key_file ||
           a.tcp.client_ca_file != b.tcp.client_ca_file || a.tcp.insecure != b.tcp.insecure,
       "access.tls/insecureTcp");
  note(a.backend != b.backend, "backend");
  note(a.cpu_memory_bytes != b.cpu_memory_bytes, "cpu.memory");
  note(a.server_max_threads != b.server_max_threads, "server.maxThreads");
  note(a.server_submit_socket != b.server_submit_socket, "server.submitSocket");
  note(a.executor.in_process != b.executor.in_process || a.executor.path != b.executor.path ||
           a.executor.launch_deadline != b.executor.launch_deadline ||
           a.executor.standby != b.executor.standby,
       "executor");
  note(a.jit.cache_dir != b.jit.cache_dir || a.jit.worker_path != b.jit.worker_path ||
           a.jit.compile_workers != b.jit.compile_workers ||
           a.jit.memory_budget_bytes != b.jit.memory_budget_bytes,
       "jit");
  const AdmissionLimits& la = a.core.limits;
  const AdmissionLimits& lb = b.core.limits;
  note(la.max_array_bytes != lb.max_array_bytes || la.max_sessions != lb.max_sessions ||
           la.max_arrays_per_session != lb.max_arrays_per_session ||
           a.core.max_kernels_per_session != b.core.max_kernels_per_session ||
           a.core.max_ops_in_flight != b.core.max_ops_in_flight,
       "limits");
  note(a.core.sessions.default_lease != b.core.sessions.default_lease ||
           a.core.sessions.min_lease != b.core.sessions.min_lease ||
           a.core.sessions.max_lease != b.core.sessions.max_lease,
       "sessions");
  note(a.core.streams_per_partition != b.core.streams_per_partition, "streamsPerPartition");
  note(a.core.pacing_burst != b.core.pacing_burst ||
           a.core.best_effort_in_flight != b.core.best_effort_in_flight ||
           a.core.burstable_in_flight != b.core.burstable_in_flight ||
           a.core.pacing_anticipation != b.core.pacing_anticipation ||
           a.core.task_history != b.core.task_history,
       "scheduler");
  note(a.qos.best_effort_slice != b.qos.best_effort_slice ||
           a.qos.burstable_slice != b.qos.burstable_slice ||
           a.core.best_effort_sm_share != b.core.best_effort_sm_share,
       "qos");
  return changed;
}

std::string Describe(const PartitionSpec& p) {
  return absl::StrCat("device ", p.device_index, ", memory ", FormatBytes(p.memory_quota_bytes),
                      ", compute ", p.compute_share,
                      p.bandwidth_cap > 0 ? absl::StrCat(", bandwidth cap ", p.bandwidth_cap) : "",
                      p.spill ? ", spills to host" : "", p.reserve_sms ? ", SMs reserved" : "");
}

}  // namespace

ConfigReloader::ConfigReloader(Core& core, CommandLine flags, DaemonConfig running,
                               ReloadTargets targets)
    : core_(core),
      flags_(std::move(flags)),
      running_(std::move(running)),
      targets_(std::move(targets)),
      file_partitions_(FileNames(running_)) {}

absl::StatusOr<std::string> ConfigReloader::Reload() {
  if (!flags_.config_path.has_value()) {
    absl::Status refused = absl::FailedPreconditionError(
        "reload: gpukitd was started without --config; there is no file to reload");
    spdlog::error("{}", std::string(refused.message()));
    return refused;
  }
  const std::string& path = *flags_.config_path;
  auto refuse = [&](const absl::Status& status) {
    spdlog::error("reload refused, the running configuration stays: {}",
                  std::string(status.message()));
    return status;
  };
  // Everything is checked before anything is applied.
  absl::StatusOr<DaemonConfig> next = ResolveConfig(flags_);
  if (!next.ok()) return refuse(next.status());
  if (next->listen.empty()) next->listen = running_.listen;  // main.cc's default, kept
  std::vector<DeviceCapacity> devices;
  for (int i = 0; i < core_.device_count(); ++i) {
    devices.push_back({i, core_.device(i).properties().memory_total_bytes});
  }
  absl::StatusOr<PartitionReloadPlan> plan =
      PlanPartitionReload(core_.ListPartitions(), file_partitions_, next->core.partitions, devices);
  if (!plan.ok()) {
    return refuse(absl::Status(plan.status().code(),
                               absl::StrCat(path, ": partitions: ", plan.status().message())));
  }

  // Apply: deletions, updates lowered, updates, creations (partition_reload.h says why).
  int created = 0, updated = 0, deleted = 0, failed = 0;
  std::vector<std::string> file_partitions = FileNames(*next);
  for (const PartitionKept& kept : plan->kept) file_partitions.push_back(kept.name);
  for (const std::string& name : plan->deletions) {
    absl::StatusOr<int> closed = core_.DeletePartition(name, /*force=*/false);
    if (closed.ok()) {
      spdlog::info("reload: partition {} deleted", name);
      ++deleted;
    } else {
      file_partitions.push_back(name);
      // Most likely a session opened in it since the plan: it stays, as a busy one would.
      spdlog::warn("reload: partition {} kept: {}", name, std::string(closed.status().message()));
    }
  }
  // Each step sets only the fields the plan changes, in one call, so an operator's update of
  // another field (AdminService) that lands between the plan and this step stays.
  for (const PartitionUpdate& update : plan->updates) {
    absl::StatusOr<PartitionSpec> lowered = core_.UpdatePartition(
        update.to.name, ChangedPartitionFields(update.from, update.lowered), update.lowered);
    if (!lowered.ok()) {
      spdlog::error("reload: partition {} not updated: {}", update.to.name,
                    std::string(lowered.status().message()));
      ++failed;
    }
  }
  for (const PartitionUpdate& update : plan->updates) {
    absl::StatusOr<PartitionSpec> spec = core_.UpdatePartition(
        update.to.name, ChangedPartitionFields(update.from, update.to), update.to);
    if (!spec.ok()) {
      spdlog::error("reload: partition {} not updated: {}", update.to.name,
                    std::string(spec.status().message()));
      ++failed;
      continue;
    }
    spdlog::info("reload: partition {} updated: {}", update.to.name,
                 absl::StrJoin(update.changes, ", "));
    ++updated;
  }
  for (const PartitionSpec& spec : plan->creations) {
    if (absl::Status s = core_.CreatePartition(spec); !s.ok()) {
      spdlog::error("reload: partition {} not created: {}", spec.name, std::string(s.message()));
      ++failed;
      continue;
    }
    spdlog::info("reload: partition {} created: {}", spec.name, Describe(spec));
    ++created;
  }
  for (const PartitionKept& kept : plan->kept) {
    spdlog::warn("reload: partition {} {}", kept.name, kept.reason);
  }

  if (next->log_level != running_.log_level) {
    spdlog::set_level(spdlog::level::from_str(next->log_level));
    spdlog::info("reload: log level {} -> {}", running_.log_level, next->log_level);
  }
  for (const auto& apply : targets_.on_reload) {
    if (absl::Status s = apply(*next); !s.ok()) {
      spdlog::error("reload: {}", s.ToString());
      ++failed;
    }
  }
  if (std::vector<std::string> later = RestartOnlyChanges(running_, *next); !later.empty()) {
    spdlog::warn("reload: {} changed in {}; that takes effect when gpukitd restarts",
                 absl::StrJoin(later, ", "), path);
  }
  running_ = *std::move(next);
  file_partitions_ = std::move(file_partitions);

  std::string summary =
      absl::StrCat("reloaded ", path, ": partitions ", created, " created, ", updated, " updated, ",
                   deleted, " deleted, ", plan->kept.size(), " kept");
  if (failed > 0) absl::StrAppend(&summary, "; ", failed, " step(s) failed (see the log)");
  spdlog::info("{}", summary);
  return summary;
}

}  // namespace gpukit
