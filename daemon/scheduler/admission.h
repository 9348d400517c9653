// Admission: whether a new session or array may exist, and the memory ledger that keeps
// every admitted byte accounted for until it is released.
//
// Policy apart from mechanism: AdmitSession / AdmitArray are pure functions over a snapshot
// that return a Decision with a machine-readable reason; MemoryLedger is the mechanism that
// holds reservations. A MemoryReservation releases its bytes when destroyed, so an error
// path cannot leak them. The scheduler grows partitions, QoS and queues on this base.
//
//   MemoryLedger ledger(/*capacity_bytes=*/4 << 30);
//   GPUKIT_ASSIGN_OR_RETURN(MemoryReservation r, ledger.Reserve(bytes, limits));
//   ... allocate, and keep `r` alive as long as the memory is held.
//
// Thread safety: MemoryLedger is thread-safe; a MemoryReservation is a move-only value that
// may be destroyed on any thread (before its ledger).
#ifndef GPUKIT_DAEMON_SCHEDULER_ADMISSION_H_
#define GPUKIT_DAEMON_SCHEDULER_ADMISSION_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace gpukit {

// Why a request was refused. The service layer sends the name in the "gpukit-reason"
// trailer (proto enum gpukit.v1.Reason).
enum class RejectReason {
  kNone,
  kDeviceMemoryExhausted,
  kArrayTooLarge,
  kTooManySessions,
  kTooManyArrays,
};

// "REASON_DEVICE_MEMORY_EXHAUSTED", ... as in the proto.
absl::string_view RejectReasonName(RejectReason reason);

// Attaches `reason` to `status` (as a payload) and reads it back.
absl::Status WithReason(absl::Status status, RejectReason reason);
RejectReason ReasonOf(const absl::Status& status);

struct AdmissionLimits {
  int64_t max_array_bytes = int64_t{2} << 30;  // one array; default 2 GiB
  int max_sessions = 1024;
  int max_arrays_per_session = 65536;
};

struct Decision {
  bool admitted = true;
  RejectReason reason = RejectReason::kNone;
  std::string message;  // why, naming the limit and the value, when refused

  // OK, or RESOURCE_EXHAUSTED carrying the reason.
  absl::Status ToStatus() const;
};

Decision AdmitSession(const AdmissionLimits& limits, int open_sessions);
Decision AdmitArray(const AdmissionLimits& limits, int64_t bytes, int session_arrays,
                    int64_t device_free_bytes);

class MemoryLedger;

class MemoryReservation {
 public:
  MemoryReservation() = default;
  MemoryReservation(MemoryReservation&& other) noexcept;
  MemoryReservation& operator=(MemoryReservation&& other) noexcept;
  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;
  ~MemoryReservation() { Release(); }

  int64_t bytes() const { return bytes_; }
  // Returns the bytes to the ledger now; later calls do nothing.
  void Release();

 private:
  friend class MemoryLedger;
  MemoryReservation(MemoryLedger* ledger, int64_t bytes) : ledger_(ledger), bytes_(bytes) {}
  MemoryLedger* ledger_ = nullptr;
  int64_t bytes_ = 0;
};

// Counts the bytes reserved on one device against its capacity.
class MemoryLedger {
 public:
  explicit MemoryLedger(int64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // Admits `bytes` (AdmitArray's rules) and reserves them, or RESOURCE_EXHAUSTED with the
  // reason.
  absl::StatusOr<MemoryReservation> Reserve(int64_t bytes, const AdmissionLimits& limits,
                                            int session_arrays);

  int64_t capacity_bytes() const { return capacity_bytes_; }
  int64_t reserved_bytes() const;

 private:
  friend class MemoryReservation;
  void Return(int64_t bytes);

  const int64_t capacity_bytes_;
  mutable absl::Mutex mu_;
  int64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_ADMISSION_H_
