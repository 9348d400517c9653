// DaemonMetrics: gpukitd's state as Prometheus metrics, the text a scrape of /metrics gets.
//
// It reads the same figures the Admin RPCs give gpukitctl (Core::ListDevices,
// Scheduler::ListPartitions, Core::ListTenants, Core::ListSessions), so a metric and the
// matching gpukitctl column agree for the same state; plus the RPC counters of an RpcMetrics,
// the custom kernels' JIT cache and the device executors' restarts. docs/operations.md lists
// every metric with its type, labels and meaning.
//
//   DaemonMetrics metrics(core, &rpc, {.version = "0.1.0", .started_at = absl::Now()});
//   std::string text = metrics.Render();  // Prometheus text format 0.0.4
//
// Cost of Render: O(devices + partitions + tenants + sessions) copies, each list taken under
// its owner's lock for one pass (the scheduler's lock once for partitions, once for tenants,
// and once per session for its usage, the same as gpukitctl's listings); nothing is held
// while the text is written. It never takes a lock that a request holds while it waits
// (queue waits happen outside the scheduler's lock), so a scrape neither blocks requests for
// longer than those copies nor waits for them.
//
// Thread safety: Render may be called from any thread, concurrently; `core` and `rpc` must
// outlive this object.
#ifndef GPUKIT_DAEMON_METRICS_DAEMON_METRICS_H_
#define GPUKIT_DAEMON_METRICS_DAEMON_METRICS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/core.h"
#include "daemon/metrics/exposition.h"
#include "daemon/metrics/rpc_metrics.h"

namespace gpukit {

struct DaemonMetricsFacts {
  std::string version;    // gpukit_build_info's label
  absl::Time started_at;  // gpukit_start_time_seconds
};

class DaemonMetrics {
 public:
  // `rpc` may be null: no RPC families then.
  DaemonMetrics(const Core& core, const RpcMetrics* rpc, DaemonMetricsFacts facts)
      : core_(core), rpc_(rpc), facts_(std::move(facts)) {}

  std::string Render() const;

 private:
  void WriteDaemon(ExpositionWriter& out) const;
  void WriteDevices(ExpositionWriter& out) const;
  // `sessions`: Core::ListSessions, for the spilled bytes.
  void WritePartitions(ExpositionWriter& out, const std::vector<SessionSummary>& sessions) const;
  void WriteTenants(ExpositionWriter& out, const std::vector<SessionSummary>& sessions) const;
  void WriteJit(ExpositionWriter& out) const;

  const Core& core_;
  const RpcMetrics* const rpc_;
  const DaemonMetricsFacts facts_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_METRICS_DAEMON_METRICS_H_
