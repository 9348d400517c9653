#include "daemon/metrics/rpc_metrics.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/strip.h"

namespace gpukit {

std::string RpcMetrics::CodeName(int code) {
  // gRPC's codes are abseil's, number for number, and abseil spells each as gRPC does.
  if (code < 0 || code >= kCodeCount) code = 2;  // UNKNOWN
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

RpcMetrics::Counters& RpcMetrics::CountersFor(absl::string_view method) {
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = methods_.find(method);
    if (it != methods_.end()) return *it->second;
  }
  absl::MutexLock lock(&mu_);
  if (methods_.size() >= kMaxMethods && !methods_.contains(method)) method = kOtherMethod;
  std::unique_ptr<Counters>& counters = methods_[method];
  if (counters == nullptr) counters = std::make_unique<Counters>();
  return *counters;
}

void RpcMetrics::Record(absl::string_view method, int code, absl::Duration latency) {
  absl::ConsumePrefix(&method, "/");
  if (code < 0 || code >= kCodeCount) code = 2;  // UNKNOWN
  Counters& counters = CountersFor(method);
  counters.calls_by_code[code].fetch_add(1, std::memory_order_relaxed);
  const double seconds = absl::ToDoubleSeconds(latency);
  const size_t bucket =
      std::lower_bound(kLatencyBoundsSeconds.begin(), kLatencyBoundsSeconds.end(), seconds) -
      kLatencyBoundsSeconds.begin();  // the first bound >= seconds: le is inclusive
  counters.latency_buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  counters.latency_sum_ns.fetch_add(absl::ToInt64Nanoseconds(latency), std::memory_order_relaxed);
}

std::vector<RpcMetrics::MethodCounts> RpcMetrics::Snapshot() const {
  std::vector<MethodCounts> out;
  {
    absl::ReaderMutexLock lock(&mu_);
    out.reserve(methods_.size());
    for (const auto& [name, counters] : methods_) {
      MethodCounts& m = out.emplace_back();
      m.method = name;
      for (int i = 0; i < kCodeCount; ++i) {
        m.calls_by_code[i] = counters->calls_by_code[i].load(std::memory_order_relaxed);
      }
      for (size_t i = 0; i < m.latency_buckets.size(); ++i) {
        m.latency_buckets[i] = counters->latency_buckets[i].load(std::memory_order_relaxed);
      }
      m.latency_sum_seconds =
          static_cast<double>(counters->latency_sum_ns.load(std::memory_order_relaxed)) / 1e9;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const MethodCounts& a, const MethodCounts& b) { return a.method < b.method; });
  return out;
}

void RpcMetrics::WriteTo(ExpositionWriter& out) const {
  const std::vector<MethodCounts> methods = Snapshot();
  out.Family("gpukit_rpc_requests_total", MetricType::kCounter,
             "gRPC calls that gpukitd answered, by method and status code.");
  for (const MethodCounts& m : methods) {
    for (int code = 0; code < kCodeCount; ++code) {
      if (m.calls_by_code[code] == 0) continue;
      out.Sample({{"method", m.method}, {"code", CodeName(code)}}, m.calls_by_code[code]);
    }
  }
  out.Family("gpukit_rpc_duration_seconds", MetricType::kHistogram,
             "Time from a gRPC call's start in gpukitd to its status, by method.");
  for (const MethodCounts& m : methods) {
    const MetricLabel labels[] = {{"method", m.method}};
    out.Histogram(labels, kLatencyBoundsSeconds, m.latency_buckets, m.latency_sum_seconds);
  }
}

}  // namespace gpukit
