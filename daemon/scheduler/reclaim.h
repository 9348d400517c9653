// Reclaim: which arrays to spill to host memory when an allocation does not fit.
//
// The order mirrors Kubernetes eviction under node memory pressure: BestEffort memory goes
// first, least recently used first; then the memory of Burstable sessions above their
// requests, least recently used first; Guaranteed memory never. A requester may only take
// memory from sessions that stand below it, so tenants of one class cannot thrash each
// other: an allocation that keeps its session within its request (any Guaranteed
// allocation, a Burstable one below its request) may reclaim BestEffort memory and
// Burstable memory above requests; a Burstable allocation above its request may reclaim
// BestEffort memory only; a BestEffort allocation reclaims nothing.
//
//   std::vector<size_t> victims = ChooseVictims(candidates, shortfall, requester);
//   // spill candidates[victims[i]] in that order; empty: nothing can help, refuse
//
// Thread safety: pure functions over values.
#ifndef GPUKIT_DAEMON_SCHEDULER_RECLAIM_H_
#define GPUKIT_DAEMON_SCHEDULER_RECLAIM_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/scheduler/qos.h"

namespace gpukit {

// An array that could be spilled (resident, not in use, in a partition that spills).
struct ReclaimCandidate {
  uint64_t session_key = 0;  // arrays of one session share it
  QosClass qos = QosClass::kBestEffort;
  int64_t bytes = 0;
  absl::Time last_used;
  int64_t session_used_bytes = 0;     // the owner's resident bytes
  int64_t session_request_bytes = 0;  // the owner's memory request (0 if none)
};

struct Requester {
  QosClass qos = QosClass::kBestEffort;
  // Whether the session's resident bytes after this allocation stay within its request.
  bool within_request = false;
};

// Indices into `candidates` to spill, in order, whose bytes add up to at least
// `shortfall_bytes`; empty when the allowed candidates cannot cover it (spilling some would
// not help, so none are).
std::vector<size_t> ChooseVictims(absl::Span<const ReclaimCandidate> candidates,
                                  int64_t shortfall_bytes, const Requester& requester);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_RECLAIM_H_
