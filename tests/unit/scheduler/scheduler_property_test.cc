// The Scheduler's invariants under random sequences of operations: sessions open and close,
// memory is reserved and freed (reservations may outlive their session), tasks of all three
// QoS classes are submitted, started, finished and cancelled, and the fake clock moves, over
// two or three partitions on one or two devices. A model of what the header promises is kept
// beside the scheduler and compared after every step:
//   - memory: each session within its limit, each partition within its quota, each device
//     within its capacity, and all of them equal to the bytes held by live reservations;
//   - tasks: only legal state changes; running <= max_running_tasks, queued <=
//     max_queued_tasks; a task never overtakes one queued ahead of it in its partition;
//     nothing waits past its deadline; while Guaranteed work is active on a device, a
//     BestEffort or Burstable task is admitted only below its class's in-flight bound (or
//     with none of its class in flight); and nothing that may run is left waiting (no free
//     slot, bound or cap holds it, and, if its share is in debt, no other partition of the
//     device with work in flight, finished lately or queued has the better claim);
//   - pacing: each partition's pacing_balance is a token bucket charged each task's
//     estimate at admission and settled at its finish to its own part of its device time
//     (times the mean of 1 / tasks running on the device over its run; refunded if it never
//     ran), its debt cut to the burst when another partition of its device gets work after
//     a pause. Task names are unique, so every estimate is its class's fallback.
// At the end every task is ended, every session closed, every reservation dropped, and the
// scheduler must account for exactly nothing.
//
// Replay a failure with GPUKIT_TEST_SEED=<seed> (the failure prints it).
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/partition.h"
#include "daemon/scheduler/qos.h"
#include "daemon/scheduler/reason.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/scheduler/task.h"
#include "daemon/scheduler/token_bucket.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/scheduler/scheduler_printers.h"

namespace gpukit {

namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;

constexpr int kSequences = 200;
constexpr int kStepsPerSequence = 300;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kDeviceBytes = 64 * kMiB;
constexpr int64_t kMaxArrayBytes = 24 * kMiB;
constexpr absl::Duration kBurst = absl::Milliseconds(10);
// Shares, caps and compute requests are multiples of these, and times are whole
// microseconds, so the model's token buckets see exactly the scheduler's arithmetic.
constexpr double kShareStep = 0.25;
constexpr double kComputeStep = 0.125;
// The scheduler's default in-flight bounds, which are also the estimates of task names never
// measured (Guaranteed: the BestEffort bound).
constexpr absl::Duration kBestEffortBound = absl::Milliseconds(1);
constexpr absl::Duration kBurstableBound = absl::Milliseconds(4);
// The scheduler's default: how long a partition counts as busy after a finish.
constexpr absl::Duration kAnticipation = absl::Microseconds(250);

absl::Duration BoundOf(QosClass qos) {
  return qos == QosClass::kBurstable ? kBurstableBound : kBestEffortBound;
}

struct PartitionModel {
  PartitionSpec spec;
  TokenBucket share;
  std::optional<TokenBucket> cap;  // when the spec has a bandwidth cap
  int sessions = 0;
  int64_t used_bytes = 0;
  int64_t requested_bytes = 0;
  double compute_requested = 0;
  absl::Time last_finish = absl::InfinitePast();
};

// A device's running tasks and the integral of 1 / running over time, as the scheduler
// keeps them (started again from zero whenever none runs).
struct DeviceModel {
  int running = 0;
  double share_clock_ns = 0;
  absl::Time last = absl::InfinitePast();
  void Advance(absl::Time now) {
    if (running == 0) {
      share_clock_ns = 0;
    } else if (now > last) {
      share_clock_ns += absl::ToDoubleNanoseconds(now - last) / static_cast<double>(running);
    }
    last = std::max(last, now);
  }
};

struct SessionModel {
  std::string id;
  SessionTicket ticket;
  int partition = 0;
  QosClass qos = QosClass::kBestEffort;
  ResourceSpec resources;  // requests defaulted
  int64_t used_bytes = 0;
  bool ended = false;
};

struct HeldReservation {
  int session = 0;
  MemoryReservation reservation;
};

struct TaskModel {
  TaskRef ref;
  uint64_t id = 0;
  int session = 0;
  int partition = 0;
  QosClass qos = QosClass::kBestEffort;
  int priority = 0;  // clamped
  absl::Time deadline = absl::InfiniteFuture();
  TaskState state = TaskState::kPending;  // as last observed; Pending: not yet observed
  absl::Time started;
  double share_clock_at_start = 0;
};

// The order a partition's queue serves: QoS class, then priority (higher first), then
// arrival (task ids grow with arrival).
bool RunsBefore(const TaskModel& a, const TaskModel& b) {
  if (a.qos != b.qos) return a.qos < b.qos;
  if (a.priority != b.priority) return a.priority > b.priority;
  return a.id < b.id;
}

// What the step being checked did, beyond moving time: which changes it may cause.
struct StepIntent {
  std::optional<uint64_t> started;
  std::optional<uint64_t> finished;
  std::optional<uint64_t> cancelled;
  int ended_session = -1;
};

class Sequence {
 public:
  explicit Sequence(uint32_t seed) : rng_(seed) {}

  // Runs `steps` random operations, checking after each; then drains. Stops at the first
  // failure.
  void Run(int steps) {
    ASSERT_NO_FATAL_FAILURE(Build());
    for (step_ = 0; step_ < steps; ++step_) {
      intent_ = {};
      ASSERT_NO_FATAL_FAILURE(RandomStep());
      ASSERT_NO_FATAL_FAILURE(Observe());
      ASSERT_NO_FATAL_FAILURE(CheckInvariants());
      if (::testing::Test::HasFailure()) return;
    }
    ASSERT_NO_FATAL_FAILURE(DrainAndCheckNothingIsLeft());
  }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  std::string Where() const { return absl::StrCat("step ", step_, ": ", op_); }

  // ---- Set-up ---------------------------------------------------------------------------

  void Build() {
    const int devices = Uniform(1, 2);
    const int partitions = Uniform(2, 3);
    device_used_.assign(devices, 0);
    devices_.assign(devices, DeviceModel{});
    std::vector<DeviceCapacity> capacities;
    for (int d = 0; d < devices; ++d) capacities.push_back({d, kDeviceBytes});
    // Every device gets a partition when there are enough of them.
    std::vector<int> device_of(partitions);
    for (int i = 0; i < partitions; ++i) device_of[i] = i < devices ? i : Uniform(0, devices - 1);
    std::vector<PartitionSpec> specs;
    for (int d = 0; d < devices; ++d) {
      std::vector<int> here;
      for (int i = 0; i < partitions; ++i) {
        if (device_of[i] == d) here.push_back(i);
      }
      // Quarters of compute: one each, then what is left spread at random, some unpromised.
      std::vector<int> quarters(here.size(), 1);
      for (int left = 4 - static_cast<int>(here.size()); left > 0; --left) {
        if (Chance(0.8)) ++quarters[Uniform(0, static_cast<int>(here.size()) - 1)];
      }
      for (size_t k = 0; k < here.size(); ++k) {
        PartitionSpec spec;
        spec.name = absl::StrCat("p", here[k]);
        spec.device_index = d;
        spec.memory_quota_bytes = kDeviceBytes / static_cast<int64_t>(here.size()) -
                                  (Chance(0.3) ? Uniform(1, 8) * kMiB : 0);
        spec.compute_share = quarters[k] * kShareStep;
        if (Chance(0.3)) spec.bandwidth_cap = Uniform(quarters[k], 4) * kShareStep;
        spec.max_running_tasks = Uniform(1, 3);
        spec.max_queued_tasks = Uniform(1, 4);
        spec.max_sessions = Chance(0.5) ? 0 : Uniform(2, 4);
        if (here[k] == 0 && Chance(0.5)) {
          spec.session_defaults.memory_request_bytes = kMiB;
          spec.session_defaults.memory_limit_bytes = 4 * kMiB;
        }
        specs.push_back(spec);
      }
    }
    std::sort(specs.begin(), specs.end(), [](const PartitionSpec& a, const PartitionSpec& b) {
      if (a.device_index != b.device_index) return a.device_index < b.device_index;
      return a.name < b.name;
    });
    SchedulerOptions options;
    options.limits.max_array_bytes = kMaxArrayBytes;
    options.limits.max_sessions = Uniform(4, 8);
    options.pacing_burst = kBurst;
    options.task_history = Uniform(0, 40);
    max_sessions_ = options.limits.max_sessions;
    task_history_ = options.task_history;
    absl::StatusOr<std::unique_ptr<Scheduler>> created =
        Scheduler::Create(clock_, capacities, specs, options);
    ASSERT_THAT(created, IsOk());
    scheduler_ = *std::move(created);
    for (const PartitionSpec& spec : specs) {
      PartitionModel model{spec, TokenBucket(spec.compute_share, kBurst, clock_.Now()),
                           std::nullopt};
      if (spec.bandwidth_cap > 0) model.cap.emplace(spec.bandwidth_cap, kBurst, clock_.Now());
      partitions_.push_back(std::move(model));
    }
  }

  // ---- Operations -----------------------------------------------------------------------

  void RandomStep() {
    const int roll = Uniform(0, 99);
    if (roll < 8) return OpenSession();
    if (roll < 12) return CloseSession();
    if (roll < 28) return Allocate();
    if (roll < 36) return Free();
    if (roll < 58) return SubmitTask();
    if (roll < 68) return StartTask();
    if (roll < 82) return FinishTask();
    if (roll < 88) return CancelTask();
    return AdvanceClock();
  }

  // A session of every QoS class, and sometimes none asked for (the partition's defaults).
  void OpenSession() {
    const int p = Uniform(0, static_cast<int>(partitions_.size()) - 1);
    PartitionModel& partition = partitions_[p];
    ResourceSpec requested;
    QosClass qos = QosClass::kBestEffort;
    switch (Uniform(0, 3)) {
      case 0:
        requested.memory_limit_bytes = (int64_t{1} << Uniform(0, 3)) * kMiB;
        requested.compute_limit = Uniform(1, 2) * kComputeStep;
        qos = QosClass::kGuaranteed;
        break;
      case 1:
        requested.memory_request_bytes = Uniform(1, 4) * kMiB;
        if (Chance(0.5)) requested.memory_limit_bytes = *requested.memory_request_bytes * 2;
        if (Chance(0.3)) requested.compute_request = kComputeStep;
        qos = QosClass::kBurstable;
        break;
      case 2:
        requested.memory_limit_bytes = Uniform(1, 8) * kMiB;  // a limit but no compute limit
        qos = QosClass::kBurstable;
        break;
      default:
        if (!partition.spec.session_defaults.empty()) qos = QosClass::kBurstable;
        break;
    }
    ResourceSpec resources = requested.empty() ? partition.spec.session_defaults : requested;
    // Requests default to limits.
    if (!resources.memory_request_bytes) {
      resources.memory_request_bytes = resources.memory_limit_bytes;
    }
    if (!resources.compute_request) resources.compute_request = resources.compute_limit;
    const int64_t memory_request = resources.memory_request_bytes.value_or(0);
    const double compute_request = resources.compute_request.value_or(0);

    RejectReason expected = RejectReason::kNone;
    if (open_sessions_ >= max_sessions_ ||
        (partition.spec.max_sessions > 0 && partition.sessions >= partition.spec.max_sessions)) {
      expected = RejectReason::kTooManySessions;
    } else if (memory_request > partition.spec.memory_quota_bytes - partition.requested_bytes ||
               compute_request >
                   partition.spec.compute_share - partition.compute_requested + 1e-9) {
      expected = RejectReason::kPartitionQuotaExceeded;
    }
    const std::string id = absl::StrCat("s-", sessions_.size() + refused_sessions_);
    op_ = absl::StrCat("open ", id, " (", QosName(qos), ") in ", partition.spec.name);
    SCOPED_TRACE(Where());
    absl::StatusOr<SessionAdmission> admission =
        scheduler_->AdmitSession(id, partition.spec.name, requested);
    if (expected != RejectReason::kNone) {
      ++refused_sessions_;
      EXPECT_THAT(admission, StatusIs(absl::StatusCode::kResourceExhausted));
      EXPECT_EQ(ReasonOf(admission.status()), expected);
      return;
    }
    ASSERT_THAT(admission, IsOk());
    EXPECT_EQ(admission->qos, qos);
    EXPECT_EQ(admission->partition, partition.spec.name);
    EXPECT_EQ(admission->device_index, partition.spec.device_index);
    EXPECT_EQ(admission->resources, resources);
    ++open_sessions_;
    ++partition.sessions;
    partition.requested_bytes += memory_request;
    partition.compute_requested += compute_request;
    sessions_.push_back({id, admission->ticket, p, qos, resources, 0, false});
  }

  // Mostly a live session; sometimes any, ended ones included. -1 if there is none.
  int PickSession() {
    if (sessions_.empty()) return -1;
    std::vector<int> live;
    for (int i = 0; i < static_cast<int>(sessions_.size()); ++i) {
      if (!sessions_[i].ended) live.push_back(i);
    }
    if (!live.empty() && Chance(0.9)) return live[Uniform(0, static_cast<int>(live.size()) - 1)];
    return Uniform(0, static_cast<int>(sessions_.size()) - 1);
  }

  void CloseSession() {
    std::vector<int> live;
    for (int i = 0; i < static_cast<int>(sessions_.size()); ++i) {
      if (!sessions_[i].ended) live.push_back(i);
    }
    if (live.empty()) return OpenSession();
    const int s = live[Uniform(0, static_cast<int>(live.size()) - 1)];
    SessionModel& session = sessions_[s];
    op_ = absl::StrCat("close ", session.id);
    EndSessionInModel(s);
    intent_.ended_session = s;
    scheduler_->EndSession(session.ticket);
  }

  void EndSessionInModel(int s) {
    SessionModel& session = sessions_[s];
    PartitionModel& partition = partitions_[session.partition];
    session.ended = true;
    --open_sessions_;
    --partition.sessions;
    partition.requested_bytes -= session.resources.memory_request_bytes.value_or(0);
    partition.compute_requested -= session.resources.compute_request.value_or(0);
  }

  void Allocate() {
    const int s = PickSession();
    if (s < 0) return OpenSession();
    SessionModel& session = sessions_[s];
    PartitionModel& partition = partitions_[session.partition];
    const int device = partition.spec.device_index;
    int64_t bytes = 0;
    const int size_class = Uniform(0, 9);
    if (size_class < 3) {
      bytes = Uniform(0, 256 * 1024);
    } else if (size_class < 6) {
      bytes = Uniform(1, 8 * 1024) * int64_t{1024};
    } else if (size_class < 9) {
      bytes = Uniform(8, 24) * kMiB;
    } else {
      bytes = Uniform(25, 40) * kMiB;  // above the array limit
    }
    op_ = absl::StrCat("reserve ", bytes, " bytes for ", session.id);
    SCOPED_TRACE(Where());

    // The header's order: array, session limit, device, partition quota.
    RejectReason expected = RejectReason::kNone;
    int64_t shortfall = 0;
    std::string plan_partition;
    const std::optional<int64_t>& limit = session.resources.memory_limit_bytes;
    if (bytes > kMaxArrayBytes) {
      expected = RejectReason::kArrayTooLarge;
    } else if (limit && session.used_bytes + bytes > *limit) {
      expected = RejectReason::kSessionLimitExceeded;
    } else if (device_used_[device] + bytes > kDeviceBytes) {
      expected = RejectReason::kDeviceMemoryExhausted;
      shortfall = device_used_[device] + bytes - kDeviceBytes;
      // When the partition is over its quota too, it reclaims its own memory first: the
      // plan names it and asks for the partition's shortfall.
      if (partition.used_bytes + bytes > partition.spec.memory_quota_bytes) {
        shortfall = partition.used_bytes + bytes - partition.spec.memory_quota_bytes;
        plan_partition = partition.spec.name;
      }
    } else if (partition.used_bytes + bytes > partition.spec.memory_quota_bytes) {
      expected = RejectReason::kPartitionQuotaExceeded;
      shortfall = partition.used_bytes + bytes - partition.spec.memory_quota_bytes;
      plan_partition = partition.spec.name;
    }
    ReclaimPlan plan;
    plan.shortfall_bytes = -1;
    absl::StatusOr<MemoryReservation> reserved =
        scheduler_->ReserveMemory(session.ticket, bytes, &plan);
    if (session.ended) {
      EXPECT_THAT(reserved, StatusIs(absl::StatusCode::kNotFound));
      return;
    }
    if (expected != RejectReason::kNone) {
      EXPECT_THAT(reserved, StatusIs(absl::StatusCode::kResourceExhausted));
      EXPECT_EQ(ReasonOf(reserved.status()), expected);
      if (shortfall > 0) {
        EXPECT_EQ(plan.device_index, device);
        EXPECT_EQ(plan.partition, plan_partition);
        EXPECT_EQ(plan.shortfall_bytes, shortfall);
        EXPECT_EQ(plan.requester.qos, session.qos);
        EXPECT_EQ(plan.requester.within_request,
                  session.used_bytes + bytes <= session.resources.memory_request_bytes.value_or(0));
      } else {
        EXPECT_EQ(plan.shortfall_bytes, -1) << "no plan when reclaim cannot help";
      }
      return;
    }
    ASSERT_THAT(reserved, IsOk());
    EXPECT_EQ(reserved->bytes(), bytes);
    session.used_bytes += bytes;
    partition.used_bytes += bytes;
    device_used_[device] += bytes;
    reservations_.push_back({s, *std::move(reserved)});
  }

  // Drops a reservation one of three ways: Release(), destruction, or assignment over it.
  void Free() {
    if (reservations_.empty()) return Allocate();
    const int i = Uniform(0, static_cast<int>(reservations_.size()) - 1);
    HeldReservation& held = reservations_[i];
    SessionModel& session = sessions_[held.session];
    const int64_t bytes = held.reservation.bytes();
    op_ = absl::StrCat("free ", bytes, " bytes of ", session.id, session.ended ? " (ended)" : "");
    session.used_bytes -= bytes;
    partitions_[session.partition].used_bytes -= bytes;
    device_used_[partitions_[session.partition].spec.device_index] -= bytes;
    switch (Uniform(0, 2)) {
      case 0:
        held.reservation.Release();
        break;
      case 1:
        held.reservation = MemoryReservation();
        break;
      default:
        break;  // the erase below destroys it
    }
    reservations_.erase(reservations_.begin() + i);
  }

  int QueuedIn(int p) const {
    int queued = 0;
    for (const TaskModel& t : tasks_) queued += t.partition == p && t.state == TaskState::kQueued;
    return queued;
  }

  void SubmitTask() {
    const int s = PickSession();
    if (s < 0) return OpenSession();
    SessionModel& session = sessions_[s];
    TaskRequest request;
    request.name = absl::StrCat("t", tasks_.size());
    request.priority = Uniform(-150, 150);
    if (Chance(0.3)) request.queue_timeout = absl::Microseconds(Uniform(0, 60000));
    op_ = absl::StrCat("submit ", request.name, " (", QosName(session.qos), ", priority ",
                       request.priority, ") for ", session.id);
    SCOPED_TRACE(Where());
    absl::StatusOr<TaskRef> submitted = scheduler_->Submit(session.ticket, request);
    if (session.ended) {
      EXPECT_THAT(submitted, StatusIs(absl::StatusCode::kNotFound));
      return;
    }
    if (QueuedIn(session.partition) >= partitions_[session.partition].spec.max_queued_tasks) {
      EXPECT_THAT(submitted, StatusIs(absl::StatusCode::kResourceExhausted));
      EXPECT_EQ(ReasonOf(submitted.status()), RejectReason::kQueueFull);
      return;
    }
    ASSERT_THAT(submitted, IsOk());
    // A partition that had nothing queued or in flight and finished nothing lately cuts the
    // debts of the others of its device to the burst.
    PartitionModel& mine = partitions_[session.partition];
    bool idle = clock_.Now() >= mine.last_finish + kAnticipation;
    for (const TaskModel& t : tasks_) {
      idle &= t.partition != session.partition ||
              (t.state != TaskState::kQueued && t.state != TaskState::kAdmitted &&
               t.state != TaskState::kRunning);
    }
    if (idle) {
      for (PartitionModel& other : partitions_) {
        if (&other == &mine || other.spec.device_index != mine.spec.device_index) continue;
        other.share.BalanceNs(clock_.Now());
        other.share.LimitDebt(kBurst);
      }
    }
    TaskModel task;
    task.ref = *submitted;
    task.id = scheduler_->IdOf(task.ref);
    task.session = s;
    task.partition = session.partition;
    task.qos = session.qos;
    task.priority = std::clamp(request.priority, -100, 100);
    task.deadline = clock_.Now() + request.queue_timeout;  // Submit read the same clock
    tasks_.push_back(std::move(task));
  }

  // A random task among those in `states`; -1 if none.
  int PickTask(std::initializer_list<TaskState> states) {
    std::vector<int> candidates;
    for (int i = 0; i < static_cast<int>(tasks_.size()); ++i) {
      if (std::find(states.begin(), states.end(), tasks_[i].state) != states.end()) {
        candidates.push_back(i);
      }
    }
    if (candidates.empty()) return -1;
    return candidates[Uniform(0, static_cast<int>(candidates.size()) - 1)];
  }

  void StartTask() {
    if (Chance(0.1)) {
      const int t = PickTask({TaskState::kCancelled, TaskState::kExpired});
      if (t >= 0) {
        op_ = absl::StrCat("start ended task ", tasks_[t].id);
        SCOPED_TRACE(Where());
        EXPECT_THAT(scheduler_->Start(tasks_[t].ref), StatusIs(absl::StatusCode::kCancelled));
        return;
      }
    }
    const int t = PickTask({TaskState::kAdmitted});
    if (t < 0) return SubmitTask();
    op_ = absl::StrCat("start task ", tasks_[t].id);
    SCOPED_TRACE(Where());
    intent_.started = tasks_[t].id;
    EXPECT_THAT(scheduler_->Start(tasks_[t].ref), IsOk());
    DeviceModel& device = devices_[partitions_[tasks_[t].partition].spec.device_index];
    device.Advance(clock_.Now());
    ++device.running;
    tasks_[t].started = clock_.Now();
    tasks_[t].share_clock_at_start = device.share_clock_ns;
  }

  void FinishTask() {
    const bool ended = Chance(0.1);
    const int t = ended ? PickTask({TaskState::kSucceeded, TaskState::kFailed,
                                    TaskState::kCancelled, TaskState::kExpired})
                        : PickTask({TaskState::kAdmitted, TaskState::kRunning});
    if (t < 0) return StartTask();
    TaskModel& task = tasks_[t];
    const absl::Duration device_time = absl::Microseconds(Uniform(0, 40000));
    const bool ok = Chance(0.8);
    op_ = absl::StrCat("finish task ", task.id, " (", TaskStateName(task.state), ") ",
                       ok ? "ok" : "failed", " after ", absl::FormatDuration(device_time));
    if (!ended) {
      intent_.finished = task.id;
      // Settled at the finish to the task's own part of its device time: the buckets first
      // fill (up to the burst) until now.
      PartitionModel& partition = partitions_[task.partition];
      absl::Duration own = device_time;
      if (task.state == TaskState::kRunning) {
        DeviceModel& device = devices_[partition.spec.device_index];
        device.Advance(clock_.Now());
        const absl::Duration span = clock_.Now() - task.started;
        if (span > absl::ZeroDuration()) {
          own = device_time * std::clamp((device.share_clock_ns - task.share_clock_at_start) /
                                             absl::ToDoubleNanoseconds(span),
                                         0.0, 1.0);
        }
        --device.running;
      }
      partition.last_finish = clock_.Now();
      partition.share.BalanceNs(clock_.Now());
      partition.share.Settle(BoundOf(task.qos), own);
      if (partition.cap) {
        partition.cap->BalanceNs(clock_.Now());
        partition.cap->Settle(BoundOf(task.qos), own);
      }
    }
    scheduler_->Finish(task.ref, ok ? absl::OkStatus() : absl::InternalError("kernel fault"),
                       device_time);
  }

  void CancelTask() {
    if (tasks_.empty() || Chance(0.05)) {
      op_ = "cancel an unknown task";
      SCOPED_TRACE(Where());
      EXPECT_THAT(scheduler_->Cancel(1000000 + Uniform(0, 1000), "unknown"),
                  StatusIs(absl::StatusCode::kNotFound));
      return;
    }
    TaskModel& task = tasks_[Uniform(0, static_cast<int>(tasks_.size()) - 1)];
    op_ = absl::StrCat("cancel task ", task.id, " (", TaskStateName(task.state), ")");
    SCOPED_TRACE(Where());
    const absl::Status status = scheduler_->Cancel(task.id, "property test");
    switch (task.state) {
      case TaskState::kQueued:
      case TaskState::kAdmitted:
        intent_.cancelled = task.id;
        EXPECT_THAT(status, IsOk());
        break;
      case TaskState::kRunning:
        EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition));
        break;
      default:
        EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound));
        break;
    }
  }

  void AdvanceClock() {
    const absl::Duration by =
        Chance(0.05) ? absl::Seconds(1) : absl::Microseconds(Uniform(0, 50000));
    op_ = absl::StrCat("advance the clock by ", absl::FormatDuration(by), " and pump");
    SCOPED_TRACE(Where());
    clock_.Advance(by);
    const absl::Time next = scheduler_->Pump();
    EXPECT_GT(next, clock_.Now()) << "Pump handled everything due now";
  }

  // ---- Checks ---------------------------------------------------------------------------

  // Guaranteed work that bounds the other classes on the device: admitted or running, or
  // queued in a partition whose own bandwidth cap does not hold it back.
  int GuaranteedActiveOn(int device, absl::Time now) {
    int active = 0;
    for (const TaskModel& t : tasks_) {
      PartitionModel& p = partitions_[t.partition];
      if (t.qos != QosClass::kGuaranteed || p.spec.device_index != device) continue;
      const bool capped = p.cap.has_value() && !p.cap->Ready(now);
      active += (t.state == TaskState::kQueued && !capped) || t.state == TaskState::kAdmitted ||
                t.state == TaskState::kRunning;
    }
    return active;
  }

  // Reads every unended task's state and checks that it changed only as the step allows.
  void Observe() {
    SCOPED_TRACE(Where());
    const absl::Time now = clock_.Now();
    admitted_now_.clear();
    std::vector<int> refunded;  // admitted tasks cancelled: they never ran
    for (int i = 0; i < static_cast<int>(tasks_.size()); ++i) {
      TaskModel& task = tasks_[i];
      if (IsTerminal(task.state)) continue;
      const TaskState was = task.state;
      const TaskState is = scheduler_->StateOf(task.ref);
      if (is == was) continue;
      SCOPED_TRACE(::testing::Message() << "task " << task.id << " went from " << TaskStateName(was)
                                        << " to " << TaskStateName(is));
      const bool waiting = was == TaskState::kPending || was == TaskState::kQueued;
      switch (is) {
        case TaskState::kQueued:
          EXPECT_EQ(was, TaskState::kPending);
          break;
        case TaskState::kAdmitted:
          EXPECT_TRUE(waiting);
          admitted_now_.push_back(i);
          break;
        case TaskState::kRunning:
          EXPECT_EQ(was, TaskState::kAdmitted);
          EXPECT_EQ(intent_.started, task.id);
          break;
        case TaskState::kSucceeded:
        case TaskState::kFailed:
          EXPECT_TRUE(was == TaskState::kAdmitted || was == TaskState::kRunning);
          EXPECT_EQ(intent_.finished, task.id);
          break;
        case TaskState::kCancelled:
          EXPECT_TRUE(waiting || was == TaskState::kAdmitted);
          if (was == TaskState::kAdmitted) refunded.push_back(i);
          EXPECT_TRUE(intent_.cancelled == task.id || intent_.ended_session == task.session);
          break;
        case TaskState::kExpired:
          EXPECT_TRUE(waiting);
          EXPECT_LE(task.deadline, now);
          break;
        case TaskState::kPending:
          ADD_FAILURE() << "back to Pending";
          break;
      }
      task.state = is;
    }
    // The buckets as the scheduler changed them: in a step, what ends (and is refunded) does
    // so before the pump admits (and charges). A partition admits in its queue's order, and
    // each admission needs its cap in credit as the one before left it.
    for (int i : refunded) {
      PartitionModel& partition = partitions_[tasks_[i].partition];
      partition.share.BalanceNs(now);
      partition.share.Settle(BoundOf(tasks_[i].qos), absl::ZeroDuration());
      if (partition.cap) {
        partition.cap->BalanceNs(now);
        partition.cap->Settle(BoundOf(tasks_[i].qos), absl::ZeroDuration());
      }
    }
    std::sort(admitted_now_.begin(), admitted_now_.end(),
              [&](int a, int b) { return RunsBefore(tasks_[a], tasks_[b]); });
    for (int i : admitted_now_) {
      PartitionModel& partition = partitions_[tasks_[i].partition];
      partition.share.BalanceNs(now);
      partition.share.Charge(BoundOf(tasks_[i].qos));
      if (partition.cap) {
        EXPECT_TRUE(partition.cap->Ready(now))
            << "task " << tasks_[i].id << " admitted while its partition's cap is in debt";
        partition.cap->Charge(BoundOf(tasks_[i].qos));
      }
    }
    // Session end cancels its waiting and admitted tasks, and only those.
    if (intent_.ended_session >= 0) {
      for (const TaskModel& task : tasks_) {
        if (task.session != intent_.ended_session) continue;
        EXPECT_TRUE(IsTerminal(task.state) || task.state == TaskState::kRunning)
            << "task " << task.id << " of the ended session is " << TaskStateName(task.state);
      }
    }
  }

  void CheckInvariants() {
    SCOPED_TRACE(Where());
    const absl::Time now = clock_.Now();
    const std::vector<PartitionStatus> listed = scheduler_->ListPartitions();
    ASSERT_EQ(listed.size(), partitions_.size());

    // Per partition: the queue's front (the task it serves next) and its counts.
    const int n = static_cast<int>(partitions_.size());
    std::vector<int> front(n, -1), queued(n, 0), running(n, 0);
    for (int i = 0; i < static_cast<int>(tasks_.size()); ++i) {
      const TaskModel& t = tasks_[i];
      if (t.state == TaskState::kQueued) {
        ++queued[t.partition];
        if (front[t.partition] < 0 || RunsBefore(t, tasks_[front[t.partition]])) {
          front[t.partition] = i;
        }
        EXPECT_GT(t.deadline, now) << "task " << t.id << " waits past its deadline";
      } else if (t.state == TaskState::kAdmitted || t.state == TaskState::kRunning) {
        ++running[t.partition];
      }
    }

    for (int p = 0; p < n; ++p) {
      PartitionModel& model = partitions_[p];
      const PartitionStatus& status = listed[p];
      ASSERT_EQ(status.spec.name, model.spec.name);
      SCOPED_TRACE(::testing::Message() << "partition " << model.spec.name);
      EXPECT_EQ(status.memory_used_bytes, model.used_bytes);
      EXPECT_LE(status.memory_used_bytes, model.spec.memory_quota_bytes);
      EXPECT_EQ(status.memory_requested_bytes, model.requested_bytes);
      EXPECT_DOUBLE_EQ(status.compute_requested, model.compute_requested);
      EXPECT_EQ(status.sessions, model.sessions);
      EXPECT_EQ(status.queued, queued[p]);
      EXPECT_EQ(status.running, running[p]);
      EXPECT_LE(status.queued, model.spec.max_queued_tasks);
      EXPECT_LE(status.running, model.spec.max_running_tasks);
      EXPECT_EQ(status.pacing_balance, absl::Nanoseconds(model.share.BalanceNs(now)))
          << "the share bucket is charged exactly the device time of finished tasks";
    }

    for (int d = 0; d < static_cast<int>(device_used_.size()); ++d) {
      EXPECT_EQ(scheduler_->device_memory_used(d), device_used_[d]) << "device " << d;
      EXPECT_LE(device_used_[d], kDeviceBytes);
    }
    for (const SessionModel& session : sessions_) {
      const SessionUsage usage = scheduler_->Usage(session.ticket);
      EXPECT_EQ(usage.memory_used_bytes, session.used_bytes) << session.id;
      if (session.resources.memory_limit_bytes) {
        EXPECT_LE(usage.memory_used_bytes, *session.resources.memory_limit_bytes) << session.id;
      }
      EXPECT_EQ(usage.ended, session.ended) << session.id;
    }

    // Per device and class: tasks admitted or running and the sum of their estimates.
    const int devices = static_cast<int>(device_used_.size());
    std::vector<std::array<int, kQosClassCount>> in_flight(devices);
    std::vector<std::array<absl::Duration, kQosClassCount>> in_flight_time(devices);
    for (const TaskModel& t : tasks_) {
      if (t.state != TaskState::kAdmitted && t.state != TaskState::kRunning) continue;
      const int d = partitions_[t.partition].spec.device_index;
      ++in_flight[d][static_cast<int>(t.qos)];
      in_flight_time[d][static_cast<int>(t.qos)] += BoundOf(t.qos);
    }

    // Admitted in this step: beside active Guaranteed work, a BestEffort or Burstable task
    // only while the sum before it was below its class's bound (the last one admitted saw
    // the sum less its own estimate); never ahead of a task its partition's queue serves
    // first. (Guaranteed work that is active now was active all through the step's pump:
    // a pump only admits, which keeps it active.)
    for (int i : admitted_now_) {
      const TaskModel& t = tasks_[i];
      const int device = partitions_[t.partition].spec.device_index;
      if (t.qos != QosClass::kGuaranteed && GuaranteedActiveOn(device, now) > 0) {
        const int c = static_cast<int>(t.qos);
        EXPECT_LT(in_flight_time[device][c] - BoundOf(t.qos), BoundOf(t.qos))
            << QosName(t.qos) << " task " << t.id
            << " admitted beyond its bound: " << in_flight[device][c]
            << " in flight beside Guaranteed work";
      }
      if (front[t.partition] >= 0) {
        EXPECT_TRUE(RunsBefore(t, tasks_[front[t.partition]]))
            << "task " << t.id << " overtook task " << tasks_[front[t.partition]].id;
      }
    }

    // Nothing that may run is left waiting. A queue's front may wait for a running slot,
    // for its class's in-flight bound, for its cap; and, while its share is in debt, for
    // another partition of the device with work in flight, or that finished a task less
    // than the anticipation ago and has nothing queued, or with work queued that its cap
    // does not hold, while the device has work in flight or that one is nearer to repaying.
    std::vector<bool> blocked(n, true);
    for (int p = 0; p < n; ++p) {
      if (front[p] < 0) continue;
      PartitionModel& model = partitions_[p];
      const int d = model.spec.device_index;
      const QosClass qos = tasks_[front[p]].qos;
      const int c = static_cast<int>(qos);
      const bool no_slot = running[p] >= model.spec.max_running_tasks;
      const bool bounded = qos != QosClass::kGuaranteed && in_flight[d][c] > 0 &&
                           in_flight_time[d][c] >= BoundOf(qos) && GuaranteedActiveOn(d, now) > 0;
      const bool capped = model.cap.has_value() && !model.cap->Ready(now);
      blocked[p] = no_slot || bounded || capped;
    }
    for (int p = 0; p < n; ++p) {
      if (front[p] < 0 || blocked[p]) continue;
      PartitionModel& model = partitions_[p];
      EXPECT_FALSE(model.share.Ready(now)) << "task " << tasks_[front[p]].id << " of partition "
                                           << model.spec.name << " may run but waits";
      const int d = model.spec.device_index;
      const bool busy = in_flight[d][0] + in_flight[d][1] + in_flight[d][2] > 0;
      bool yields = false;
      for (int o = 0; o < n; ++o) {
        PartitionModel& other = partitions_[o];
        if (o == p || other.spec.device_index != d) continue;
        yields |= running[o] > 0 || (front[o] < 0 && now < other.last_finish + kAnticipation);
        if (front[o] < 0) continue;
        if (other.cap.has_value() && !other.cap->Ready(now)) continue;
        const absl::Time mine = model.share.ReadyAt(now);
        const absl::Time theirs = other.share.ReadyAt(now);
        yields |= busy || theirs < mine || (theirs == mine && other.spec.name < model.spec.name);
      }
      EXPECT_TRUE(yields) << "task " << tasks_[front[p]].id << " of partition " << model.spec.name
                          << " is held for its debt with no one to yield to";
    }
  }

  void DrainAndCheckNothingIsLeft() {
    op_ = "drain";
    SCOPED_TRACE(Where());
    // Running work cannot be cancelled: let it finish (which may admit more), then close
    // every session, which cancels what waits or was admitted.
    for (TaskModel& task : tasks_) {
      if (scheduler_->StateOf(task.ref) == TaskState::kRunning) {
        scheduler_->Finish(task.ref, absl::OkStatus(), absl::ZeroDuration());
      }
    }
    for (int s = 0; s < static_cast<int>(sessions_.size()); ++s) {
      if (sessions_[s].ended) continue;
      EndSessionInModel(s);
      scheduler_->EndSession(sessions_[s].ticket);
    }
    reservations_.clear();

    EXPECT_EQ(scheduler_->session_count(), 0);
    for (const TaskModel& task : tasks_) {
      EXPECT_TRUE(IsTerminal(scheduler_->StateOf(task.ref)))
          << "task " << task.id << " is " << TaskStateName(scheduler_->StateOf(task.ref));
    }
    for (int d = 0; d < static_cast<int>(device_used_.size()); ++d) {
      EXPECT_EQ(scheduler_->device_memory_used(d), 0) << "device " << d;
    }
    for (const PartitionStatus& status : scheduler_->ListPartitions()) {
      EXPECT_EQ(status.memory_used_bytes, 0) << status.spec.name;
      EXPECT_EQ(status.memory_requested_bytes, 0) << status.spec.name;
      EXPECT_EQ(status.compute_requested, 0) << status.spec.name;
      EXPECT_EQ(status.sessions, 0) << status.spec.name;
      EXPECT_EQ(status.queued, 0) << status.spec.name;
      EXPECT_EQ(status.running, 0) << status.spec.name;
    }
    for (const SessionModel& session : sessions_) {
      const SessionUsage usage = scheduler_->Usage(session.ticket);
      EXPECT_EQ(usage.memory_used_bytes, 0) << session.id;
      EXPECT_TRUE(usage.ended) << session.id;
    }
    EXPECT_TRUE(scheduler_->ListTasks({}).size() <= static_cast<size_t>(task_history_))
        << "only ended tasks are left, at most task_history of them";
  }

  std::mt19937 rng_;
  FakeClock clock_;
  // Declared after the clock it reads and before what holds its reservations and tasks.
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<PartitionModel> partitions_;  // by device, then name, as ListPartitions lists them
  std::vector<int64_t> device_used_;
  std::vector<DeviceModel> devices_;
  std::vector<SessionModel> sessions_;
  std::vector<TaskModel> tasks_;
  std::vector<HeldReservation> reservations_;
  int max_sessions_ = 0;
  int task_history_ = 0;
  int open_sessions_ = 0;
  int refused_sessions_ = 0;
  int step_ = 0;
  std::string op_ = "build";
  StepIntent intent_;
  std::vector<int> admitted_now_;  // indices into tasks_ admitted in the current step
};

TEST(SchedulerPropertyTest, RandomOperationsKeepEveryLimitAndLeaveNothingBehind) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 seeds(seed);
  for (int i = 0; i < kSequences; ++i) {
    SCOPED_TRACE(::testing::Message() << "sequence " << i);
    Sequence sequence(seeds());
    sequence.Run(kStepsPerSequence);
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace gpukit
