#include "daemon/scheduler/dispatch_policy.h"

#include <algorithm>
#include <optional>

namespace gpukit {

namespace {

DispatchDecision Wait(DispatchReason reason, absl::Time ready_at = absl::InfiniteFuture()) {
  return DispatchDecision{.admit = false, .reason = reason, .ready_at = ready_at};
}

bool CapHolds(const DispatchPartition& p, absl::Time now) {
  return p.capped && p.cap_ready_at > now;
}

// Whether the SMs that no partition reserves have work in flight.
bool SharedSmsBusy(const DispatchSnapshot& s) {
  for (const DispatchPartition& p : s.partitions) {
    if (!p.reserved_sms && p.running > 0) return true;
  }
  return false;
}

// Rule 2's condition: Guaranteed work in flight, or queued where its cap does not hold it
// (then bounding the others would only leave the device idle).
bool GuaranteedActive(const DispatchSnapshot& s) {
  if (s.in_flight[static_cast<int>(QosClass::kGuaranteed)] > 0) return true;
  for (const DispatchPartition& p : s.partitions) {
    if (p.guaranteed_queued > 0 && !CapHolds(p, s.now)) return true;
  }
  return false;
}

bool InFlightBoundHolds(const DispatchSnapshot& s) {
  if (s.qos == QosClass::kGuaranteed) return false;
  const int c = static_cast<int>(s.qos);
  if (s.in_flight[c] == 0) return false;  // one may always go: nothing starves
  if (s.in_flight_estimate[c] < s.limits.InFlightBound(s.qos)) return false;
  return GuaranteedActive(s);
}

// Rule 4: the first other partition with a claim on the device's time, as the wait it
// imposes on the candidate; nullopt when none has one.
std::optional<DispatchDecision> ShareYield(const DispatchSnapshot& s) {
  // On a GPU the contention is mostly between work already on the device (the tasks of all
  // partitions run at once and share it; synchronous clients leave the queues empty), so
  // work in flight is a claim: what the candidate adds beside it would take the device's
  // time from it. While the device has work in flight, holding the candidate leaves it no
  // less busy; on an idle device one partition must go: the one nearest to repaying.
  // Partitions that reserve SMs contend with nobody for them: they neither yield nor claim.
  const DispatchPartition& self = s.partitions[s.candidate];
  if (self.reserved_sms) return std::nullopt;
  const bool busy = SharedSmsBusy(s);
  for (size_t i = 0; i < s.partitions.size(); ++i) {
    if (i == s.candidate) continue;
    const DispatchPartition& other = s.partitions[i];
    if (other.reserved_sms) continue;
    if (other.running > 0) {
      return Wait(DispatchReason::kYieldsToInFlight, self.share_ready_at);
    }
    const absl::Time anticipated_until = other.last_finish + s.limits.pacing_anticipation;
    if (other.queued == 0 && s.now < anticipated_until) {
      return Wait(DispatchReason::kYieldsToAnticipated,
                  std::min(anticipated_until, self.share_ready_at));
    }
    if (other.queued == 0 || CapHolds(other, s.now)) continue;
    if (busy) return Wait(DispatchReason::kYieldsToQueued, self.share_ready_at);
    if (other.share_ready_at < self.share_ready_at ||
        (other.share_ready_at == self.share_ready_at && other.name < self.name)) {
      return Wait(DispatchReason::kYieldsToNearer, self.share_ready_at);
    }
  }
  return std::nullopt;
}

}  // namespace

absl::string_view DispatchReasonName(DispatchReason reason) {
  switch (reason) {
    case DispatchReason::kAdmit:
      return "admit";
    case DispatchReason::kNoRunningSlot:
      return "no running slot";
    case DispatchReason::kInFlightBound:
      return "in-flight bound";
    case DispatchReason::kBandwidthCap:
      return "bandwidth cap";
    case DispatchReason::kYieldsToInFlight:
      return "yields to in flight";
    case DispatchReason::kYieldsToAnticipated:
      return "yields to anticipated";
    case DispatchReason::kYieldsToQueued:
      return "yields to queued";
    case DispatchReason::kYieldsToNearer:
      return "yields to nearer";
  }
  return "admit";
}

DispatchDecision DecideDispatch(const DispatchSnapshot& s) {
  const DispatchPartition& p = s.partitions[s.candidate];
  if (p.running >= p.max_running_tasks) return Wait(DispatchReason::kNoRunningSlot);
  if (InFlightBoundHolds(s)) return Wait(DispatchReason::kInFlightBound);
  if (CapHolds(p, s.now)) return Wait(DispatchReason::kBandwidthCap, p.cap_ready_at);
  if (p.share_ready_at > s.now) {
    if (std::optional<DispatchDecision> yield = ShareYield(s)) return *yield;
  }
  return DispatchDecision{};
}

}  // namespace gpukit
