// Dispatch policy: whether the task at the head of a partition's queue may start on its
// device now. The Scheduler (the mechanism) takes a DispatchSnapshot of the device under
// its lock, asks DecideDispatch, and admits the task or notes when to ask again; the rules
// themselves live here, over plain values, and are tested with tables of snapshots.
//
//   DispatchSnapshot s;
//   s.now = clock.Now();
//   s.partitions = {{.name = "a", .running = 1, .max_running_tasks = 4, ...}, ...};
//   s.candidate = 0;  // the partition whose head task asks
//   s.qos = QosClass::kBestEffort;
//   const DispatchDecision d = DecideDispatch(s);
//   if (d.admit) ... admit the head ...; else wake_at = std::min(wake_at, d.ready_at);
//
// Assumptions:
//   1. The snapshot is of one device, at one instant `now`: every partition on it (the
//      candidate's included), the device's work in flight (tasks admitted or running) by
//      QoS class, and each partition's bucket readings as of `now`.
//   2. Within a partition, tasks start in their queue's order (class, then priority, then
//      arrival: TaskQueue); only the head is asked about (or a task submitted to an empty
//      queue), so no task overtakes one ahead of it in its own partition.
//   3. Between partitions there is no queue: the scheduler asks about each partition's head
//      and asks again until nothing more is admitted. The rules below say which partitions
//      hold back; what they decide does not depend on the order of `partitions`, except
//      which claim rule 4 reports (its reason and ready time), which is the first found.
//   4. Work in flight is counted by its estimated device time, charged when admitted.
//   5. A wait with no ready time ends with an event that makes the scheduler ask again (a
//      task finishes or is cancelled, a partition changes); a wait with one ends then at
//      the latest.
//
// Rules, in order; the first that holds decides (wait, with its reason), else admit:
//   1. Slots: the candidate partition has `max_running_tasks` tasks admitted or running
//      -> wait (kNoRunningSlot) for one to finish.
//   2. In-flight bound (BestEffort and Burstable only; a Guaranteed task skips it): while
//      Guaranteed work is active on the device (a Guaranteed task in flight, or queued in a
//      partition whose bandwidth cap does not hold it back), the estimates of the tasks of
//      the candidate's class in flight sum to at least its class's bound, and at least one
//      of its class is in flight -> wait (kInFlightBound). With none of its class in
//      flight one may always go, so nothing starves.
//   3. Bandwidth cap (hard): the candidate partition has a cap and its cap bucket is not
//      positive -> wait (kBandwidthCap) until the bucket refills, even on an idle device.
//   4. Share (work-conserving): the candidate partition's share bucket is not positive and
//      another partition of the device has a better claim on the device's time -> wait
//      until the share bucket refills (or the claim lapses). The others are taken in the
//      snapshot's order; for each, the first of these that holds is its claim:
//        a. it has work in flight (kYieldsToInFlight);
//        b. nothing queued, and it finished a task less than `pacing_anticipation` ago: a
//           synchronous client's next task is on its way (kYieldsToAnticipated; the claim
//           lapses at last_finish + pacing_anticipation, so the wait ends then at the
//           latest);
//        c. work queued that its own cap does not hold back, while the device has work in
//           flight (kYieldsToQueued);
//        d. the same on an idle device, and it is nearer to repaying its own share debt: an
//           earlier share_ready_at, or the same one and a smaller name (kYieldsToNearer).
//      A partition with no claim (idle, or queued work held by its cap) does not count; a
//      partition alone with work runs at full speed whatever its share bucket says.
//      Partitions that reserve SMs take no part: a reserved candidate never yields (holding
//      it back would only leave its SMs idle), a reserved other has no claim (its work is not
//      on the candidate's SMs), and "work in flight" in c and d means on the shared SMs.
//   5. Otherwise -> admit (kAdmit).
//
// Thread safety: pure functions over values.
#ifndef GPUKIT_DAEMON_SCHEDULER_DISPATCH_POLICY_H_
#define GPUKIT_DAEMON_SCHEDULER_DISPATCH_POLICY_H_

#include <array>
#include <cstddef>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/scheduler/qos.h"

namespace gpukit {

// The scheduler's options that the rules read (SchedulerOptions documents each).
struct DispatchLimits {
  absl::Duration best_effort_in_flight = absl::Milliseconds(1);
  absl::Duration burstable_in_flight = absl::Milliseconds(4);
  absl::Duration pacing_anticipation = absl::Microseconds(250);

  // Rule 2's bound for `qos` (BestEffort's for Guaranteed, which the rule never bounds:
  // the scheduler also estimates a task name never measured at this).
  absl::Duration InFlightBound(QosClass qos) const {
    return qos == QosClass::kBurstable ? burstable_in_flight : best_effort_in_flight;
  }
};

// One partition of the device, as the rules see it.
struct DispatchPartition {
  // Ties in rule 4d. Points at the caller's storage, which must outlive the snapshot.
  absl::string_view name;
  int running = 0;            // tasks admitted or running
  int max_running_tasks = 1;  // its spec's limit
  int queued = 0;             // tasks in its queue
  int guaranteed_queued = 0;  // of which Guaranteed
  // It has a bandwidth cap, and when its cap bucket turns positive (`now` if it is).
  bool capped = false;
  absl::Time cap_ready_at;
  // When its share bucket turns positive (`now` if it is).
  absl::Time share_ready_at;
  // When it last finished a task (InfinitePast: never).
  absl::Time last_finish = absl::InfinitePast();
  // Its streams run on SMs of its own (PartitionSpec::reserve_sms): rule 4 leaves it out.
  bool reserved_sms = false;
};

struct DispatchSnapshot {
  absl::Time now;
  DispatchLimits limits;
  // Work in flight on the device, by static_cast<int>(QosClass): how many tasks, and the
  // sum of their estimated device time.
  std::array<int, kQosClassCount> in_flight{};
  std::array<absl::Duration, kQosClassCount> in_flight_estimate{};
  // Every partition of the device.
  std::vector<DispatchPartition> partitions;
  // The question: may a task of class `qos` at the head of partitions[candidate] start?
  size_t candidate = 0;
  QosClass qos = QosClass::kBestEffort;
};

enum class DispatchReason {
  kAdmit,                // rule 5
  kNoRunningSlot,        // rule 1
  kInFlightBound,        // rule 2
  kBandwidthCap,         // rule 3
  kYieldsToInFlight,     // rule 4a
  kYieldsToAnticipated,  // rule 4b
  kYieldsToQueued,       // rule 4c
  kYieldsToNearer,       // rule 4d
};

// "admit", "no running slot", "in-flight bound", "bandwidth cap", "yields to in flight",
// "yields to anticipated", "yields to queued", "yields to nearer".
absl::string_view DispatchReasonName(DispatchReason reason);

struct DispatchDecision {
  bool admit = true;
  DispatchReason reason = DispatchReason::kAdmit;
  // When waiting on pacing (rules 3 and 4): when the rule that holds the task may let it
  // go without another event. InfiniteFuture otherwise (admitted, or waiting for an event).
  absl::Time ready_at = absl::InfiniteFuture();

  // Whether pacing (the cap or the share bucket) holds the task: the time counts as
  // throttled in the partition's status.
  bool paced() const { return !admit && reason >= DispatchReason::kBandwidthCap; }
};

// Applies the rules above to the head task of partitions[candidate]. Requires candidate <
// partitions.size(). O(partitions); allocates nothing.
DispatchDecision DecideDispatch(const DispatchSnapshot& s);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_DISPATCH_POLICY_H_
