#include "daemon/scheduler/qos.h"

#include "absl/strings/str_cat.h"

namespace gpukit {

absl::string_view QosName(QosClass qos) {
  switch (qos) {
    case QosClass::kGuaranteed:
      return "Guaranteed";
    case QosClass::kBurstable:
      return "Burstable";
    case QosClass::kBestEffort:
      return "BestEffort";
  }
  return "BestEffort";
}

namespace {

absl::Status CheckShare(const std::optional<double>& share, absl::string_view field) {
  // Written so that NaN fails too.
  if (share.has_value() && !(*share >= 0.0 && *share <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", *share, " must be a share of the device in [0, 1]"));
  }
  return absl::OkStatus();
}

absl::Status CheckBytes(const std::optional<int64_t>& bytes, absl::string_view field) {
  if (bytes.has_value() && *bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = ", *bytes, " must be >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateResourceSpec(const ResourceSpec& spec) {
  if (absl::Status s = CheckBytes(spec.memory_request_bytes, "requests.memory"); !s.ok()) return s;
  if (absl::Status s = CheckBytes(spec.memory_limit_bytes, "limits.memory"); !s.ok()) return s;
  if (absl::Status s = CheckShare(spec.compute_request, "requests.compute"); !s.ok()) return s;
  if (absl::Status s = CheckShare(spec.compute_limit, "limits.compute"); !s.ok()) return s;
  if (spec.memory_request_bytes && spec.memory_limit_bytes &&
      *spec.memory_request_bytes > *spec.memory_limit_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "requests.memory = ", *spec.memory_request_bytes, " bytes is above limits.memory = ",
        *spec.memory_limit_bytes, " bytes"));
  }
  if (spec.compute_request && spec.compute_limit && *spec.compute_request > *spec.compute_limit) {
    return absl::InvalidArgumentError(absl::StrCat("requests.compute = ", *spec.compute_request,
                                                   " is above limits.compute = ",
                                                   *spec.compute_limit));
  }
  return absl::OkStatus();
}

ResourceSpec WithDefaultedRequests(ResourceSpec spec) {
  if (!spec.memory_request_bytes && spec.memory_limit_bytes) {
    spec.memory_request_bytes = spec.memory_limit_bytes;
  }
  if (!spec.compute_request && spec.compute_limit) spec.compute_request = spec.compute_limit;
  return spec;
}

QosClass DeriveQos(const ResourceSpec& raw) {
  if (raw.empty()) return QosClass::kBestEffort;
  const ResourceSpec spec = WithDefaultedRequests(raw);
  const bool memory_guaranteed =
      spec.memory_limit_bytes && *spec.memory_request_bytes == *spec.memory_limit_bytes;
  const bool compute_guaranteed =
      spec.compute_limit && *spec.compute_request == *spec.compute_limit;
  return memory_guaranteed && compute_guaranteed ? QosClass::kGuaranteed : QosClass::kBurstable;
}

}  // namespace gpukit
