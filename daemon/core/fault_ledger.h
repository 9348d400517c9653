// FaultLedger: whose work cost a device executor its restart, and the hold on tenants whose
// work keeps doing it.
//
// A kernel that faults or hangs costs every tenant of its device a pause (the executor's
// restart, a fraction of a second) and costs the in-flight work of bystanders a retry. One
// fault is anybody's bug; a tenant whose work faults again and again could keep the GPU in a
// restart loop, so from its second fault in `window` on, its launches (kernels and ops) are
// held back for a time that doubles with each further fault: after the n-th fault (n >= 2),
// min(first_hold * 2^(n-2), max_hold) from that fault on. Faults older than `window` are
// forgotten. The core records a fault when a request's work comes back with the executor's
// fault payload naming it the culprit (runtime/executor/remote_device.h).
//
//   FaultLedger ledger(clock);
//   ledger.Record({.device = 0, .kind = "fault", .tenant = "team-a", .work = "kernel oob"});
//   GPUKIT_RETURN_IF_ERROR(ledger.CheckLaunch("team-a"));  // RESOURCE_EXHAUSTED when held
//
// Thread safety: thread-safe.
#ifndef GPUKIT_DAEMON_CORE_FAULT_LEDGER_H_
#define GPUKIT_DAEMON_CORE_FAULT_LEDGER_H_

#include <atomic>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/scheduler/clock.h"

namespace gpukit {

struct FaultLedgerOptions {
  absl::Duration window = absl::Minutes(10);
  absl::Duration first_hold = absl::Seconds(1);
  absl::Duration max_hold = absl::Minutes(5);
};

struct WorkFault {
  absl::Time time;  // set by Record
  int device = 0;
  std::string kind;  // "fault" or "hang" (held against the tenant), "exited" (named only)
  std::string error;
  std::string session_id;
  std::string tenant;
  std::string work;  // "kernel oob_write", "op matmul"
};

class FaultLedger {
 public:
  explicit FaultLedger(const Clock& clock, FaultLedgerOptions options = {})
      : clock_(clock), options_(options) {}

  void Record(WorkFault fault);
  // RESOURCE_EXHAUSTED naming the faults and the time left while `tenant` is held back.
  absl::Status CheckLaunch(absl::string_view tenant) const;
  // The last fault attributed to work on `device`.
  std::optional<WorkFault> LastFault(int device) const;
  // The tenants held back now: "team-a: 3 faults in 10m, held back 3.2s more".
  std::vector<std::string> HeldBack() const;

 private:
  // When the tenant's hold ends (the past when there is none). Expires old faults.
  absl::Time HoldEnd(const std::deque<absl::Time>& faults) const;

  const Clock& clock_;
  const FaultLedgerOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::deque<absl::Time>> faults_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, WorkFault> last_ ABSL_GUARDED_BY(mu_);
  // Whether faults_ ever had an entry: until then CheckLaunch (every launch and op of every
  // tenant) answers without the lock.
  std::atomic<bool> any_tenant_fault_{false};
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_CORE_FAULT_LEDGER_H_
