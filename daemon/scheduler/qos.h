// QoS: a session's resource requests and limits, and the class derived from them exactly as
// Kubernetes derives a pod's QoS class.
//
// A session asks for memory (bytes) and compute (a share of the device, 0..1). A request
// is what admission guarantees; a limit is the most the session may use. As in Kubernetes,
// a limit given without a request makes the request equal to the limit. Then:
//   Guaranteed  every resource has a limit and its request equals it;
//   BestEffort  no resource has a request or a limit;
//   Burstable   anything else.
//
//   ResourceSpec spec;
//   spec.memory_limit_bytes = 1 << 30;
//   spec.compute_limit = 0.25;
//   GPUKIT_RETURN_IF_ERROR(ValidateResourceSpec(spec));
//   QosClass qos = DeriveQos(spec);  // kGuaranteed: requests default to the limits
//
// Thread safety: pure functions over values.
#ifndef GPUKIT_DAEMON_SCHEDULER_QOS_H_
#define GPUKIT_DAEMON_SCHEDULER_QOS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpukit {

// Ordered from most to least protected; queues serve lower values first.
enum class QosClass { kGuaranteed = 0, kBurstable = 1, kBestEffort = 2 };
inline constexpr int kQosClassCount = 3;

// "Guaranteed", "Burstable", "BestEffort" (the Kubernetes spelling).
absl::string_view QosName(QosClass qos);

struct ResourceSpec {
  std::optional<int64_t> memory_request_bytes;
  std::optional<int64_t> memory_limit_bytes;
  std::optional<double> compute_request;  // share of the device, 0..1
  std::optional<double> compute_limit;

  bool empty() const {
    return !memory_request_bytes && !memory_limit_bytes && !compute_request && !compute_limit;
  }
  friend bool operator==(const ResourceSpec&, const ResourceSpec&) = default;
};

// INVALID_ARGUMENT naming the field: negative bytes, shares outside [0, 1], a request above
// its limit.
absl::Status ValidateResourceSpec(const ResourceSpec& spec);

// Fills requests from limits where only the limit is given (the Kubernetes defaulting).
ResourceSpec WithDefaultedRequests(ResourceSpec spec);

QosClass DeriveQos(const ResourceSpec& spec);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_QOS_H_
