// RpcMetrics: per gRPC method, how many calls ended with which status code and how long they
// took (a latency histogram), for /metrics. One place collects them for every RPC: the
// server's interceptor (daemon/metrics/rpc_interceptor.h) calls Record once per call, so no
// handler counts anything itself.
//
//   RpcMetrics rpc;
//   rpc.Record("gpukit.v1.ComputeService/RunOp", /*code=*/0, absl::Microseconds(140));
//   ExpositionWriter out;
//   rpc.WriteTo(out);  // gpukit_rpc_requests_total, gpukit_rpc_duration_seconds
//
// Record is on the request path, so it takes no exclusive lock once a method has been seen:
// a shared lock to find the method's counters, then relaxed atomic increments. The first
// call of a method inserts it under the exclusive lock. Methods are gRPC's registered ones
// (a fixed set); past kMaxMethods distinct names, further ones are counted as "other", so
// memory stays bounded whatever a client sends.
//
// A scrape (WriteTo) takes the shared lock and reads the atomics; it never waits for a
// request and a request waits for it only while a first-seen method is inserted. The
// counters of one method are read one after the other, not as one snapshot, so a scrape
// that races a call may see its count and not yet its latency; the next scrape agrees.
//
// Thread safety: thread-safe.
#ifndef GPUKIT_DAEMON_METRICS_RPC_METRICS_H_
#define GPUKIT_DAEMON_METRICS_RPC_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/metrics/exposition.h"

namespace gpukit {

class RpcMetrics {
 public:
  // gRPC's status codes, 0 (OK) to 16 (UNAUTHENTICATED); a code outside is counted as
  // UNKNOWN (2).
  static constexpr int kCodeCount = 17;
  // Upper bounds of the latency buckets, in seconds: from 25 us (a unary call inside gpukitd
  // takes tens of microseconds) to 30 s (a long upload or a task that waited in its queue).
  static constexpr std::array<double, 19> kLatencyBoundsSeconds = {
      25e-6, 50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
      50e-3, 100e-3, 250e-3, 500e-3, 1,      2.5,  5,      10,   30};
  static constexpr int kMaxMethods = 256;
  static constexpr absl::string_view kOtherMethod = "other";

  // Counts one call of `method` ("gpukit.v1.ComputeService/RunOp"; a leading "/" is dropped)
  // that ended with status `code` after `latency`.
  void Record(absl::string_view method, int code, absl::Duration latency);

  struct MethodCounts {
    std::string method;
    std::array<int64_t, kCodeCount> calls_by_code{};
    // Not cumulative; the last entry counts the calls above the last bound.
    std::array<int64_t, kLatencyBoundsSeconds.size() + 1> latency_buckets{};
    double latency_sum_seconds = 0;
  };
  // Every method seen, sorted by name.
  std::vector<MethodCounts> Snapshot() const;

  // Writes the families gpukit_rpc_requests_total{method, code} (one series per code a
  // method has ended with) and gpukit_rpc_duration_seconds{method} (a histogram).
  void WriteTo(ExpositionWriter& out) const;

  // The code's name as a metric label: "OK", "CANCELLED", ..., "UNAUTHENTICATED" (gRPC's
  // names, which absl::StatusCodeToString spells the same); "UNKNOWN" outside 0..16.
  static std::string CodeName(int code);

 private:
  struct Counters {
    std::array<std::atomic<int64_t>, kCodeCount> calls_by_code{};
    std::array<std::atomic<int64_t>, kLatencyBoundsSeconds.size() + 1> latency_buckets{};
    std::atomic<int64_t> latency_sum_ns{0};
  };
  Counters& CountersFor(absl::string_view method);

  mutable absl::Mutex mu_;
  // Counters are never removed, so a reference found under the lock stays valid after it.
  absl::flat_hash_map<std::string, std::unique_ptr<Counters>> methods_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_METRICS_RPC_METRICS_H_
