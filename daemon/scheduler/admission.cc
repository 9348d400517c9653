#include "daemon/scheduler/admission.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace gpukit {
namespace {
constexpr absl::string_view kReasonPayloadUrl = "type.gpukit.dev/gpukit.v1.Reason";
}  // namespace

absl::string_view RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kNone:
      return "REASON_UNSPECIFIED";
    case RejectReason::kDeviceMemoryExhausted:
      return "REASON_DEVICE_MEMORY_EXHAUSTED";
    case RejectReason::kArrayTooLarge:
      return "REASON_ARRAY_TOO_LARGE";
    case RejectReason::kTooManySessions:
      return "REASON_TOO_MANY_SESSIONS";
    case RejectReason::kTooManyArrays:
      return "REASON_TOO_MANY_ARRAYS";
  }
  return "REASON_UNSPECIFIED";
}

absl::Status WithReason(absl::Status status, RejectReason reason) {
  status.SetPayload(kReasonPayloadUrl, absl::Cord(RejectReasonName(reason)));
  return status;
}

RejectReason ReasonOf(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kReasonPayloadUrl);
  if (!payload.has_value()) return RejectReason::kNone;
  for (RejectReason r : {RejectReason::kDeviceMemoryExhausted, RejectReason::kArrayTooLarge,
                         RejectReason::kTooManySessions, RejectReason::kTooManyArrays}) {
    if (*payload == RejectReasonName(r)) return r;
  }
  return RejectReason::kNone;
}

absl::Status Decision::ToStatus() const {
  if (admitted) return absl::OkStatus();
  return WithReason(absl::ResourceExhaustedError(message), reason);
}

Decision AdmitSession(const AdmissionLimits& limits, int open_sessions) {
  if (open_sessions >= limits.max_sessions) {
    return {false, RejectReason::kTooManySessions,
            absl::StrCat("the daemon has ", open_sessions, " open sessions, its max_sessions")};
  }
  return {};
}

Decision AdmitArray(const AdmissionLimits& limits, int64_t bytes, int session_arrays,
                    int64_t device_free_bytes) {
  if (bytes > limits.max_array_bytes) {
    return {false, RejectReason::kArrayTooLarge,
            absl::StrCat("array of ", bytes,
                         " bytes exceeds limits.maxArraySize = ", limits.max_array_bytes)};
  }
  if (session_arrays >= limits.max_arrays_per_session) {
    return {false, RejectReason::kTooManyArrays,
            absl::StrCat("session holds ", session_arrays, " arrays, its max_arrays_per_session")};
  }
  if (bytes > device_free_bytes) {
    return {false, RejectReason::kDeviceMemoryExhausted,
            absl::StrCat("array of ", bytes, " bytes does not fit in the device's ",
                         device_free_bytes, " free bytes")};
  }
  return {};
}

MemoryReservation::MemoryReservation(MemoryReservation&& other) noexcept
    : ledger_(std::exchange(other.ledger_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MemoryReservation& MemoryReservation::operator=(MemoryReservation&& other) noexcept {
  if (this != &other) {
    Release();
    ledger_ = std::exchange(other.ledger_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryReservation::Release() {
  if (ledger_ != nullptr) ledger_->Return(bytes_);
  ledger_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<MemoryReservation> MemoryLedger::Reserve(int64_t bytes,
                                                        const AdmissionLimits& limits,
                                                        int session_arrays) {
  absl::MutexLock lock(&mu_);
  Decision decision = AdmitArray(limits, bytes, session_arrays, capacity_bytes_ - reserved_bytes_);
  if (!decision.admitted) return decision.ToStatus();
  reserved_bytes_ += bytes;
  return MemoryReservation(this, bytes);
}

int64_t MemoryLedger::reserved_bytes() const {
  absl::MutexLock lock(&mu_);
  return reserved_bytes_;
}

void MemoryLedger::Return(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  reserved_bytes_ -= bytes;
}

}  // namespace gpukit
