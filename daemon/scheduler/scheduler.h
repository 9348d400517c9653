// Scheduler: partitions, session admission, memory accounting, task queues and pacing; the
// one place where gpukitd decides who may use a device, how much and when.
//
// Everything is enforced, not advisory: a session is admitted against its partition's
// quota; every allocation holds a MemoryReservation counted against its session's limit,
// its partition's quota and its device until it is released; every task (op, kernel
// launch, transfer) waits in its partition's queue until the partition has a free running
// slot and pacing lets it go.
//
// Work is counted in device time. A task's device time is known once it has run (the caller
// measures it: CUDA events on a GPU, the stream thread's time on the CPU backend, so the
// scheduler itself needs no device); until then it is estimated per session and task name
// from the session's earlier tasks of that name (DeviceTimeEstimates: the measured time, a
// rise taken at once, a fall by a quarter per measurement). A name never measured is
// estimated at the in-flight bound of its session's class (Guaranteed: the BestEffort
// one), so an unknown BestEffort or Burstable task goes alone while Guaranteed work is
// active, until its first finish says what it costs.
//
// Bounded lower classes: while Guaranteed work is active on a device (a Guaranteed task
// admitted or running, or queued in a partition whose bandwidth cap does not hold it), a
// BestEffort task is admitted only while the estimated device time of the BestEffort tasks
// already admitted or running on the device is below `best_effort_in_flight`, and a
// Burstable task likewise below `burstable_in_flight` (its own sum). When none of its class
// is in flight one may always go, so nothing starves; without Guaranteed work there is no
// bound. A finish pumps, so a waiting task goes as soon as the bound allows.
//
// Pacing: each partition has a token bucket filled at its compute share and, if it has one,
// a second filled at its bandwidth cap, both up to `pacing_burst`. A task is charged its
// estimate when admitted and settled to its own device time when it finishes (the estimate
// comes back if it never ran). Tasks running at once share the device (a GPU runs all
// streams' kernels together) and each one's measured time includes the time it shared, so
// its own device time is the measured time times the mean of 1 / (tasks running on the
// device) over its run, Start to Finish; so a busy device's partitions are charged about its
// wall time, not a multiple of it. A partition whose cap bucket is empty waits, even on an
// idle device (the cap is a hard limit). A partition whose share bucket is empty yields to
// the other partitions of its device that have work in flight (on a GPU, what it would add
// shares the device with that work), that finished a task less than `pacing_anticipation`
// ago and have nothing queued (a synchronous client's next task is on its way), or that have
// work queued (not held by their own cap): while the device has work in flight, it waits
// until its debt is repaid or they go quiet; on an idle device the partition nearest to
// repaying (its bucket's ReadyAt; then by name) goes, one task at a time. When a partition
// that was quiet (nothing queued or in flight, no finish within the anticipation) gets a
// task, the others of its device have their share debt cut to `pacing_burst`: debt run up
// while nobody else wanted the device is forgiven, so nobody is held for long after running
// alone. A partition that reserves SMs (PartitionSpec::reserve_sms, PlaceSms) takes no part
// in the share rule, either way (its SMs are its own), and its tasks' clock counts only its
// own tasks running, scaled by its fraction of the device's SMs; the other partitions' count
// the tasks on the SMs left to them, scaled likewise. So under contention each busy
// partition gets its share of the device's time (the shares of a device sum to at most 1;
// what idle partitions leave goes in proportion), a lone busy partition gets the whole
// device (work-conserving: shares are guarantees under contention), and a Guaranteed task
// waits for no other partition's debt.
//
//   GPUKIT_ASSIGN_OR_RETURN(auto scheduler, Scheduler::Create(clock, devices, partitions, {}));
//   GPUKIT_ASSIGN_OR_RETURN(SessionAdmission s, scheduler->AdmitSession("s-1", "default", {}));
//   GPUKIT_ASSIGN_OR_RETURN(MemoryReservation r, scheduler->ReserveMemory(s.ticket, 4096));
//   GPUKIT_ASSIGN_OR_RETURN(TaskRef t, scheduler->Submit(s.ticket, {.name = "add"}));
//   GPUKIT_RETURN_IF_ERROR(scheduler->AwaitAdmission(t, [] { return false; }));
//   GPUKIT_RETURN_IF_ERROR(scheduler->Start(t));
//   ... run on the device, measure device_time ...
//   scheduler->Finish(t, status, device_time);
//
// Policy apart from mechanism: whether a queued task may start (slots, the in-flight bounds,
// pacing, as above) is DecideDispatch (dispatch_policy.h) over a snapshot of its device,
// which the scheduler builds, asks and acts on; and a task's state changes in one place, by
// the table of task.h, which refuses any other change with INTERNAL.
//
// Tests drive it without threads: Submit, Pump (admits what may run and expires what is
// overdue at the fake clock's time), Start, Finish, Cancel.
//
// Thread safety: thread-safe; one mutex guards all state. It owns no threads: callers that
// wait do so in AwaitAdmission. MemoryReservation and TaskRef may be dropped on any thread
// but must not outlive the scheduler.
#ifndef GPUKIT_DAEMON_SCHEDULER_SCHEDULER_H_
#define GPUKIT_DAEMON_SCHEDULER_SCHEDULER_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/dispatch_policy.h"
#include "daemon/scheduler/partition.h"
#include "daemon/scheduler/qos.h"
#include "daemon/scheduler/reclaim.h"
#include "daemon/scheduler/task.h"

namespace gpukit {

struct SchedulerOptions {
  AdmissionLimits limits;
  // Device time a partition may run ahead of its rate before pacing holds it back
  // (admitted work counts, by its estimate, until it finishes).
  absl::Duration pacing_burst = absl::Milliseconds(20);
  // How long a partition counts as busy after its last task finished, for the partitions
  // in debt that yield to it: a synchronous client's next task arrives a round trip after
  // its previous one finished, and a debtor let in during that gap would share the device
  // with it for the whole of its run. Longer than a client's round trip through the
  // daemon (about 100 us), much shorter than a light client's pause between tasks. gpukitd
  // turns it off by default (CoreOptions::pacing_anticipation says why: measured, a light
  // synchronous client's every request then holds a debtor back, too often).
  absl::Duration pacing_anticipation = absl::Microseconds(250);
  // While Guaranteed work is active on a device, BestEffort tasks are admitted there only
  // while the estimated device time of those already admitted or running is below this;
  // when none is, one may go. 1 ms is about ten 100 us slices of a sliced BestEffort
  // matmul: enough queued to cover the round trip from one task's end to the next one's
  // launch, so the flood keeps the GPU busy, while a Guaranteed task that arrives finds at
  // most about 1 ms of BestEffort work ahead of it where the device cannot preempt (about
  // its own p99 alone on the H100), and one slice where low-priority streams let it pass.
  absl::Duration best_effort_in_flight = absl::Milliseconds(1);
  // The same for Burstable tasks (their own sum): Burstable sits between, as in Kubernetes.
  absl::Duration burstable_in_flight = absl::Milliseconds(4);
  // Finished tasks kept for inspection (gpukitctl tasks), newest last; older ones drop.
  int task_history = 1000;
};

struct DeviceCapacity {
  int index = 0;
  int64_t memory_bytes = 0;
};

class Scheduler;
struct SessionAccount;
struct PartitionState;
struct Task;

// The scheduler's record of the tasks running (started, not finished) on one range of a
// device's SMs, and the integral over time of 1 / running while any runs: a task's share of
// the range between two readings is their difference over the time between them.
struct ShareClock {
  int running = 0;
  double ns = 0;
  absl::Time last = absl::InfinitePast();
  // Brings the integral up to `now`; call before `running` changes.
  void Advance(absl::Time now);
};
using SessionTicket = std::shared_ptr<SessionAccount>;
using TaskRef = std::shared_ptr<Task>;

// What Submit saw, for its caller: whether the task was admitted at once (AwaitAdmission
// would return at once), and HigherClassSessionOpen's answer at that moment.
struct SubmitNotes {
  bool admitted = false;
  bool higher_class_open = false;
};

// A task's end, for Finish.
struct TaskEnd {
  TaskRef task;
  absl::Status result;
  absl::Duration device_time;
};

struct SessionAdmission {
  SessionTicket ticket;
  std::string partition;
  int device_index = 0;
  QosClass qos = QosClass::kBestEffort;
  ResourceSpec resources;  // requests defaulted from limits
};

// Bytes counted against a session, its partition and its device until released (or
// destroyed). Move-only.
class MemoryReservation {
 public:
  MemoryReservation() = default;
  MemoryReservation(MemoryReservation&& other) noexcept;
  MemoryReservation& operator=(MemoryReservation&& other) noexcept;
  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;
  ~MemoryReservation() { Release(); }

  int64_t bytes() const { return bytes_; }
  // Returns the bytes now (at the end of the thread's MemoryReturnBatch, inside one); later
  // calls do nothing.
  void Release();

 private:
  friend class Scheduler;
  MemoryReservation(Scheduler* scheduler, SessionTicket account, int64_t bytes);
  Scheduler* scheduler_ = nullptr;
  SessionTicket account_;
  int64_t bytes_ = 0;
};

// While one lives on a thread, the reservations released on that thread return their bytes
// when it ends, under one scheduler lock, not one lock each: a pipeline's completion thread
// drops a batch of ops' arrays at once.
//
//   {
//     MemoryReturnBatch returns;
//     batch.clear();  // each array whose last pin goes releases its reservation
//   }                 // one lock for all of them
//
// Nested batches return at the end of the outermost. One thread at a time (its own); the
// schedulers must outlive it, as they must outlive a reservation. Reserve nothing on a
// thread inside a batch: what a reclaim spills there returns its bytes only at the batch's
// end, so the retry after it would find nothing freed.
class MemoryReturnBatch {
 public:
  MemoryReturnBatch();
  ~MemoryReturnBatch();
  MemoryReturnBatch(const MemoryReturnBatch&) = delete;
  MemoryReturnBatch& operator=(const MemoryReturnBatch&) = delete;

 private:
  friend class MemoryReservation;
  struct Return {
    Scheduler* scheduler;
    SessionTicket account;
    int64_t bytes;
  };
  // The thread's outermost batch, or null.
  static MemoryReturnBatch*& Current();
  bool outermost_ = false;
  std::vector<Return> returns_;
};

// What ReserveMemory could not fit, for the caller to reclaim and try again.
struct ReclaimPlan {
  int device_index = 0;
  // Victims must come from this partition; empty: from any partition of the device.
  std::string partition;
  int64_t shortfall_bytes = 0;
  Requester requester;
};

// Device time split by QoS class, indexed by static_cast<int>(QosClass).
using DeviceTimeByQos = std::array<absl::Duration, kQosClassCount>;

// GPU-time accounting. Finish charges each finished task's measured device time (the time
// between its two events on its stream) at once to its session, its partition (under the
// task's QoS class) and its session's tenant. These are sums of per-task times: tasks on
// different streams overlap on the device, so the time charged over an interval can exceed
// the interval's wall time. Totals only grow: a tenant's stay after its sessions end, and a
// partition's while the partition exists.
struct SessionUsage {
  std::string partition;
  QosClass qos = QosClass::kBestEffort;
  ResourceSpec resources;
  int64_t memory_used_bytes = 0;
  bool ended = false;
  std::string tenant;
  // Device time of the session's finished tasks, and how many finished (Succeeded or
  // Failed; a cancelled or expired task never ran).
  absl::Duration device_time;
  int64_t tasks_finished = 0;
};

// A tenant as the scheduler accounts for it, since the scheduler was created. Tenant names
// come from clients, so the scheduler keeps about kMaxTenants of them: past that, a new
// tenant makes room by folding an idle tenant (no session account refers to it: none open,
// and none held by a reservation or a task in the history) with the least device time into
// the entry kFoldedTenants, so sums over tenants still add up. When every tenant is in use,
// none is folded. A real tenant name cannot be kFoldedTenants (names are [A-Za-z0-9._-]).
inline constexpr int kMaxTenants = 4096;
inline constexpr absl::string_view kFoldedTenants = "(folded)";
struct TenantUsage {
  std::string tenant;
  int sessions = 0;               // open now
  int64_t memory_used_bytes = 0;  // reserved by its sessions now
  absl::Duration device_time_total;
  DeviceTimeByQos device_time_by_qos{};  // by the QoS class of the session that ran the task
  int64_t tasks_finished = 0;            // Succeeded or Failed
  int64_t tasks_failed = 0;
};

struct PartitionStatus {
  PartitionSpec spec;
  int sessions = 0;
  int64_t memory_used_bytes = 0;
  int64_t memory_requested_bytes = 0;  // sum of its sessions' requests
  double compute_requested = 0;
  int queued = 0;
  int running = 0;  // admitted or running
  int64_t admitted_total = 0;
  int64_t succeeded_total = 0;
  int64_t failed_total = 0;
  absl::Duration device_time_total;
  DeviceTimeByQos device_time_by_qos{};  // sums to device_time_total
  // Refusals and ends by reason (QUEUE_FULL, DEADLINE_EXCEEDED, CANCELLED, quota ...),
  // indexed by RejectReason.
  std::array<int64_t, kRejectReasonCount> rejected{};
  // Share bucket balance: negative while the partition is paying back device time.
  absl::Duration pacing_balance;
  // How long the partition has had work queued that pacing held back (its share bucket in
  // debt while it yields to another partition, or its bandwidth cap), in total; only grows.
  absl::Duration throttled_total;
  // SMs its streams may run on (Core fills it from its streams; the scheduler knows no
  // devices): see Core::ListPartitions. 0: no streams of its current placement yet.
  int sm_count = 0;
};

struct TaskFilter {
  std::optional<std::string> partition;
  std::optional<TaskState> state;
  int limit = 0;  // 0: all
};

class Scheduler {
 public:
  // `devices` lists every device; `partitions` are created in order (they must fit).
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const Clock& clock, std::vector<DeviceCapacity> devices,
      const std::vector<PartitionSpec>& partitions, const SchedulerOptions& options);
  ~Scheduler();

  // --- Partitions ---------------------------------------------------------------------
  // INVALID_ARGUMENT for a bad spec or device, ALREADY_EXISTS, RESOURCE_EXHAUSTED
  // (kDeviceOvercommitted) when it does not fit beside the device's other partitions.
  absl::Status CreatePartition(const PartitionSpec& spec);
  // Sets the fields of partition `name` that `mask` names to those of `values` (whose name
  // and device are ignored) and returns the partition's new spec. The read, the merge, the
  // checks and the write are one step under the scheduler's lock, so concurrent updates of
  // different fields all land. A quota below current use is allowed: nothing is taken away,
  // new allocations are refused until use falls below it. Waiting tasks a raised limit lets
  // go are admitted at once. Errors: NOT_FOUND, INVALID_ARGUMENT (the merged spec,
  // ValidatePartitionSpec), RESOURCE_EXHAUSTED (kDeviceOvercommitted) when it no longer fits
  // beside the device's other partitions; the partition is unchanged then. O(partitions).
  absl::StatusOr<PartitionSpec> UpdatePartition(absl::string_view name,
                                                const PartitionFieldMask& mask,
                                                const PartitionSpec& values);
  // Deletes a partition. With sessions in it: FAILED_PRECONDITION (kPartitionBusy) unless
  // `force`, in which case it returns their ids for the caller to close. NOT_FOUND.
  absl::StatusOr<std::vector<std::string>> DeletePartition(absl::string_view name, bool force);
  std::vector<PartitionStatus> ListPartitions() const;
  absl::StatusOr<PartitionSpec> GetPartition(absl::string_view name) const;

  // --- Sessions -----------------------------------------------------------------------
  // Admits a session into `partition` (empty: "default") with `requested` resources (none:
  // the partition's session defaults), acting for `tenant`, whose usage (ListTenants) it
  // counts in; the scheduler does not check the name (the session layer does) and an
  // empty one is accounted as the tenant "". NOT_FOUND for an unknown partition,
  // INVALID_ARGUMENT for bad resources, RESOURCE_EXHAUSTED (kTooManySessions,
  // kPartitionQuotaExceeded) when they do not fit.
  absl::StatusOr<SessionAdmission> AdmitSession(absl::string_view session_id,
                                                absl::string_view partition,
                                                const ResourceSpec& requested,
                                                absl::string_view tenant = {});
  // The session is gone: its waiting tasks are cancelled and its requests leave the
  // partition. Its memory returns as its reservations are released.
  void EndSession(const SessionTicket& ticket);
  // Whether a session of a class above the ticket's (Guaranteed above Burstable above
  // BestEffort) is open on its device: whether its work could ever be waited on by work of a
  // higher priority, so whether slicing its large ops (OpLaunch::sliceable) buys anything.
  bool HigherClassSessionOpen(const SessionTicket& ticket) const;
  // Whether the ticket's partition has fewer than half its maxRunningTasks tasks running or
  // queued: a pipeline takes slots past its base window only then (OpPipeline). Without the
  // scheduler's lock (one atomic, written under it as the counts change).
  bool PartitionHasSpareSlots(const SessionTicket& ticket) const;
  // The session's usage; it stays readable (and its device time keeps counting the tasks
  // that were running) after EndSession.
  SessionUsage Usage(const SessionTicket& ticket) const;
  // Every tenant that has had a session since the scheduler was created (but those folded
  // into kFoldedTenants), by name, with its usage (see "GPU-time accounting" above).
  // O(tenants); allocates the list.
  std::vector<TenantUsage> ListTenants() const;
  bool SpillEnabled(absl::string_view partition) const;
  int session_count() const;

  // --- Memory -------------------------------------------------------------------------
  // Reserves `bytes` for the session, or RESOURCE_EXHAUSTED with kArrayTooLarge,
  // kSessionLimitExceeded, kPartitionQuotaExceeded or kDeviceMemoryExhausted. When the
  // refusal is the partition's or the device's and spilling could help, `*plan` (if given)
  // says how much to reclaim and from where; the caller spills and calls again. Such a
  // refusal is not counted in the partition's rejections: if reclaiming does not help,
  // the caller reports the final refusal with CountRefusal. NOT_FOUND after EndSession.
  absl::StatusOr<MemoryReservation> ReserveMemory(const SessionTicket& ticket, int64_t bytes,
                                                  ReclaimPlan* plan = nullptr);
  void CountRefusal(const SessionTicket& ticket, RejectReason reason);
  int64_t device_memory_used(int device_index) const;
  // The device time of every task finished on the device since the scheduler was created
  // (what Finish charged, summed over its partitions, including deleted ones): its busy
  // time, which only grows. Zero for an unknown device. O(1).
  absl::Duration device_time_total(int device_index) const;

  // --- Tasks --------------------------------------------------------------------------
  // Queues a task (and admits it at once if it may run). Its deadline is the scheduler's
  // clock at submission plus request.queue_timeout: every deadline is read on the one clock
  // that judges it. RESOURCE_EXHAUSTED (kQueueFull), NOT_FOUND after EndSession.
  // With `notes`, also says what it saw (SubmitNotes), under the same lock.
  absl::StatusOr<TaskRef> Submit(const SessionTicket& ticket, const TaskRequest& request,
                                 SubmitNotes* notes = nullptr);
  // Admits every queued task that may run now and expires those past their deadline.
  // Returns when something may change next without a call (a deadline, a bucket refilled);
  // InfiniteFuture if nothing will.
  absl::Time Pump();
  // Blocks until the task is admitted (OK) or ends: CANCELLED (kCancelled) or
  // DEADLINE_EXCEEDED (kDeadlineExceeded). `cancelled` is polled every few milliseconds,
  // with the scheduler's lock held (so it must be cheap and must not call the scheduler);
  // when it returns true the task is cancelled. Waits in real time: the injected clock only
  // decides deadlines and pacing, so with a FakeClock this returns once another thread
  // advances the clock (or the task changes state) and pumps.
  absl::Status AwaitAdmission(const TaskRef& task, const std::function<bool()>& cancelled);
  // Admitted -> Running. CANCELLED if the task was cancelled after admission.
  absl::Status Start(const TaskRef& task);
  // Start and ReserveMemory(the task's session, `bytes`, `plan`) under one lock: for an op
  // whose inputs are resident, when only its output's allocation lies between the two. The
  // task starts only with the reservation made: on a refusal it stays Admitted (the caller
  // may reclaim and call again). CANCELLED as Start (nothing reserved).
  absl::StatusOr<MemoryReservation> StartWithMemory(const TaskRef& task, int64_t bytes,
                                                    ReclaimPlan* plan = nullptr);
  // Admitted or Running -> Succeeded (ok) or Failed; settles the task's pacing charge to
  // `device_time`, accounts it to the task's session, partition (by QoS class) and tenant,
  // failed or not (a failed task used the device too), and, for a task that ran and
  // succeeded, folds it into its session's estimate for its name. Pumps: what the task held
  // back may go. Does nothing for a task that already ended.
  void Finish(const TaskRef& task, const absl::Status& result, absl::Duration device_time);
  // Finish for each of `ends`, in order, under one lock and with one pump at the end: what a
  // pipeline's completion thread ends per batch of ops.
  void Finish(absl::Span<const TaskEnd> ends);
  // Cancels a waiting or admitted task. NOT_FOUND (unknown or finished),
  // FAILED_PRECONDITION for a running task (device work cannot be stopped midway).
  absl::Status Cancel(uint64_t task_id, absl::string_view why);
  TaskState StateOf(const TaskRef& task) const;
  uint64_t IdOf(const TaskRef& task) const;
  // Live tasks first (by id), then finished ones newest first.
  std::vector<TaskInfo> ListTasks(const TaskFilter& filter) const;

 private:
  friend class MemoryReservation;
  friend class MemoryReturnBatch;
  struct DeviceState {
    int64_t capacity_bytes = 0;
    int64_t used_bytes = 0;
    // Sessions open on the device, by QosClass.
    std::array<int, kQosClassCount> sessions{};
    // Tasks admitted or running, and the sum of their estimated device time, by QosClass.
    std::array<int, kQosClassCount> in_flight{};
    std::array<int64_t, kQosClassCount> in_flight_estimate_ns{};
    bool busy() const { return in_flight[0] + in_flight[1] + in_flight[2] > 0; }
    // The tasks running on the SMs no partition reserves (every SM when none does).
    ShareClock shared_clock;
    absl::Duration device_time_total;  // device_time_total(): every finished task's
  };

  Scheduler(const Clock& clock, std::vector<DeviceCapacity> devices,
            const SchedulerOptions& options);

  absl::StatusOr<PartitionState*> FindPartitionLocked(absl::string_view name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<PartitionSpec> OtherSpecsLocked(absl::string_view except) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckDeviceLocked(int device_index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time PumpLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finish without the pump.
  void FinishLocked(const TaskEnd& end, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HigherClassSessionOpenLocked(const SessionAccount& account) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The share clock a task of `p` runs under: p's own when it reserves SMs, else its
  // device's shared one.
  ShareClock& ClockOfLocked(PartitionState& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the SM fraction (PlaceSms) of every partition of the device. O(p log p).
  void PlaceSmsLocked(int device_index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The part of a finishing task's measured device time that was its own: `device_time`
  // times the mean of 1 / (tasks running on its SMs) over the task's run, times the fraction
  // of the device's SMs those are.
  absl::Duration OwnDeviceTimeLocked(const Task& task, absl::Duration device_time, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The in-flight bound of a class, which is also the estimate of a task name never measured.
  absl::Duration InFlightBound(QosClass qos) const;
  // The dispatch policy's view of p's device for a task of class `qos` at the head of p's
  // queue (dispatch_policy.h), in dispatch_ (reused, so building it allocates nothing once
  // warm). Accrues the buckets of the device's partitions to `now`. O(partitions).
  const DispatchSnapshot& DispatchSnapshotLocked(PartitionState& p, QosClass qos, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a task of class `qos` at the head of `p`'s queue may start now: asks
  // DecideDispatch over DispatchSnapshotLocked. Lowers `*next` to when pacing would allow it.
  // Sets `*paced` (if given) when it is pacing that holds the task.
  bool MayAdmitLocked(PartitionState& p, QosClass qos, absl::Time now, absl::Time* next,
                      bool* paced = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The one place a task's state changes: moves `task` to `to` if TaskTransitionAllowed
  // (task.h) lets it, stamping the time the new state records (admitted, started,
  // finished). Otherwise changes nothing, logs the refusal and returns INTERNAL naming both
  // states (CheckTaskTransition): a bug, since callers check the table first where a
  // request may race (Start, Finish, Cancel). Callers change their accounting only after
  // it succeeded.
  absl::Status TransitionLocked(Task& task, TaskState to, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queued -> Admitted: takes the task out of p's queue (if it is there: Submit admits a
  // task before queueing it), takes a running slot, charges its estimate. False (nothing
  // changed) if TransitionLocked refused.
  bool AdmitLocked(PartitionState& p, Task& task, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a live task to a terminal state and into the history, undoing what its state held
  // (its queue place, or its slot and in-flight charge). INTERNAL, changing nothing, if
  // TransitionLocked refuses.
  absl::Status EndTaskLocked(Task& task, TaskState state, absl::Time now, absl::string_view error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An admitted or running task leaves the device's in-flight sums; its charge is refunded
  // if Finish did not settle it (it never ran).
  // `was`: its state before it ended.
  void ReleaseInFlightLocked(Task& task, TaskState was, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountLocked(PartitionState& p, RejectReason reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes room in tenants_ (see kMaxTenants). O(tenants).
  void FoldIdleTenantLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // GPU-time accounting of a task that Finish ends: session, partition and tenant.
  void AccountFinishLocked(Task& task, absl::Duration device_time, bool failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReserveMemory's decision: counts `bytes` against the account, or returns the refusal.
  // The caller makes the MemoryReservation (not under the lock: its destructor takes it).
  absl::Status TakeMemoryLocked(SessionAccount& account, int64_t bytes, ReclaimPlan* plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StartLocked(Task& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReturnMemory(SessionAccount& account, int64_t bytes);
  void ReturnMemoryLocked(SessionAccount& account, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock& clock_;
  const SchedulerOptions options_;
  const DispatchLimits dispatch_limits_;  // options_'s, as the dispatch policy reads them
  mutable absl::Mutex mu_;
  std::vector<DeviceState> devices_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<PartitionState>> partitions_
      ABSL_GUARDED_BY(mu_);
  int sessions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_task_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, TaskRef> live_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, uint64_t>> deadlines_ ABSL_GUARDED_BY(mu_);
  std::deque<TaskRef> history_ ABSL_GUARDED_BY(mu_);  // ended tasks, oldest first
  DispatchSnapshot dispatch_ ABSL_GUARDED_BY(mu_);    // DispatchSnapshotLocked's, reused
  // Every tenant seen, never removed (a tenant's totals outlive its sessions); sessions
  // point at theirs.
  absl::flat_hash_map<std::string, std::shared_ptr<TenantUsage>> tenants_ ABSL_GUARDED_BY(mu_);
};

// NOT_FOUND "task N is not waiting or running (unknown or finished)": Cancel's answer for a
// task it does not hold, and the services' for a task the caller may not see.
absl::Status TaskNotFoundError(uint64_t task_id);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SCHEDULER_SCHEDULER_H_
