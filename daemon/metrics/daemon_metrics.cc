#include "daemon/metrics/daemon_metrics.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/scheduler/qos.h"
#include "daemon/scheduler/reason.h"

namespace gpukit {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

constexpr QosClass kQosClasses[] = {QosClass::kGuaranteed, QosClass::kBurstable,
                                    QosClass::kBestEffort};

}  // namespace

std::string DaemonMetrics::Render() const {
  ExpositionWriter out;
  WriteDaemon(out);
  WriteDevices(out);
  const std::vector<SessionSummary> sessions = core_.ListSessions();
  WritePartitions(out, sessions);
  WriteTenants(out, sessions);
  WriteJit(out);
  if (rpc_ != nullptr) rpc_->WriteTo(out);
  return std::move(out).Finish();
}

void DaemonMetrics::WriteDaemon(ExpositionWriter& out) const {
  out.Family("gpukit_build_info", MetricType::kGauge,
             "Always 1; its labels say which gpukitd and backend serve.");
  out.Sample({{"version", facts_.version}, {"backend", core_.backend()}}, 1);
  out.Family("gpukit_start_time_seconds", MetricType::kGauge,
             "When gpukitd started, in seconds since the Unix epoch.");
  out.Sample({}, absl::ToDoubleSeconds(facts_.started_at - absl::UnixEpoch()));
  out.Family("gpukit_sessions", MetricType::kGauge, "Sessions open now.");
  out.Sample({}, static_cast<int64_t>(core_.session_count()));
  out.Family("gpukit_arrays", MetricType::kGauge, "Arrays held by the open sessions.");
  out.Sample({}, core_.array_count());
}

void DaemonMetrics::WriteDevices(ExpositionWriter& out) const {
  const std::vector<DeviceSummary> devices = core_.ListDevices();
  std::vector<std::string> index(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) index[i] = absl::StrCat(devices[i].properties.index);

  out.Family("gpukit_device_info", MetricType::kGauge,
             "Always 1; its labels name each device and its backend.");
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceProperties& p = devices[i].properties;
    out.Sample({{"device", index[i]}, {"name", p.name}, {"backend", BackendName(p.backend)}}, 1);
  }
  out.Family("gpukit_device_memory_total_bytes", MetricType::kGauge,
             "Memory of the device that gpukitd manages.");
  for (size_t i = 0; i < devices.size(); ++i) {
    out.Sample({{"device", index[i]}}, devices[i].properties.memory_total_bytes);
  }
  out.Family("gpukit_device_memory_used_bytes", MetricType::kGauge,
             "Device memory allocated now (arrays, and memory kept for exported arrays).");
  for (size_t i = 0; i < devices.size(); ++i) {
    out.Sample({{"device", index[i]}}, devices[i].memory_used_bytes);
  }
  out.Family("gpukit_device_busy_seconds_total", MetricType::kCounter,
             "Device time of the tasks finished on the device (tasks running at once share "
             "it), in seconds; its rate is the device's utilisation (0 to 1).");
  for (size_t i = 0; i < devices.size(); ++i) {
    out.Sample({{"device", index[i]}},
               Seconds(core_.scheduler().device_time_total(devices[i].properties.index)));
  }
  // One family with a sample of `value(state)` per device that runs an executor (none runs
  // in-process).
  auto per_executor = [&](absl::string_view name, MetricType type, absl::string_view help,
                          auto value) {
    out.Family(name, type, help);
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].executor.has_value()) {
        out.Sample({{"device", index[i]}}, value(*devices[i].executor));
      }
    }
  };
  per_executor("gpukit_executor_restarts_total", MetricType::kCounter,
               "Restarts of the device's executor process (after a fault, a hang or its death).",
               [](const ExecutorState& e) { return e.restarts; });
  per_executor("gpukit_executor_standby_ready", MetricType::kGauge,
               "1 while the device's standby executor is started and ready to take over.",
               [](const ExecutorState& e) { return e.standby_ready ? 1 : 0; });
  per_executor("gpukit_executor_messages_total", MetricType::kCounter,
               "Datagrams gpukitd sent to the device's executor (work and requests; one-way "
               "requests ride with the next).",
               [](const ExecutorState& e) { return e.messages; });
  per_executor("gpukit_executor_round_trips_total", MetricType::kCounter,
               "Requests to the device's executor that waited for its reply (waits, device "
               "times, loads).",
               [](const ExecutorState& e) { return e.round_trips; });
}

void DaemonMetrics::WritePartitions(ExpositionWriter& out,
                                    const std::vector<SessionSummary>& sessions) const {
  const std::vector<PartitionStatus> partitions = core_.ListPartitions();
  // Spilled bytes are the open sessions' (as gpukitctl sessions shows them), summed.
  std::map<std::string, int64_t> spilled;
  for (const SessionSummary& s : sessions) spilled[s.partition] += s.spilled_bytes;

  std::vector<std::string> device(partitions.size());
  for (size_t i = 0; i < partitions.size(); ++i) {
    device[i] = absl::StrCat(partitions[i].spec.device_index);
  }
  // One family with a sample of `value(partition)` per partition.
  auto per_partition = [&](absl::string_view name, MetricType type, absl::string_view help,
                           auto value) {
    out.Family(name, type, help);
    for (size_t i = 0; i < partitions.size(); ++i) {
      out.Sample({{"partition", partitions[i].spec.name}, {"device", device[i]}},
                 value(partitions[i]));
    }
  };
  auto gauge = [&](absl::string_view name, absl::string_view help, auto value) {
    per_partition(name, MetricType::kGauge, help, value);
  };
  auto counter = [&](absl::string_view name, absl::string_view help, auto value) {
    per_partition(name, MetricType::kCounter, help, value);
  };
  gauge("gpukit_partition_memory_quota_bytes", "The partition's memory quota.",
        [](const PartitionStatus& p) { return p.spec.memory_quota_bytes; });
  gauge("gpukit_partition_memory_used_bytes",
        "Device memory reserved by the partition's sessions now.",
        [](const PartitionStatus& p) { return p.memory_used_bytes; });
  gauge("gpukit_partition_memory_requested_bytes",
        "Sum of the memory requests of the partition's sessions.",
        [](const PartitionStatus& p) { return p.memory_requested_bytes; });
  gauge("gpukit_partition_spilled_bytes",
        "Bytes of the partition's open sessions' arrays spilled to host memory.",
        [&](const PartitionStatus& p) {
          auto it = spilled.find(p.spec.name);
          return it == spilled.end() ? int64_t{0} : it->second;
        });
  gauge("gpukit_partition_compute_share",
        "The partition's share of its device's time (0 to 1) under contention.",
        [](const PartitionStatus& p) { return p.spec.compute_share; });
  gauge("gpukit_partition_sessions", "Sessions open in the partition.",
        [](const PartitionStatus& p) { return p.sessions; });
  gauge("gpukit_partition_queue_depth", "Tasks waiting in the partition's queue.",
        [](const PartitionStatus& p) { return p.queued; });

  out.Family("gpukit_partition_tasks", MetricType::kGauge,
             "The partition's live tasks by state: queued (waiting) or running (admitted or "
             "running on the device).");
  for (size_t i = 0; i < partitions.size(); ++i) {
    const PartitionStatus& p = partitions[i];
    out.Sample({{"partition", p.spec.name}, {"device", device[i]}, {"state", "queued"}}, p.queued);
    out.Sample({{"partition", p.spec.name}, {"device", device[i]}, {"state", "running"}},
               p.running);
  }
  out.Family("gpukit_partition_tasks_completed_total", MetricType::kCounter,
             "The partition's tasks that ran to an end, by result: succeeded or failed.");
  for (size_t i = 0; i < partitions.size(); ++i) {
    const PartitionStatus& p = partitions[i];
    out.Sample({{"partition", p.spec.name}, {"device", device[i]}, {"result", "succeeded"}},
               p.succeeded_total);
    out.Sample({{"partition", p.spec.name}, {"device", device[i]}, {"result", "failed"}},
               p.failed_total);
  }
  out.Family("gpukit_partition_admissions_total", MetricType::kCounter,
             "Admission decisions of the partition: result=\"admitted\" for tasks let run; "
             "result=\"rejected\" with the reason (as in the gpukit-reason trailer) for "
             "refused sessions, allocations and tasks, and tasks cancelled or expired in the "
             "queue.");
  for (size_t i = 0; i < partitions.size(); ++i) {
    const PartitionStatus& p = partitions[i];
    out.Sample({{"partition", p.spec.name}, {"device", device[i]}, {"result", "admitted"}},
               p.admitted_total);
    for (int r = 1; r < kRejectReasonCount; ++r) {
      out.Sample({{"partition", p.spec.name},
                  {"device", device[i]},
                  {"result", "rejected"},
                  {"reason", RejectReasonName(static_cast<RejectReason>(r))}},
                 p.rejected[r]);
    }
  }
  out.Family("gpukit_partition_gpu_seconds_total", MetricType::kCounter,
             "Device time of the partition's finished tasks, by the QoS class of the session "
             "that ran them, in seconds.");
  for (size_t i = 0; i < partitions.size(); ++i) {
    const PartitionStatus& p = partitions[i];
    for (QosClass qos : kQosClasses) {
      out.Sample({{"partition", p.spec.name}, {"device", device[i]}, {"qos", QosName(qos)}},
                 Seconds(p.device_time_by_qos[static_cast<int>(qos)]));
    }
  }
  counter("gpukit_partition_throttled_seconds_total",
          "Time the partition had work queued that pacing held back (its compute share used "
          "up while other partitions wanted the device, or its bandwidth cap), in seconds.",
          [](const PartitionStatus& p) { return Seconds(p.throttled_total); });
  gauge("gpukit_partition_pacing_balance_seconds",
        "The partition's share bucket: negative while it pays back device time it used "
        "beyond its share.",
        [](const PartitionStatus& p) { return Seconds(p.pacing_balance); });
}

void DaemonMetrics::WriteTenants(ExpositionWriter& out,
                                 const std::vector<SessionSummary>& sessions) const {
  const std::vector<TenantUsage> tenants = core_.ListTenants();
  std::map<std::string, int64_t> spilled;
  for (const SessionSummary& s : sessions) spilled[s.tenant] += s.spilled_bytes;

  out.Family("gpukit_tenant_sessions", MetricType::kGauge, "Sessions the tenant has open.");
  for (const TenantUsage& t : tenants) out.Sample({{"tenant", t.tenant}}, t.sessions);
  out.Family("gpukit_tenant_memory_used_bytes", MetricType::kGauge,
             "Device memory reserved by the tenant's sessions now.");
  for (const TenantUsage& t : tenants) out.Sample({{"tenant", t.tenant}}, t.memory_used_bytes);
  out.Family("gpukit_tenant_spilled_bytes", MetricType::kGauge,
             "Bytes of the tenant's open sessions' arrays spilled to host memory.");
  for (const TenantUsage& t : tenants) {
    auto it = spilled.find(t.tenant);
    out.Sample({{"tenant", t.tenant}}, it == spilled.end() ? int64_t{0} : it->second);
  }
  out.Family("gpukit_tenant_gpu_seconds_total", MetricType::kCounter,
             "Device time of the tenant's finished tasks, by the QoS class of the session that "
             "ran them, in seconds.");
  for (const TenantUsage& t : tenants) {
    for (QosClass qos : kQosClasses) {
      out.Sample({{"tenant", t.tenant}, {"qos", QosName(qos)}},
                 Seconds(t.device_time_by_qos[static_cast<int>(qos)]));
    }
  }
  out.Family("gpukit_tenant_tasks_completed_total", MetricType::kCounter,
             "The tenant's tasks that ran to an end, by result: succeeded or failed.");
  for (const TenantUsage& t : tenants) {
    out.Sample({{"tenant", t.tenant}, {"result", "succeeded"}}, t.tasks_finished - t.tasks_failed);
    out.Sample({{"tenant", t.tenant}, {"result", "failed"}}, t.tasks_failed);
  }
}

void DaemonMetrics::WriteJit(ExpositionWriter& out) const {
  const std::optional<KernelCacheStats> stats = core_.jit_cache_stats();
  out.Family("gpukit_jit_cache_hits_total", MetricType::kCounter,
             "Custom kernel compiles answered from the kernel cache, by cache: memory or disk.");
  if (stats.has_value()) {
    out.Sample({{"cache", "memory"}}, stats->memory_hits);
    out.Sample({{"cache", "disk"}}, stats->disk_hits);
  }
  out.Family("gpukit_jit_cache_misses_total", MetricType::kCounter,
             "Custom kernel compiles found in no cache and compiled by NVRTC (successfully).");
  if (stats.has_value()) out.Sample({}, stats->compiles);
  out.Family("gpukit_jit_cache_evictions_total", MetricType::kCounter,
             "Compiled kernels dropped from the memory cache to stay within its budget.");
  if (stats.has_value()) out.Sample({}, stats->evictions);
  out.Family("gpukit_jit_cache_memory_bytes", MetricType::kGauge,
             "Bytes of compiled kernels held in the memory cache.");
  if (stats.has_value()) out.Sample({}, stats->memory_bytes);
}

}  // namespace gpukit
