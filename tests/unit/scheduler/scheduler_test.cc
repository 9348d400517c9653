// The Scheduler (daemon/scheduler/scheduler.h): partitions, session admission, memory
// accounting, task queues, pacing and the in-flight bounds, as its header specifies them. Time is
// a FakeClock and nothing runs on another thread, except in the AwaitAdmission tests, which
// need a second thread to block. The pure policy functions under it (QoS derivation,
// admission, partition fit, reclaim order, token bucket, task queue) have their own tests.
#include "daemon/scheduler/scheduler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/partition.h"
#include "daemon/scheduler/qos.h"
#include "daemon/scheduler/reason.h"
#include "daemon/scheduler/task.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/scheduler/scheduler_printers.h"

namespace gpukit {

namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kDeviceBytes = 64 * kMiB;

PartitionSpec Partition(std::string name, int64_t quota_bytes, double share, int device = 0) {
  PartitionSpec spec;
  spec.name = std::move(name);
  spec.device_index = device;
  spec.memory_quota_bytes = quota_bytes;
  spec.compute_share = share;
  return spec;
}

PartitionSpec WholeDevice(std::string name = "default") {
  return Partition(std::move(name), kDeviceBytes, 1.0);
}

// Every limit given and requests defaulted to them.
ResourceSpec Guaranteed(int64_t bytes = kMiB, double compute = 0.125) {
  ResourceSpec spec;
  spec.memory_limit_bytes = bytes;
  spec.compute_limit = compute;
  return spec;
}

ResourceSpec Burstable(int64_t request_bytes = kMiB) {
  ResourceSpec spec;
  spec.memory_request_bytes = request_bytes;
  return spec;
}

ResourceSpec BestEffort() { return {}; }

TaskRequest Named(std::string name, int priority = 0) {
  TaskRequest request;
  request.name = std::move(name);
  request.priority = priority;
  return request;
}

TaskRequest WithQueueTimeout(absl::Duration queue_timeout) {
  TaskRequest request;
  request.name = "deadline";
  request.queue_timeout = queue_timeout;
  return request;
}

SchedulerOptions Burst(absl::Duration burst) {
  SchedulerOptions options;
  options.pacing_burst = burst;
  return options;
}

SchedulerOptions History(int tasks) {
  SchedulerOptions options;
  options.task_history = tasks;
  return options;
}

class SchedulerTest : public ::testing::Test {
 protected:
  // Replaces the scheduler. Crashes (with the status) if Create refuses: every test builds a
  // valid one, and tests of Create's refusals call it directly.
  Scheduler& Build(const std::vector<PartitionSpec>& partitions, SchedulerOptions options = {},
                   std::vector<DeviceCapacity> devices = {{0, kDeviceBytes}}) {
    scheduler_ = *Scheduler::Create(clock_, std::move(devices), partitions, options);
    return *scheduler_;
  }

  Scheduler& scheduler() { return *scheduler_; }

  // Sets every field of the partition `spec` names (but its device) to spec's.
  absl::Status Update(const PartitionSpec& spec) {
    return scheduler_->UpdatePartition(spec.name, PartitionFieldMask::All(), spec).status();
  }

  // Admits a session, failing the test (and returning null) if it is refused.
  SessionTicket Open(absl::string_view partition, const ResourceSpec& resources = {}) {
    absl::StatusOr<SessionAdmission> admission =
        scheduler_->AdmitSession(absl::StrCat("s-", ++sessions_opened_), partition, resources);
    EXPECT_THAT(admission, IsOk());
    return admission.ok() ? admission->ticket : nullptr;
  }

  TaskRef Submit(const SessionTicket& session, const TaskRequest& request = Named("op")) {
    absl::StatusOr<TaskRef> task = scheduler_->Submit(session, request);
    EXPECT_THAT(task, IsOk());
    return task.ok() ? *task : nullptr;
  }

  // Submits a task, starts it and finishes it successfully, charging `device_time`.
  void RunToCompletion(const SessionTicket& session, absl::Duration device_time) {
    TaskRef task = Submit(session);
    ASSERT_NE(task, nullptr);
    ASSERT_THAT(scheduler_->Start(task), IsOk());
    scheduler_->Finish(task, absl::OkStatus(), device_time);
  }

  TaskState StateOf(const TaskRef& task) const { return scheduler_->StateOf(task); }

  PartitionStatus StatusOf(absl::string_view name) const {
    for (PartitionStatus& status : scheduler_->ListPartitions()) {
      if (status.spec.name == name) return status;
    }
    ADD_FAILURE() << "no partition \"" << name << "\"";
    return {};
  }

  int64_t Rejected(absl::string_view partition, RejectReason reason) const {
    return StatusOf(partition).rejected[static_cast<int>(reason)];
  }

  TaskInfo InfoOf(const TaskRef& task) const {
    const uint64_t id = scheduler_->IdOf(task);
    for (TaskInfo& info : scheduler_->ListTasks({})) {
      if (info.id == id) return info;
    }
    ADD_FAILURE() << "task " << id << " is not listed";
    return {};
  }

  FakeClock clock_;
  std::unique_ptr<Scheduler> scheduler_;
  int sessions_opened_ = 0;
};

// ======================================================================================
// Create and CreatePartition
// ======================================================================================

TEST_F(SchedulerTest, DefaultPartitionOverTheWholeDeviceTakesSessionsThatNameNoPartition) {
  Build({WholeDevice()});
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionAdmission admission,
                              scheduler().AdmitSession("s-1", "", BestEffort()));
  EXPECT_EQ(admission.partition, "default");
  EXPECT_EQ(admission.device_index, 0);
  const std::vector<PartitionStatus> partitions = scheduler().ListPartitions();
  ASSERT_EQ(partitions.size(), 1u);
  EXPECT_EQ(partitions[0].spec.memory_quota_bytes, kDeviceBytes);
  EXPECT_DOUBLE_EQ(partitions[0].spec.compute_share, 1.0);
  EXPECT_EQ(partitions[0].sessions, 1);
  EXPECT_EQ(scheduler().session_count(), 1);
}

TEST_F(SchedulerTest, CreatesPartitionsInOrderAndListsThemByDeviceThenName) {
  Build({Partition("zeta", 16 * kMiB, 0.5), Partition("alpha", 48 * kMiB, 0.5),
         Partition("beta", kDeviceBytes, 1.0, /*device=*/1)},
        {}, {{0, kDeviceBytes}, {1, kDeviceBytes}});
  std::vector<std::string> names;
  for (const PartitionStatus& p : scheduler().ListPartitions()) names.push_back(p.spec.name);
  EXPECT_THAT(names, ElementsAre("alpha", "zeta", "beta"));
  EXPECT_THAT(scheduler().GetPartition("beta"),
              IsOkAndHolds(::testing::Field(&PartitionSpec::device_index, 1)));
  EXPECT_THAT(scheduler().GetPartition("gamma"), StatusIs(absl::StatusCode::kNotFound));
}

struct PartitionSetCase {
  std::string name;
  std::vector<PartitionSpec> partitions;  // on two devices of kDeviceBytes each
  absl::StatusCode code;
  RejectReason reason;
};
void PrintTo(const PartitionSetCase& c, std::ostream* os) { *os << c.name; }

class PartitionSetTest : public SchedulerTest,
                         public ::testing::WithParamInterface<PartitionSetCase> {};

TEST_P(PartitionSetTest, CreateAcceptsOnlyPartitionsThatFitTheirDevice) {
  absl::StatusOr<std::unique_ptr<Scheduler>> created =
      Scheduler::Create(clock_, {{0, kDeviceBytes}, {1, kDeviceBytes}}, GetParam().partitions, {});
  EXPECT_THAT(created, StatusIs(GetParam().code));
  EXPECT_EQ(ReasonOf(created.status()), GetParam().reason);
}

INSTANTIATE_TEST_SUITE_P(
    Table, PartitionSetTest,
    ::testing::Values(
        PartitionSetCase{"QuotasSumToTheDevice",
                         {Partition("a", 16 * kMiB, 0.25), Partition("b", 48 * kMiB, 0.75)},
                         absl::StatusCode::kOk,
                         RejectReason::kNone},
        PartitionSetCase{
            "SharesWithRoundingSumToOne",
            {Partition("a", kMiB, 0.1), Partition("b", kMiB, 0.2), Partition("c", kMiB, 0.7)},
            absl::StatusCode::kOk,
            RejectReason::kNone},
        PartitionSetCase{
            "EachDeviceFullyPromised",
            {Partition("a", kDeviceBytes, 1.0, 0), Partition("b", kDeviceBytes, 1.0, 1)},
            absl::StatusCode::kOk,
            RejectReason::kNone},
        PartitionSetCase{"QuotasOvercommitMemory",
                         {Partition("a", 32 * kMiB, 0.25), Partition("b", 32 * kMiB + 1, 0.25)},
                         absl::StatusCode::kResourceExhausted,
                         RejectReason::kDeviceOvercommitted},
        PartitionSetCase{"SharesOvercommitCompute",
                         {Partition("a", kMiB, 0.6), Partition("b", kMiB, 0.5)},
                         absl::StatusCode::kResourceExhausted,
                         RejectReason::kDeviceOvercommitted},
        PartitionSetCase{"QuotaAboveTheDevice",
                         {Partition("a", kDeviceBytes + 1, 1.0)},
                         absl::StatusCode::kResourceExhausted,
                         RejectReason::kDeviceOvercommitted},
        PartitionSetCase{"UnknownDevice",
                         {Partition("a", kMiB, 0.5, /*device=*/2)},
                         absl::StatusCode::kInvalidArgument,
                         RejectReason::kNone},
        PartitionSetCase{"DuplicateName",
                         {Partition("a", kMiB, 0.5, 0), Partition("a", kMiB, 0.5, 1)},
                         absl::StatusCode::kAlreadyExists,
                         RejectReason::kNone},
        PartitionSetCase{"InvalidSpec",
                         {Partition("a b", kMiB, 0.5)},
                         absl::StatusCode::kInvalidArgument,
                         RejectReason::kNone}),
    [](const ::testing::TestParamInfo<PartitionSetCase>& info) { return info.param.name; });

TEST_F(SchedulerTest, CreatePartitionRefusesWhatDoesNotFitBesideExistingPartitions) {
  Build({Partition("a", 48 * kMiB, 0.5)});
  absl::Status status = scheduler().CreatePartition(Partition("b", 16 * kMiB + 1, 0.5));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(status), RejectReason::kDeviceOvercommitted);
  EXPECT_THAT(scheduler().CreatePartition(Partition("b", 16 * kMiB, 0.5)), IsOk());
  EXPECT_THAT(scheduler().CreatePartition(Partition("b", kMiB, 0.0625, /*device=*/0)),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(scheduler().CreatePartition(Partition("c", kMiB, 0.5, /*device=*/1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device 1")));
}

struct OptionsCase {
  std::string name;
  std::vector<DeviceCapacity> devices;
  SchedulerOptions options;
};
void PrintTo(const OptionsCase& c, std::ostream* os) { *os << c.name; }

class CreateOptionsTest : public SchedulerTest,
                          public ::testing::WithParamInterface<OptionsCase> {};

TEST_P(CreateOptionsTest, RefusesInvalidDevicesOrOptions) {
  EXPECT_THAT(Scheduler::Create(clock_, GetParam().devices, {}, GetParam().options),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

INSTANTIATE_TEST_SUITE_P(
    Table, CreateOptionsTest,
    ::testing::Values(OptionsCase{"NoDevice", {}, {}},
                      OptionsCase{"DevicesOutOfOrder", {{1, kDeviceBytes}, {0, kDeviceBytes}}, {}},
                      OptionsCase{
                          "ZeroPacingBurst", {{0, kDeviceBytes}}, Burst(absl::ZeroDuration())},
                      OptionsCase{"NegativeTaskHistory", {{0, kDeviceBytes}}, History(-1)},
                      OptionsCase{"ZeroBestEffortInFlight",
                                  {{0, kDeviceBytes}},
                                  {.best_effort_in_flight = absl::ZeroDuration()}},
                      OptionsCase{"NegativeBurstableInFlight",
                                  {{0, kDeviceBytes}},
                                  {.burstable_in_flight = -absl::Milliseconds(1)}},
                      OptionsCase{"NegativePacingAnticipation",
                                  {{0, kDeviceBytes}},
                                  {.pacing_anticipation = -absl::Microseconds(1)}}),
    [](const ::testing::TestParamInfo<OptionsCase>& info) { return info.param.name; });

// ======================================================================================
// UpdatePartition and DeletePartition
// ======================================================================================

TEST_F(SchedulerTest, UpdateKeepsAPartitionOnItsDevice) {
  Build({Partition("a", kDeviceBytes, 1.0)}, {}, {{0, kDeviceBytes}, {1, kDeviceBytes}});
  // The values' device is not a field an update sets.
  EXPECT_THAT(scheduler().UpdatePartition("a", PartitionFieldMask::All(),
                                          Partition("a", kMiB, 0.5, /*device=*/1)),
              IsOkAndHolds(::testing::Field(&PartitionSpec::device_index, 0)));
  EXPECT_THAT(scheduler().GetPartition("a"),
              IsOkAndHolds(::testing::Field(&PartitionSpec::device_index, 0)));
  EXPECT_THAT(Update(Partition("nope", kMiB, 0.5)), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SchedulerTest, UpdateChecksTheFitAgainstOtherPartitionsButNotItsOldSelf) {
  Build({Partition("a", 48 * kMiB, 0.75), Partition("b", 16 * kMiB, 0.25)});
  // Same size, other settings: fits only because its old spec is not counted.
  PartitionSpec a = Partition("a", 48 * kMiB, 0.75);
  a.max_sessions = 3;
  EXPECT_THAT(Update(a), IsOk());
  EXPECT_THAT(scheduler().GetPartition("a"),
              IsOkAndHolds(::testing::Field(&PartitionSpec::max_sessions, 3)));

  absl::Status grown = Update(Partition("a", 48 * kMiB + 1, 0.75));
  EXPECT_THAT(grown, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(grown), RejectReason::kDeviceOvercommitted);
  absl::Status more_share = Update(Partition("a", 48 * kMiB, 0.8));
  EXPECT_EQ(ReasonOf(more_share), RejectReason::kDeviceOvercommitted);
  EXPECT_THAT(scheduler().GetPartition("a"),
              IsOkAndHolds(::testing::Field(&PartitionSpec::memory_quota_bytes, 48 * kMiB)));

  // Shrinking b makes room for a to grow.
  EXPECT_THAT(Update(Partition("b", 8 * kMiB, 0.125)), IsOk());
  EXPECT_THAT(Update(Partition("a", 56 * kMiB, 0.875)), IsOk());
}

TEST_F(SchedulerTest, RaisingMaxRunningTasksAdmitsWaitingTasksAtOnce) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 1;
  Build({p});
  SessionTicket s = Open("p");
  TaskRef first = Submit(s);
  TaskRef second = Submit(s);
  TaskRef third = Submit(s);
  EXPECT_EQ(StateOf(first), TaskState::kAdmitted);
  EXPECT_EQ(StateOf(second), TaskState::kQueued);
  EXPECT_EQ(StateOf(third), TaskState::kQueued);

  p.max_running_tasks = 3;
  ASSERT_THAT(Update(p), IsOk());  // no Pump: the update admits
  EXPECT_EQ(StateOf(second), TaskState::kAdmitted);
  EXPECT_EQ(StateOf(third), TaskState::kAdmitted);
  EXPECT_EQ(StatusOf("p").running, 3);
  EXPECT_EQ(StatusOf("p").queued, 0);
}

// A batch of ends (a pipeline's completion batch) ends each task as Finish would, and the one
// pump at its end admits what their slots held back.
TEST_F(SchedulerTest, FinishOfABatchEndsEachTaskAndAdmitsWhatWaited) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 2;
  Build({p});
  SessionTicket s = Open("p");
  TaskRef first = Submit(s);
  TaskRef second = Submit(s);
  TaskRef third = Submit(s);
  ASSERT_THAT(scheduler().Start(first), IsOk());
  ASSERT_THAT(scheduler().Start(second), IsOk());
  EXPECT_EQ(StateOf(third), TaskState::kQueued);
  scheduler().Finish({TaskEnd{first, absl::OkStatus(), absl::Milliseconds(3)},
                      TaskEnd{second, absl::InternalError("boom"), absl::Milliseconds(2)},
                      TaskEnd{first, absl::OkStatus(), absl::Milliseconds(7)}});  // ended: ignored
  EXPECT_EQ(StateOf(first), TaskState::kSucceeded);
  EXPECT_EQ(StateOf(second), TaskState::kFailed);
  EXPECT_EQ(StateOf(third), TaskState::kAdmitted);
  EXPECT_EQ(scheduler().Usage(s).device_time, absl::Milliseconds(5));
  EXPECT_EQ(StatusOf("p").running, 1);
}

// Submit says whether it admitted the task at once (its caller then need not wait for the
// admission) and whether a session of a higher class is open on the device.
TEST_F(SchedulerTest, SubmitNotesTheAdmissionAndHigherClassSessions) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 1;
  Build({p});
  SessionTicket best_effort = Open("p", BestEffort());
  SubmitNotes notes;
  absl::StatusOr<TaskRef> first = scheduler().Submit(best_effort, Named("op"), &notes);
  ASSERT_THAT(first, IsOk());
  EXPECT_TRUE(notes.admitted);
  EXPECT_FALSE(notes.higher_class_open);
  SessionTicket guaranteed = Open("p", Guaranteed());
  notes = SubmitNotes{};
  absl::StatusOr<TaskRef> second = scheduler().Submit(best_effort, Named("op"), &notes);
  ASSERT_THAT(second, IsOk());
  EXPECT_FALSE(notes.admitted) << "the one slot is taken";
  EXPECT_TRUE(notes.higher_class_open);
  EXPECT_EQ(StateOf(*second), TaskState::kQueued);
  scheduler().EndSession(guaranteed);
}

TEST_F(SchedulerTest, QuotaLoweredBelowUseRefusesNewAllocationsButKeepsExistingOnes) {
  Build({Partition("p", 32 * kMiB, 1.0)});
  SessionTicket s = Open("p");
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation held, scheduler().ReserveMemory(s, 8 * kMiB));

  ASSERT_THAT(Update(Partition("p", 4 * kMiB, 1.0)), IsOk());
  EXPECT_EQ(held.bytes(), 8 * kMiB);
  EXPECT_EQ(StatusOf("p").memory_used_bytes, 8 * kMiB);
  EXPECT_EQ(scheduler().Usage(s).memory_used_bytes, 8 * kMiB);
  absl::StatusOr<MemoryReservation> refused = scheduler().ReserveMemory(s, 1);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(refused.status()), RejectReason::kPartitionQuotaExceeded);

  held.Release();  // use falls below the new quota
  EXPECT_EQ(StatusOf("p").memory_used_bytes, 0);
  EXPECT_THAT(scheduler().ReserveMemory(s, 4 * kMiB), IsOk());
}

TEST_F(SchedulerTest, DeletingAPartitionWithSessionsNeedsForceAndReturnsTheirIds) {
  Build({Partition("p", 32 * kMiB, 0.5), Partition("q", 32 * kMiB, 0.5)});
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionAdmission b, scheduler().AdmitSession("s-b", "p", {}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionAdmission a, scheduler().AdmitSession("s-a", "p", {}));

  absl::StatusOr<std::vector<std::string>> refused = scheduler().DeletePartition("p", false);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("2 open")));
  EXPECT_EQ(ReasonOf(refused.status()), RejectReason::kPartitionBusy);
  EXPECT_THAT(scheduler().GetPartition("p"), IsOk());

  EXPECT_THAT(scheduler().DeletePartition("p", true), IsOkAndHolds(ElementsAre("s-a", "s-b")));
  EXPECT_THAT(scheduler().GetPartition("p"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(scheduler().AdmitSession("s-c", "p", {}), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_EQ(scheduler().ListPartitions().size(), 1u);
  // The caller closes the sessions it was given.
  EXPECT_EQ(scheduler().session_count(), 2);
  scheduler().EndSession(a.ticket);
  scheduler().EndSession(b.ticket);
  EXPECT_EQ(scheduler().session_count(), 0);
}

TEST_F(SchedulerTest, DeletingAnEmptyPartitionFreesItsPartOfTheDevice) {
  Build({Partition("p", 32 * kMiB, 0.5), Partition("q", 32 * kMiB, 0.5)});
  EXPECT_THAT(scheduler().DeletePartition("p", false), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(scheduler().DeletePartition("p", true), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(scheduler().CreatePartition(Partition("r", 32 * kMiB, 0.5)), IsOk());
}

// ======================================================================================
// Sessions
// ======================================================================================

struct QosCase {
  std::string name;
  ResourceSpec requested;
  QosClass qos;
  ResourceSpec admitted;  // requests defaulted from limits
};
void PrintTo(const QosCase& c, std::ostream* os) { *os << c.name; }

class SessionQosTest : public SchedulerTest, public ::testing::WithParamInterface<QosCase> {};

TEST_P(SessionQosTest, AdmissionCarriesTheQosClassDerivedFromTheResources) {
  Build({WholeDevice()});
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionAdmission admission,
                              scheduler().AdmitSession("s-1", "default", GetParam().requested));
  EXPECT_EQ(admission.qos, GetParam().qos);
  EXPECT_EQ(admission.resources, GetParam().admitted);
  const SessionUsage usage = scheduler().Usage(admission.ticket);
  EXPECT_EQ(usage.qos, GetParam().qos);
  EXPECT_EQ(usage.resources, GetParam().admitted);
  EXPECT_EQ(usage.partition, "default");
  EXPECT_FALSE(usage.ended);
}

ResourceSpec Spec(std::optional<int64_t> memory_request, std::optional<int64_t> memory_limit,
                  std::optional<double> compute_request, std::optional<double> compute_limit) {
  ResourceSpec spec;
  spec.memory_request_bytes = memory_request;
  spec.memory_limit_bytes = memory_limit;
  spec.compute_request = compute_request;
  spec.compute_limit = compute_limit;
  return spec;
}

INSTANTIATE_TEST_SUITE_P(
    Table, SessionQosTest,
    ::testing::Values(QosCase{"LimitsOnlyAreGuaranteed", Spec({}, kMiB, {}, 0.25),
                              QosClass::kGuaranteed, Spec(kMiB, kMiB, 0.25, 0.25)},
                      QosCase{"RequestsEqualToLimitsAreGuaranteed", Spec(kMiB, kMiB, 0.5, 0.5),
                              QosClass::kGuaranteed, Spec(kMiB, kMiB, 0.5, 0.5)},
                      QosCase{"MemoryLimitOnlyIsBurstable", Spec({}, kMiB, {}, {}),
                              QosClass::kBurstable, Spec(kMiB, kMiB, {}, {})},
                      QosCase{"RequestBelowLimitIsBurstable", Spec(kMiB, 2 * kMiB, 0.25, 0.25),
                              QosClass::kBurstable, Spec(kMiB, 2 * kMiB, 0.25, 0.25)},
                      QosCase{"RequestOnlyIsBurstable", Spec(kMiB, {}, {}, {}),
                              QosClass::kBurstable, Spec(kMiB, {}, {}, {})},
                      QosCase{"NothingIsBestEffort", Spec({}, {}, {}, {}), QosClass::kBestEffort,
                              Spec({}, {}, {}, {})}),
    [](const ::testing::TestParamInfo<QosCase>& info) { return info.param.name; });

// Slicing a large op only helps if work of a higher priority can come: a session of a higher
// class open on the same device (another device's does not count), until it ends.
TEST_F(SchedulerTest, HigherClassSessionOpenSeesOnlyHigherClassesOnTheSameDevice) {
  Build({Partition("a", 32 * kMiB, 0.5, 0), Partition("b", 32 * kMiB, 0.5, 1)}, {},
        {{0, kDeviceBytes}, {1, kDeviceBytes}});
  const SessionTicket best_effort = Open("a", BestEffort());
  const SessionTicket burstable = Open("a", Burstable());
  EXPECT_TRUE(scheduler().HigherClassSessionOpen(best_effort)) << "Burstable is above it";
  EXPECT_FALSE(scheduler().HigherClassSessionOpen(burstable)) << "BestEffort is below it";
  const SessionTicket other_device = Open("b", Guaranteed());
  EXPECT_FALSE(scheduler().HigherClassSessionOpen(burstable)) << "another device's session";
  EXPECT_FALSE(scheduler().HigherClassSessionOpen(other_device));
  const SessionTicket guaranteed = Open("a", Guaranteed());
  EXPECT_TRUE(scheduler().HigherClassSessionOpen(burstable));
  EXPECT_FALSE(scheduler().HigherClassSessionOpen(guaranteed));
  scheduler().EndSession(guaranteed);
  scheduler().EndSession(guaranteed);  // twice: counted once
  EXPECT_FALSE(scheduler().HigherClassSessionOpen(burstable)) << "the Guaranteed one ended";
  scheduler().EndSession(burstable);
  EXPECT_FALSE(scheduler().HigherClassSessionOpen(best_effort)) << "alone on its device";
}

TEST_F(SchedulerTest, SessionWithoutResourcesInheritsThePartitionsSessionDefaults) {
  PartitionSpec p = WholeDevice("p");
  p.session_defaults = Guaranteed(4 * kMiB, 0.25);
  Build({p});
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionAdmission defaulted, scheduler().AdmitSession("s-1", "p", {}));
  EXPECT_EQ(defaulted.qos, QosClass::kGuaranteed);
  EXPECT_EQ(defaulted.resources, Spec(4 * kMiB, 4 * kMiB, 0.25, 0.25));
  EXPECT_EQ(StatusOf("p").memory_requested_bytes, 4 * kMiB);
  EXPECT_DOUBLE_EQ(StatusOf("p").compute_requested, 0.25);

  // Resources of its own replace the defaults entirely.
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionAdmission own,
                              scheduler().AdmitSession("s-2", "p", Burstable(kMiB)));
  EXPECT_EQ(own.qos, QosClass::kBurstable);
  EXPECT_EQ(own.resources, Burstable(kMiB));
  EXPECT_EQ(StatusOf("p").memory_requested_bytes, 5 * kMiB);
  EXPECT_DOUBLE_EQ(StatusOf("p").compute_requested, 0.25);
}

TEST_F(SchedulerTest, RefusesSessionWhoseRequestsExceedWhatThePartitionHasNotPromised) {
  Build({Partition("p", 16 * kMiB, 0.5), Partition("q", 48 * kMiB, 0.5)});
  SessionTicket first = Open("p", Burstable(12 * kMiB));
  absl::StatusOr<SessionAdmission> memory =
      scheduler().AdmitSession("s-x", "p", Burstable(5 * kMiB));
  EXPECT_THAT(memory, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("requests.memory")));
  EXPECT_EQ(ReasonOf(memory.status()), RejectReason::kPartitionQuotaExceeded);

  ResourceSpec compute;
  compute.compute_request = 0.75;
  absl::StatusOr<SessionAdmission> too_much_compute = scheduler().AdmitSession("s-y", "p", compute);
  EXPECT_EQ(ReasonOf(too_much_compute.status()), RejectReason::kPartitionQuotaExceeded);
  EXPECT_EQ(Rejected("p", RejectReason::kPartitionQuotaExceeded), 2);
  EXPECT_EQ(Rejected("q", RejectReason::kPartitionQuotaExceeded), 0);

  // Exactly what is left fits; limits may overcommit the quota.
  ResourceSpec rest = Burstable(4 * kMiB);
  rest.memory_limit_bytes = 16 * kMiB;
  EXPECT_THAT(scheduler().AdmitSession("s-z", "p", rest), IsOk());
  EXPECT_EQ(StatusOf("p").memory_requested_bytes, 16 * kMiB);
  EXPECT_EQ(StatusOf("p").sessions, 2);
  EXPECT_NE(first, nullptr);
}

TEST_F(SchedulerTest, PartitionMaxSessionsLimitsItsOpenSessions) {
  PartitionSpec p = Partition("p", 32 * kMiB, 0.5);
  p.max_sessions = 2;
  Build({p, Partition("q", 32 * kMiB, 0.5)});
  SessionTicket first = Open("p");
  Open("p");
  absl::StatusOr<SessionAdmission> third = scheduler().AdmitSession("s-3", "p", {});
  EXPECT_THAT(third, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(third.status()), RejectReason::kTooManySessions);
  EXPECT_EQ(Rejected("p", RejectReason::kTooManySessions), 1);
  EXPECT_THAT(scheduler().AdmitSession("s-4", "q", {}), IsOk());  // other partitions unaffected

  scheduler().EndSession(first);
  EXPECT_THAT(scheduler().AdmitSession("s-5", "p", {}), IsOk());
}

TEST_F(SchedulerTest, DaemonMaxSessionsLimitsSessionsAcrossPartitions) {
  SchedulerOptions options;
  options.limits.max_sessions = 2;
  Build({Partition("p", 32 * kMiB, 0.5), Partition("q", 32 * kMiB, 0.5)}, options);
  SessionTicket first = Open("p");
  Open("q");
  absl::StatusOr<SessionAdmission> third = scheduler().AdmitSession("s-3", "q", {});
  EXPECT_THAT(third, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(third.status()), RejectReason::kTooManySessions);
  EXPECT_EQ(Rejected("q", RejectReason::kTooManySessions), 1);
  EXPECT_EQ(scheduler().session_count(), 2);

  scheduler().EndSession(first);
  EXPECT_EQ(scheduler().session_count(), 1);
  EXPECT_THAT(scheduler().AdmitSession("s-4", "q", {}), IsOk());
}

TEST_F(SchedulerTest, EndSessionReturnsItsRequestsSoANewSessionFits) {
  Build({Partition("p", 16 * kMiB, 0.5), Partition("q", 48 * kMiB, 0.5)});
  SessionTicket big = Open("p", Guaranteed(16 * kMiB, 0.5));
  EXPECT_EQ(StatusOf("p").memory_requested_bytes, 16 * kMiB);
  EXPECT_EQ(ReasonOf(scheduler().AdmitSession("s-x", "p", Guaranteed(kMiB, 0.125)).status()),
            RejectReason::kPartitionQuotaExceeded);

  scheduler().EndSession(big);
  EXPECT_TRUE(scheduler().Usage(big).ended);
  EXPECT_EQ(StatusOf("p").memory_requested_bytes, 0);
  EXPECT_DOUBLE_EQ(StatusOf("p").compute_requested, 0.0);
  EXPECT_EQ(StatusOf("p").sessions, 0);
  EXPECT_EQ(scheduler().session_count(), 0);
  EXPECT_THAT(scheduler().AdmitSession("s-y", "p", Guaranteed(16 * kMiB, 0.5)), IsOk());

  scheduler().EndSession(big);  // a second end changes nothing
  EXPECT_EQ(scheduler().session_count(), 1);
  EXPECT_EQ(StatusOf("p").memory_requested_bytes, 16 * kMiB);
}

TEST_F(SchedulerTest, AdmitSessionRefusesUnknownPartitionsAndInvalidResources) {
  Build({WholeDevice()});
  EXPECT_THAT(scheduler().AdmitSession("s-1", "gpu-0", {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("the daemon has: default")));
  EXPECT_THAT(scheduler().AdmitSession("s-1", "default", Spec(2 * kMiB, kMiB, {}, {})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("requests.memory")));
  EXPECT_EQ(scheduler().session_count(), 0);
}

// ======================================================================================
// Memory
// ======================================================================================

// One session in partition "p" (a second partition takes the rest of the device), with
// `others_bytes` already reserved in "p" by another, BestEffort session and `used_bytes` by
// the session itself, asks for `bytes`.
struct AllocationCase {
  std::string name;
  ResourceSpec resources;
  int64_t quota_bytes;
  int64_t max_array_bytes;
  int64_t others_bytes;
  int64_t used_bytes;
  int64_t bytes;
  RejectReason reason;  // kNone: granted
  // When reclaim could help: what the plan says.
  std::optional<std::string> plan_partition;
  int64_t plan_shortfall_bytes = 0;
  bool plan_within_request = false;
};
void PrintTo(const AllocationCase& c, std::ostream* os) { *os << c.name; }

class AllocationTest : public SchedulerTest,
                       public ::testing::WithParamInterface<AllocationCase> {};

TEST_P(AllocationTest, ReserveMemoryChecksArraySessionLimitDeviceAndPartitionQuota) {
  const AllocationCase& c = GetParam();
  SchedulerOptions options;
  options.limits.max_array_bytes = c.max_array_bytes;
  std::vector<PartitionSpec> partitions = {Partition("p", c.quota_bytes, 0.5)};
  if (c.quota_bytes < kDeviceBytes) {
    partitions.push_back(Partition("rest", kDeviceBytes - c.quota_bytes, 0.5));
  }
  Build(partitions, options);
  SessionTicket other = Open("p", BestEffort());
  SessionTicket session = Open("p", c.resources);
  ASSERT_NE(session, nullptr);
  std::vector<MemoryReservation> theirs;  // in arrays no larger than the maximum
  for (int64_t left = c.others_bytes; left > 0; left -= c.max_array_bytes) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        MemoryReservation r, scheduler().ReserveMemory(other, std::min(left, c.max_array_bytes)));
    theirs.push_back(std::move(r));
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation mine,
                              scheduler().ReserveMemory(session, c.used_bytes));

  ReclaimPlan plan;
  plan.device_index = -1;
  plan.shortfall_bytes = -1;
  absl::StatusOr<MemoryReservation> reserved = scheduler().ReserveMemory(session, c.bytes, &plan);
  const int64_t before = c.others_bytes + c.used_bytes;
  if (c.reason == RejectReason::kNone) {
    ASSERT_THAT(reserved, IsOk());
    EXPECT_EQ(reserved->bytes(), c.bytes);
    EXPECT_EQ(scheduler().Usage(session).memory_used_bytes, c.used_bytes + c.bytes);
    EXPECT_EQ(StatusOf("p").memory_used_bytes, before + c.bytes);
    EXPECT_EQ(scheduler().device_memory_used(0), before + c.bytes);
    EXPECT_EQ(plan.shortfall_bytes, -1) << "a granted reservation leaves the plan alone";
    return;
  }
  EXPECT_THAT(reserved, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(reserved.status()), c.reason);
  // A refusal with a reclaim plan is counted by the caller once reclaiming has failed.
  EXPECT_EQ(Rejected("p", c.reason), c.plan_partition.has_value() ? 0 : 1);
  EXPECT_EQ(scheduler().Usage(session).memory_used_bytes, c.used_bytes);
  EXPECT_EQ(StatusOf("p").memory_used_bytes, before);
  EXPECT_EQ(scheduler().device_memory_used(0), before);
  if (!c.plan_partition.has_value()) {
    EXPECT_EQ(plan.shortfall_bytes, -1) << "reclaim cannot help, so there is no plan";
    return;
  }
  EXPECT_EQ(plan.device_index, 0);
  EXPECT_EQ(plan.partition, *c.plan_partition);
  EXPECT_EQ(plan.shortfall_bytes, c.plan_shortfall_bytes);
  EXPECT_EQ(plan.requester.qos, scheduler().Usage(session).qos);
  EXPECT_EQ(plan.requester.within_request, c.plan_within_request);
}

ResourceSpec BurstableWithLimit(int64_t request_bytes, int64_t limit_bytes) {
  ResourceSpec spec = Burstable(request_bytes);
  spec.memory_limit_bytes = limit_bytes;
  return spec;
}

INSTANTIATE_TEST_SUITE_P(
    Table, AllocationTest,
    ::testing::Values(
        AllocationCase{"FitsWithinEveryLimit", BurstableWithLimit(8 * kMiB, 16 * kMiB), 32 * kMiB,
                       16 * kMiB, 4 * kMiB, 4 * kMiB, 4 * kMiB, RejectReason::kNone},
        AllocationCase{"ArrayOfExactlyTheMaximumFits", BestEffort(), 32 * kMiB, 8 * kMiB, 0, 0,
                       8 * kMiB, RejectReason::kNone},
        AllocationCase{"ArrayAboveTheMaximum", BestEffort(), 32 * kMiB, 8 * kMiB, 0, 0,
                       8 * kMiB + 1, RejectReason::kArrayTooLarge},
        AllocationCase{"UpToTheSessionLimitFits", BurstableWithLimit(8 * kMiB, 16 * kMiB),
                       32 * kMiB, 16 * kMiB, 0, 12 * kMiB, 4 * kMiB, RejectReason::kNone},
        AllocationCase{"AboveTheSessionLimit", BurstableWithLimit(8 * kMiB, 16 * kMiB), 32 * kMiB,
                       16 * kMiB, 0, 12 * kMiB, 4 * kMiB + 1, RejectReason::kSessionLimitExceeded},
        AllocationCase{"UpToThePartitionQuotaFits", BestEffort(), 32 * kMiB, 16 * kMiB, 16 * kMiB,
                       12 * kMiB, 4 * kMiB, RejectReason::kNone},
        AllocationCase{"BestEffortAboveThePartitionQuota", BestEffort(), 32 * kMiB, 16 * kMiB,
                       16 * kMiB, 14 * kMiB, 4 * kMiB, RejectReason::kPartitionQuotaExceeded, "p",
                       2 * kMiB, false},
        AllocationCase{"GuaranteedWithinItsRequestAboveThePartitionQuota",
                       Guaranteed(16 * kMiB, 0.25), 32 * kMiB, 16 * kMiB, 24 * kMiB, 0, 12 * kMiB,
                       RejectReason::kPartitionQuotaExceeded, "p", 4 * kMiB, true},
        AllocationCase{"BurstableBeyondItsRequestAboveThePartitionQuota",
                       BurstableWithLimit(4 * kMiB, 32 * kMiB), 32 * kMiB, 16 * kMiB, 20 * kMiB,
                       4 * kMiB, 12 * kMiB, RejectReason::kPartitionQuotaExceeded, "p", 4 * kMiB,
                       false},
        // With one partition over the whole device the device check, which comes first,
        // refuses; the partition is over its quota too, so the plan names it.
        AllocationCase{"FullDeviceWithOnePartitionOverIt", Burstable(8 * kMiB), kDeviceBytes,
                       32 * kMiB, 56 * kMiB, 4 * kMiB, 8 * kMiB,
                       RejectReason::kDeviceMemoryExhausted, "p", 4 * kMiB, false}),
    [](const ::testing::TestParamInfo<AllocationCase>& info) { return info.param.name; });

TEST_F(SchedulerTest, ReserveMemoryRefusesNegativeBytes) {
  Build({WholeDevice()});
  SessionTicket s = Open("default");
  EXPECT_THAT(scheduler().ReserveMemory(s, -1), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Partition quotas never sum past the device, so the device alone refuses only when memory
// outlives the quota that granted it: here a quota lowered below use.
TEST_F(SchedulerTest, DeviceRefusesWhenQuotaLoweredBelowUseLetAnotherPartitionIn) {
  Build({Partition("a", kDeviceBytes, 0.5)});
  SessionTicket a = Open("a");
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation held, scheduler().ReserveMemory(a, 48 * kMiB));
  ASSERT_THAT(Update(Partition("a", 16 * kMiB, 0.5)), IsOk());
  ASSERT_THAT(scheduler().CreatePartition(Partition("b", 48 * kMiB, 0.5)), IsOk());
  SessionTicket b = Open("b", Guaranteed(32 * kMiB, 0.25));

  ReclaimPlan plan;
  absl::StatusOr<MemoryReservation> refused = scheduler().ReserveMemory(b, 20 * kMiB, &plan);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(refused.status()), RejectReason::kDeviceMemoryExhausted);
  EXPECT_EQ(plan.device_index, 0);
  EXPECT_EQ(plan.partition, "") << "the shortfall is the device's, not the partition's";
  EXPECT_EQ(plan.shortfall_bytes, 4 * kMiB);
  EXPECT_EQ(plan.requester.qos, QosClass::kGuaranteed);
  EXPECT_TRUE(plan.requester.within_request);
  EXPECT_EQ(Rejected("b", RejectReason::kDeviceMemoryExhausted), 0)
      << "a refusal with a plan is the caller's to count, once reclaiming has failed";
  scheduler().CountRefusal(b, RejectReason::kDeviceMemoryExhausted);
  EXPECT_EQ(Rejected("b", RejectReason::kDeviceMemoryExhausted), 1);
  EXPECT_THAT(scheduler().ReserveMemory(b, 16 * kMiB), IsOk());
}

TEST_F(SchedulerTest, RefusalWithoutAPlanIsCountedAtOnce) {
  Build({Partition("a", kDeviceBytes, 0.5)});
  SessionTicket a = Open("a", Guaranteed(kMiB));
  EXPECT_THAT(scheduler().ReserveMemory(a, 2 * kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(Rejected("a", RejectReason::kSessionLimitExceeded), 1);
  ReclaimPlan plan;
  EXPECT_FALSE(scheduler().ReserveMemory(a, 2 * kMiB, &plan).ok());
  EXPECT_EQ(plan.shortfall_bytes, 0) << "spilling cannot lift a session's own limit";
  EXPECT_EQ(Rejected("a", RejectReason::kSessionLimitExceeded), 2);
}

TEST_F(SchedulerTest, PartitionOverItsQuotaOnAFullDeviceReclaimsInsideItselfFirst) {
  Build({Partition("a", 32 * kMiB, 0.5), Partition("b", 32 * kMiB, 0.5)});
  SessionTicket a = Open("a");
  SessionTicket b = Open("b");
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation a_full, scheduler().ReserveMemory(a, 32 * kMiB));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation b_full, scheduler().ReserveMemory(b, 32 * kMiB));
  ReclaimPlan plan;
  absl::StatusOr<MemoryReservation> refused = scheduler().ReserveMemory(a, 4 * kMiB, &plan);
  EXPECT_EQ(ReasonOf(refused.status()), RejectReason::kDeviceMemoryExhausted);
  EXPECT_EQ(plan.partition, "a") << "not b's memory: a is over its own quota";
  EXPECT_EQ(plan.shortfall_bytes, 4 * kMiB);
}

// The other way: a partition deleted with force while its sessions still hold memory.
TEST_F(SchedulerTest, MemoryOfAForceDeletedPartitionStaysOnTheDeviceUntilReleased) {
  Build({Partition("old", 32 * kMiB, 0.5), Partition("b", 32 * kMiB, 0.5)});
  SessionTicket old = Open("old");
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation held, scheduler().ReserveMemory(old, 24 * kMiB));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation b, scheduler().ReserveMemory(Open("b"), 32 * kMiB));
  ASSERT_THAT(scheduler().DeletePartition("old", true), IsOkAndHolds(ElementsAre("s-1")));
  ASSERT_THAT(scheduler().CreatePartition(Partition("new", 32 * kMiB, 0.5)), IsOk());
  SessionTicket fresh = Open("new");

  ReclaimPlan plan;
  absl::StatusOr<MemoryReservation> refused = scheduler().ReserveMemory(fresh, 16 * kMiB, &plan);
  EXPECT_EQ(ReasonOf(refused.status()), RejectReason::kDeviceMemoryExhausted);
  EXPECT_EQ(plan.partition, "");
  EXPECT_EQ(plan.shortfall_bytes, 8 * kMiB);
  scheduler().EndSession(old);
  EXPECT_EQ(scheduler().device_memory_used(0), 56 * kMiB);
  held.Release();
  EXPECT_EQ(scheduler().device_memory_used(0), 32 * kMiB);
  EXPECT_THAT(scheduler().ReserveMemory(fresh, 32 * kMiB), IsOk());
}

TEST_F(SchedulerTest, ReservationsReturnEveryByteOnReleaseAndOnDestruction) {
  Build({Partition("p", 32 * kMiB, 0.5), Partition("q", 32 * kMiB, 0.5)});
  SessionTicket s = Open("p");
  auto expect_used = [&](int64_t bytes) {
    EXPECT_EQ(scheduler().Usage(s).memory_used_bytes, bytes);
    EXPECT_EQ(StatusOf("p").memory_used_bytes, bytes);
    EXPECT_EQ(scheduler().device_memory_used(0), bytes);
  };
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation released, scheduler().ReserveMemory(s, 3 * kMiB));
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation scoped, scheduler().ReserveMemory(s, 5 * kMiB));
    expect_used(8 * kMiB);
  }
  expect_used(3 * kMiB);
  released.Release();
  EXPECT_EQ(released.bytes(), 0);
  expect_used(0);
  released.Release();  // later calls do nothing
  expect_used(0);

  // Moving hands the bytes over once; assigning over a reservation releases what it held.
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation first, scheduler().ReserveMemory(s, kMiB));
  MemoryReservation moved(std::move(first));
  EXPECT_EQ(moved.bytes(), kMiB);
  expect_used(kMiB);
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation second, scheduler().ReserveMemory(s, 2 * kMiB));
  expect_used(3 * kMiB);
  moved = std::move(second);
  EXPECT_EQ(moved.bytes(), 2 * kMiB);
  expect_used(2 * kMiB);
  moved = MemoryReservation();
  expect_used(0);
  EXPECT_EQ(StatusOf("q").memory_used_bytes, 0);
}

TEST_F(SchedulerTest, ReservationsOutlivingTheirSessionStillReleaseExactly) {
  Build({WholeDevice()});
  SessionTicket s = Open("default", Burstable(8 * kMiB));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation a, scheduler().ReserveMemory(s, 6 * kMiB));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation b, scheduler().ReserveMemory(s, 2 * kMiB));
  scheduler().EndSession(s);

  const SessionUsage usage = scheduler().Usage(s);
  EXPECT_TRUE(usage.ended);
  EXPECT_EQ(usage.memory_used_bytes, 8 * kMiB) << "memory returns as reservations are released";
  EXPECT_EQ(scheduler().device_memory_used(0), 8 * kMiB);
  EXPECT_THAT(scheduler().ReserveMemory(s, 1), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(scheduler().Submit(s, Named("op")), StatusIs(absl::StatusCode::kNotFound));

  a.Release();
  EXPECT_EQ(scheduler().Usage(s).memory_used_bytes, 2 * kMiB);
  b = MemoryReservation();
  EXPECT_EQ(scheduler().Usage(s).memory_used_bytes, 0);
  EXPECT_EQ(StatusOf("default").memory_used_bytes, 0);
  EXPECT_EQ(scheduler().device_memory_used(0), 0);
}

TEST_F(SchedulerTest, ReturnBatchReturnsItsReleasesTogetherAtTheEndOfTheOutermost) {
  Build({Partition("p", 16 * kMiB, 1.0)});
  SessionTicket s = Open("p");
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation a, scheduler().ReserveMemory(s, 4 * kMiB));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation b, scheduler().ReserveMemory(s, 2 * kMiB));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation c, scheduler().ReserveMemory(s, kMiB));
  {
    MemoryReturnBatch outer;
    a.Release();
    EXPECT_EQ(a.bytes(), 0) << "released at once for its owner";
    {
      MemoryReturnBatch inner;
      b = MemoryReservation();
    }
    EXPECT_EQ(scheduler().Usage(s).memory_used_bytes, 7 * kMiB)
        << "nothing returns before the outermost batch ends";
    // The bytes in a batch are still counted: they are not handed out twice.
    EXPECT_THAT(scheduler().ReserveMemory(s, 10 * kMiB),
                StatusIs(absl::StatusCode::kResourceExhausted));
  }
  EXPECT_EQ(scheduler().Usage(s).memory_used_bytes, kMiB);
  EXPECT_EQ(StatusOf("p").memory_used_bytes, kMiB);
  EXPECT_EQ(scheduler().device_memory_used(0), kMiB);
  c.Release();  // outside a batch: at once
  EXPECT_EQ(scheduler().device_memory_used(0), 0);
}

TEST_F(SchedulerTest, ReturnBatchReturnsToEachSchedulerAndOutlivesEndedSessions) {
  Build({WholeDevice()});
  FakeClock other_clock;
  std::unique_ptr<Scheduler> other =
      *Scheduler::Create(other_clock, {{0, kDeviceBytes}}, {WholeDevice()}, {});
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionAdmission elsewhere,
                              other->AdmitSession("s-other", "default", {}));
  SessionTicket s = Open("default");
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation here, scheduler().ReserveMemory(s, 3 * kMiB));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation there,
                              other->ReserveMemory(elsewhere.ticket, 5 * kMiB));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation here_too, scheduler().ReserveMemory(s, kMiB));
  scheduler().EndSession(s);
  {
    MemoryReturnBatch returns;
    here.Release();
    there.Release();
    here_too.Release();
    s.reset();  // the batch holds the session's account until it returns its bytes
  }
  EXPECT_EQ(scheduler().device_memory_used(0), 0);
  EXPECT_EQ(other->device_memory_used(0), 0);
  EXPECT_EQ(other->Usage(elsewhere.ticket).memory_used_bytes, 0);
}

// ======================================================================================
// Tasks
// ======================================================================================

TEST_F(SchedulerTest, SubmitAdmitsAtOnceWhenASlotIsFree) {
  Build({WholeDevice()});
  SessionTicket s = Open("default");
  TaskRef task = Submit(s, Named("add"));
  EXPECT_EQ(StateOf(task), TaskState::kAdmitted);
  const TaskInfo info = InfoOf(task);
  EXPECT_EQ(info.name, "add");
  EXPECT_EQ(info.session_id, "s-1");
  EXPECT_EQ(info.partition, "default");
  EXPECT_EQ(info.qos, QosClass::kBestEffort);
  EXPECT_EQ(info.submitted, clock_.Now());
  EXPECT_EQ(info.admitted, clock_.Now());
  EXPECT_EQ(StatusOf("default").running, 1);
  EXPECT_EQ(StatusOf("default").queued, 0);
  EXPECT_EQ(StatusOf("default").admitted_total, 1);
}

TEST_F(SchedulerTest, MaxRunningTasksBoundsAdmittedAndRunningTogether) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 2;
  Build({p});
  SessionTicket s = Open("p");
  TaskRef running = Submit(s);
  ASSERT_THAT(scheduler().Start(running), IsOk());
  TaskRef admitted = Submit(s);
  TaskRef waiting = Submit(s);
  EXPECT_EQ(StateOf(running), TaskState::kRunning);
  EXPECT_EQ(StateOf(admitted), TaskState::kAdmitted);
  EXPECT_EQ(StateOf(waiting), TaskState::kQueued);
  EXPECT_EQ(StatusOf("p").running, 2);
  EXPECT_EQ(StatusOf("p").queued, 1);
  scheduler().Pump();
  EXPECT_EQ(StateOf(waiting), TaskState::kQueued);

  scheduler().Finish(running, absl::OkStatus(), absl::ZeroDuration());
  EXPECT_EQ(StateOf(waiting), TaskState::kAdmitted);
  EXPECT_EQ(StatusOf("p").running, 2);
  EXPECT_EQ(StatusOf("p").queued, 0);
}

TEST_F(SchedulerTest, StartWithMemoryStartsTheTaskAndReservesInOneCall) {
  Build({WholeDevice()});
  SessionTicket s = Open("default");
  TaskRef task = Submit(s, Named("add"));
  clock_.Advance(absl::Milliseconds(3));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation output,
                              scheduler().StartWithMemory(task, 2 * kMiB));
  EXPECT_EQ(StateOf(task), TaskState::kRunning);
  EXPECT_EQ(InfoOf(task).started, clock_.Now());
  EXPECT_EQ(output.bytes(), 2 * kMiB);
  EXPECT_EQ(scheduler().Usage(s).memory_used_bytes, 2 * kMiB);
  EXPECT_EQ(scheduler().device_memory_used(0), 2 * kMiB);
  EXPECT_THAT(scheduler().Start(task), StatusIs(absl::StatusCode::kCancelled))
      << "a task starts once";
  scheduler().Finish(task, absl::OkStatus(), absl::Milliseconds(1));
  EXPECT_EQ(StateOf(task), TaskState::kSucceeded);
  output.Release();
  EXPECT_EQ(scheduler().device_memory_used(0), 0);
}

TEST_F(SchedulerTest, StartWithMemoryRefusedLeavesTheTaskAdmittedWithNothingReserved) {
  Build({Partition("p", 16 * kMiB, 1.0)});
  SessionTicket s = Open("p");
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation held, scheduler().ReserveMemory(s, 12 * kMiB));
  TaskRef task = Submit(s);
  ReclaimPlan plan;
  EXPECT_THAT(scheduler().StartWithMemory(task, 8 * kMiB, &plan),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(StateOf(task), TaskState::kAdmitted);
  EXPECT_EQ(plan.shortfall_bytes, 4 * kMiB) << "the refusal's reclaim plan, as ReserveMemory's";
  EXPECT_EQ(scheduler().Usage(s).memory_used_bytes, 12 * kMiB);
  EXPECT_THAT(scheduler().StartWithMemory(task, -1), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(StateOf(task), TaskState::kAdmitted);

  held.Release();  // the caller reclaimed: the next try starts it
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation output,
                              scheduler().StartWithMemory(task, 8 * kMiB, &plan));
  EXPECT_EQ(StateOf(task), TaskState::kRunning);
  EXPECT_EQ(scheduler().Usage(s).memory_used_bytes, 8 * kMiB);
}

TEST_F(SchedulerTest, StartWithMemoryOfACancelledTaskReservesNothing) {
  Build({WholeDevice()});
  SessionTicket s = Open("default");
  TaskRef task = Submit(s);
  ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(task), "the operator said so"), IsOk());
  EXPECT_THAT(scheduler().StartWithMemory(task, kMiB),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("the operator said so")));
  EXPECT_EQ(StateOf(task), TaskState::kCancelled);
  EXPECT_EQ(scheduler().Usage(s).memory_used_bytes, 0);
  EXPECT_EQ(scheduler().device_memory_used(0), 0);
}

TEST_F(SchedulerTest, RefusesSubmitWhenTheQueueIsFull) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 1;
  p.max_queued_tasks = 2;
  Build({p});
  SessionTicket s = Open("p");
  TaskRef admitted = Submit(s);
  Submit(s);
  Submit(s);
  absl::StatusOr<TaskRef> refused = scheduler().Submit(s, Named("fourth"));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(refused.status()), RejectReason::kQueueFull);
  EXPECT_EQ(Rejected("p", RejectReason::kQueueFull), 1);
  EXPECT_EQ(StatusOf("p").queued, 2);
  EXPECT_THAT(scheduler().ListTasks({}), ::testing::SizeIs(3)) << "a refused submit is no task";

  scheduler().Finish(admitted, absl::OkStatus(), absl::ZeroDuration());  // one leaves the queue
  EXPECT_THAT(scheduler().Submit(s, Named("fourth")), IsOk());
}

TEST_F(SchedulerTest, AdmitsByQosClassThenPriorityThenArrival) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 1;
  Build({p});
  SessionTicket guaranteed = Open("p", Guaranteed());
  SessionTicket burstable = Open("p", Burstable());
  SessionTicket best_effort = Open("p", BestEffort());
  TaskRef current = Submit(burstable, Named("blocker"));
  std::map<std::string, TaskRef> tasks;
  auto submit = [&](const SessionTicket& session, const std::string& name, int priority) {
    tasks[name] = Submit(session, Named(name, priority));
    EXPECT_EQ(StateOf(tasks[name]), TaskState::kQueued) << name;
  };
  submit(burstable, "burstable-0", 0);
  submit(best_effort, "best-effort-100", 100);
  submit(burstable, "burstable-5-first", 5);
  submit(guaranteed, "guaranteed-minus-5", -5);
  submit(burstable, "burstable-5-second", 5);
  submit(guaranteed, "guaranteed-0", 0);
  submit(best_effort, "best-effort-0", 0);

  // Free the one slot seven times and see who takes it each time.
  std::vector<std::string> order;
  TaskFilter admitted;
  admitted.state = TaskState::kAdmitted;
  for (int i = 0; i < 7; ++i) {
    scheduler().Finish(current, absl::OkStatus(), absl::ZeroDuration());
    const std::vector<TaskInfo> next = scheduler().ListTasks(admitted);
    ASSERT_EQ(next.size(), 1u) << "after " << i << " finished";
    order.push_back(next[0].name);
    current = tasks.at(next[0].name);
  }
  EXPECT_THAT(order,
              ElementsAre("guaranteed-0", "guaranteed-minus-5", "burstable-5-first",
                          "burstable-5-second", "burstable-0", "best-effort-100", "best-effort-0"));
}

struct PriorityCase {
  std::string name;
  int requested;
  int listed;
};
void PrintTo(const PriorityCase& c, std::ostream* os) { *os << c.name; }

class PriorityTest : public SchedulerTest, public ::testing::WithParamInterface<PriorityCase> {};

TEST_P(PriorityTest, PriorityIsClampedToPlusOrMinusOneHundred) {
  Build({WholeDevice()});
  TaskRef task = Submit(Open("default"), Named("op", GetParam().requested));
  EXPECT_EQ(InfoOf(task).priority, GetParam().listed);
}

INSTANTIATE_TEST_SUITE_P(
    Table, PriorityTest,
    ::testing::Values(PriorityCase{"Zero", 0, 0}, PriorityCase{"Within", -42, -42},
                      PriorityCase{"UpperBound", 100, 100}, PriorityCase{"LowerBound", -100, -100},
                      PriorityCase{"AboveUpperBound", 101, 100},
                      PriorityCase{"FarAbove", 1000000, 100},
                      PriorityCase{"BelowLowerBound", -101, -100},
                      PriorityCase{"FarBelow", -1000000, -100}),
    [](const ::testing::TestParamInfo<PriorityCase>& info) { return info.param.name; });

TEST_F(SchedulerTest, ClampedPriorityTiesWithTheBoundAndArrivalDecides) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 1;
  Build({p});
  SessionTicket s = Open("p");
  TaskRef blocker = Submit(s);
  TaskRef first = Submit(s, Named("first", 100));
  TaskRef pushy = Submit(s, Named("pushy", 1000));
  scheduler().Finish(blocker, absl::OkStatus(), absl::ZeroDuration());
  EXPECT_EQ(StateOf(first), TaskState::kAdmitted);
  EXPECT_EQ(StateOf(pushy), TaskState::kQueued);
}

TEST_F(SchedulerTest, QueuedTaskExpiresOnThePumpAfterItsDeadline) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 1;
  Build({p});
  SessionTicket s = Open("p");
  TaskRef blocker = Submit(s);
  const absl::Time submitted = clock_.Now();
  const absl::Time deadline = submitted + absl::Milliseconds(100);
  TaskRef waiting = Submit(s, WithQueueTimeout(absl::Milliseconds(100)));
  EXPECT_EQ(scheduler().Pump(), deadline) << "the next change is the deadline";

  clock_.Advance(absl::Milliseconds(99));
  EXPECT_EQ(scheduler().Pump(), deadline);
  EXPECT_EQ(StateOf(waiting), TaskState::kQueued);

  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(StateOf(waiting), TaskState::kQueued) << "only a Pump expires it";
  EXPECT_EQ(scheduler().Pump(), absl::InfiniteFuture());
  EXPECT_EQ(StateOf(waiting), TaskState::kExpired);
  const TaskInfo info = InfoOf(waiting);
  EXPECT_EQ(info.finished, deadline);
  EXPECT_EQ(info.admitted, absl::InfinitePast());
  EXPECT_THAT(info.error, HasSubstr("deadline"));
  EXPECT_EQ(Rejected("p", RejectReason::kDeadlineExceeded), 1);
  EXPECT_EQ(StatusOf("p").queued, 0);
  EXPECT_THAT(scheduler().Cancel(info.id, "late"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(StateOf(blocker), TaskState::kAdmitted);
}

TEST_F(SchedulerTest, DeadlineBindsOnlyWhileTheTaskWaits) {
  Build({WholeDevice()});
  SessionTicket s = Open("default");
  TaskRef task = Submit(s, WithQueueTimeout(absl::Milliseconds(10)));
  EXPECT_EQ(StateOf(task), TaskState::kAdmitted);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(scheduler().Pump(), absl::InfiniteFuture());
  EXPECT_EQ(StateOf(task), TaskState::kAdmitted);
  EXPECT_THAT(scheduler().Start(task), IsOk());
  EXPECT_EQ(Rejected("default", RejectReason::kDeadlineExceeded), 0);
}

TEST_F(SchedulerTest, CancelEndsQueuedAndAdmittedTasksButNotRunningOnes) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 2;
  Build({p});
  SessionTicket s = Open("p");
  TaskRef running = Submit(s);
  ASSERT_THAT(scheduler().Start(running), IsOk());
  TaskRef admitted = Submit(s);
  TaskRef queued = Submit(s);
  TaskRef behind = Submit(s);

  EXPECT_THAT(scheduler().Cancel(scheduler().IdOf(queued), "the operator said so"), IsOk());
  EXPECT_EQ(StateOf(queued), TaskState::kCancelled);
  EXPECT_EQ(InfoOf(queued).error, "the operator said so");
  EXPECT_EQ(InfoOf(queued).finished, clock_.Now());

  EXPECT_THAT(scheduler().Cancel(scheduler().IdOf(running), "no"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("running")));
  EXPECT_EQ(StateOf(running), TaskState::kRunning);

  EXPECT_THAT(scheduler().Cancel(scheduler().IdOf(admitted), "changed my mind"), IsOk());
  EXPECT_EQ(StateOf(admitted), TaskState::kCancelled);
  EXPECT_EQ(StateOf(behind), TaskState::kAdmitted) << "the cancelled task's slot is free";
  EXPECT_THAT(scheduler().Start(admitted), StatusIs(absl::StatusCode::kCancelled));

  EXPECT_THAT(scheduler().Cancel(scheduler().IdOf(admitted), "again"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(scheduler().Cancel(987654, "unknown"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(Rejected("p", RejectReason::kCancelled), 2);
  EXPECT_EQ(StatusOf("p").running, 2);
}

TEST_F(SchedulerTest, FinishRecordsTheOutcomeAndChargesDeviceTimeOnce) {
  Build({Partition("p", 32 * kMiB, 0.5), Partition("q", 32 * kMiB, 0.5)},
        Burst(absl::Milliseconds(10)));
  SessionTicket s = Open("p");
  TaskRef ok = Submit(s);
  ASSERT_THAT(scheduler().Start(ok), IsOk());
  scheduler().Finish(ok, absl::OkStatus(), absl::Milliseconds(4));
  EXPECT_EQ(StateOf(ok), TaskState::kSucceeded);
  EXPECT_EQ(InfoOf(ok).device_time, absl::Milliseconds(4));
  EXPECT_EQ(StatusOf("p").pacing_balance, absl::Milliseconds(6));

  scheduler().Finish(ok, absl::OkStatus(), absl::Milliseconds(50));  // already ended
  clock_.Advance(absl::Milliseconds(1));
  scheduler().Finish(ok, absl::InternalError("late"), absl::Milliseconds(50));
  EXPECT_EQ(StateOf(ok), TaskState::kSucceeded);
  EXPECT_EQ(InfoOf(ok).device_time, absl::Milliseconds(4));
  EXPECT_EQ(InfoOf(ok).finished, clock_.Now() - absl::Milliseconds(1));
  EXPECT_EQ(StatusOf("p").succeeded_total, 1);
  EXPECT_EQ(StatusOf("p").failed_total, 0);
  EXPECT_EQ(StatusOf("p").device_time_total, absl::Milliseconds(4));
  EXPECT_EQ(StatusOf("p").pacing_balance, absl::Microseconds(6500)) << "only 4 ms charged";

  TaskRef failed = Submit(s);  // admitted, never started
  scheduler().Finish(failed, absl::InternalError("kernel fault"), absl::Milliseconds(1));
  EXPECT_EQ(StateOf(failed), TaskState::kFailed);
  EXPECT_EQ(InfoOf(failed).error, "kernel fault");
  EXPECT_EQ(StatusOf("p").failed_total, 1);
  EXPECT_EQ(StatusOf("p").device_time_total, absl::Milliseconds(5));

  TaskRef cancelled = Submit(s);
  ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(cancelled), "gone"), IsOk());
  scheduler().Finish(cancelled, absl::OkStatus(), absl::Milliseconds(1));
  EXPECT_EQ(StateOf(cancelled), TaskState::kCancelled);
  EXPECT_EQ(StatusOf("p").succeeded_total, 1);
  EXPECT_EQ(StatusOf("p").device_time_total, absl::Milliseconds(5));
}

TEST_F(SchedulerTest, EndSessionCancelsItsWaitingAndAdmittedTasksButNotRunningOnes) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 2;
  Build({p});
  SessionTicket s = Open("p");
  SessionTicket other = Open("p");
  TaskRef running = Submit(s);
  ASSERT_THAT(scheduler().Start(running), IsOk());
  TaskRef admitted = Submit(s);
  TaskRef queued = Submit(s);
  TaskRef others = Submit(other);
  ASSERT_EQ(StateOf(others), TaskState::kQueued);

  scheduler().EndSession(s);
  EXPECT_EQ(StateOf(running), TaskState::kRunning);
  EXPECT_EQ(StateOf(admitted), TaskState::kCancelled);
  EXPECT_EQ(StateOf(queued), TaskState::kCancelled);
  EXPECT_THAT(InfoOf(queued).error, HasSubstr("session ended"));
  EXPECT_EQ(StateOf(others), TaskState::kAdmitted) << "the other session takes the freed slot";
  EXPECT_EQ(Rejected("p", RejectReason::kCancelled), 2);

  scheduler().Finish(running, absl::OkStatus(), absl::Milliseconds(1));
  EXPECT_EQ(StateOf(running), TaskState::kSucceeded);
  EXPECT_EQ(StatusOf("p").running, 1);
}

TEST_F(SchedulerTest, TaskTimestampsFollowTheClock) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 1;
  Build({p});
  SessionTicket s = Open("p");
  const absl::Time t0 = clock_.Now();
  TaskRef blocker = Submit(s);
  TaskRef task = Submit(s);
  clock_.Advance(absl::Seconds(1));
  scheduler().Finish(blocker, absl::OkStatus(), absl::ZeroDuration());
  clock_.Advance(absl::Seconds(2));
  ASSERT_THAT(scheduler().Start(task), IsOk());
  clock_.Advance(absl::Seconds(3));
  scheduler().Finish(task, absl::OkStatus(), absl::Milliseconds(7));

  const TaskInfo info = InfoOf(task);
  EXPECT_EQ(info.submitted, t0);
  EXPECT_EQ(info.admitted, t0 + absl::Seconds(1));
  EXPECT_EQ(info.started, t0 + absl::Seconds(3));
  EXPECT_EQ(info.finished, t0 + absl::Seconds(6));
  EXPECT_EQ(info.device_time, absl::Milliseconds(7));
  const TaskInfo blocker_info = InfoOf(blocker);
  EXPECT_EQ(blocker_info.admitted, t0);
  EXPECT_EQ(blocker_info.started, absl::InfinitePast()) << "finished without starting";
  EXPECT_EQ(blocker_info.finished, t0 + absl::Seconds(1));
}

std::vector<uint64_t> Ids(const std::vector<TaskInfo>& infos) {
  std::vector<uint64_t> ids;
  for (const TaskInfo& info : infos) ids.push_back(info.id);
  return ids;
}

TaskFilter Filter(std::optional<std::string> partition, std::optional<TaskState> state,
                  int limit = 0) {
  TaskFilter filter;
  filter.partition = std::move(partition);
  filter.state = state;
  filter.limit = limit;
  return filter;
}

TEST_F(SchedulerTest, ListTasksShowsLiveTasksByIdThenEndedOnesNewestFirst) {
  PartitionSpec a = Partition("a", 32 * kMiB, 0.5);
  a.max_running_tasks = 1;
  Build({a, Partition("b", 32 * kMiB, 0.5)});
  SessionTicket sa = Open("a");
  SessionTicket sb = Open("b");
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(sa, absl::Milliseconds(1)));  // 1: Succeeded
  TaskRef cancelled = Submit(sb);                                       // 2
  ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(cancelled), "x"), IsOk());
  TaskRef admitted = Submit(sa);  // 3
  TaskRef queued = Submit(sa);    // 4
  TaskRef running = Submit(sb);   // 5
  ASSERT_THAT(scheduler().Start(running), IsOk());
  ASSERT_EQ(scheduler().IdOf(running), 5u);

  EXPECT_THAT(Ids(scheduler().ListTasks({})), ElementsAre(3, 4, 5, 2, 1));
  EXPECT_THAT(Ids(scheduler().ListTasks(Filter("a", {}))), ElementsAre(3, 4, 1));
  EXPECT_THAT(Ids(scheduler().ListTasks(Filter({}, TaskState::kQueued))), ElementsAre(4));
  EXPECT_THAT(Ids(scheduler().ListTasks(Filter({}, TaskState::kSucceeded))), ElementsAre(1));
  EXPECT_THAT(Ids(scheduler().ListTasks(Filter("b", TaskState::kCancelled))), ElementsAre(2));
  EXPECT_THAT(Ids(scheduler().ListTasks(Filter("a", TaskState::kCancelled))), IsEmpty());
  EXPECT_THAT(Ids(scheduler().ListTasks(Filter({}, {}, 2))), ElementsAre(3, 4));
  EXPECT_THAT(Ids(scheduler().ListTasks(Filter({}, {}, 4))), ElementsAre(3, 4, 5, 2));

  const std::vector<TaskInfo> b_tasks = scheduler().ListTasks(Filter("b", {}));
  ASSERT_EQ(b_tasks.size(), 2u);
  EXPECT_EQ(b_tasks[0].session_id, "s-2");
  EXPECT_EQ(b_tasks[0].partition, "b");
  EXPECT_EQ(b_tasks[0].state, TaskState::kRunning);
  EXPECT_EQ(b_tasks[1].state, TaskState::kCancelled);
  EXPECT_EQ(StateOf(admitted), TaskState::kAdmitted);
  EXPECT_EQ(StateOf(queued), TaskState::kQueued);
}

TEST_F(SchedulerTest, TaskHistoryKeepsOnlyTheNewestEndedTasks) {
  Build({WholeDevice()}, History(2));
  SessionTicket s = Open("default");
  for (int i = 0; i < 5; ++i) {
    ASSERT_NO_FATAL_FAILURE(RunToCompletion(s, absl::ZeroDuration()));
  }
  TaskRef live = Submit(s);
  EXPECT_THAT(Ids(scheduler().ListTasks({})), ElementsAre(6, 5, 4));
}

TEST_F(SchedulerTest, ZeroTaskHistoryKeepsNoEndedTasks) {
  Build({WholeDevice()}, History(0));
  SessionTicket s = Open("default");
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(s, absl::ZeroDuration()));
  EXPECT_THAT(scheduler().ListTasks({}), IsEmpty());
}

// ======================================================================================
// Pacing
// ======================================================================================
//
// Partition "a" has a quarter of the device's time and "b" three quarters; a partition may
// run 10 ms of device time ahead of its share.

class PacingTest : public SchedulerTest {
 protected:
  static constexpr absl::Duration kBurst = absl::Milliseconds(10);

  void BuildAB(int a_max_running = 64, int b_max_running = 64, double a_cap = 0) {
    PartitionSpec a = Partition("a", 16 * kMiB, 0.25);
    a.max_running_tasks = a_max_running;
    a.bandwidth_cap = a_cap;
    PartitionSpec b = Partition("b", 48 * kMiB, 0.75);
    b.max_running_tasks = b_max_running;
    Build({a, b}, Burst(kBurst));
  }
};

TEST_F(PacingTest, BalanceGoesIntoDebtByTheDeviceTimeAndIsRepaidAtTheShareRate) {
  BuildAB();
  SessionTicket a = Open("a");
  EXPECT_EQ(StatusOf("a").pacing_balance, kBurst) << "a bucket starts full";
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(a, absl::Milliseconds(50)));
  EXPECT_EQ(StatusOf("a").pacing_balance, absl::Milliseconds(-40));
  EXPECT_EQ(StatusOf("a").device_time_total, absl::Milliseconds(50));
  EXPECT_EQ(StatusOf("b").pacing_balance, kBurst);

  clock_.Advance(absl::Milliseconds(80));  // 80 ms at 0.25 repays 20 ms
  EXPECT_EQ(StatusOf("a").pacing_balance, absl::Milliseconds(-20));
  clock_.Advance(absl::Milliseconds(80));
  EXPECT_EQ(StatusOf("a").pacing_balance, absl::ZeroDuration());
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(StatusOf("a").pacing_balance, kBurst) << "credit stops at the burst";
}

// Pacing must not depend on who looked at it: two schedulers given the same calls at the
// same times, one of them also listed (as `gpukitctl partitions` would) while a long task
// runs, hold the same balance afterwards.
TEST_F(SchedulerTest, ListingPartitionsDoesNotChangePacing) {
  FakeClock clocks[2];
  std::unique_ptr<Scheduler> schedulers[2];
  TaskRef tasks[2];
  for (int i = 0; i < 2; ++i) {
    schedulers[i] =
        *Scheduler::Create(clocks[i], {{0, kDeviceBytes}}, {Partition("a", kDeviceBytes, 0.25)},
                           Burst(absl::Milliseconds(10)));
    SessionTicket s = schedulers[i]->AdmitSession("s", "a", {})->ticket;
    tasks[i] = *schedulers[i]->Submit(s, Named("long"));
    ASSERT_THAT(schedulers[i]->Start(tasks[i]), IsOk());
  }
  for (int i = 0; i < 2; ++i) clocks[i].Advance(absl::Milliseconds(500));
  schedulers[0]->ListPartitions();  // only the first is looked at mid-run
  for (int i = 0; i < 2; ++i) {
    clocks[i].Advance(absl::Milliseconds(500));
    schedulers[i]->Finish(tasks[i], absl::OkStatus(), absl::Milliseconds(500));
  }
  const absl::Duration looked_at = schedulers[0]->ListPartitions()[0].pacing_balance;
  const absl::Duration not_looked_at = schedulers[1]->ListPartitions()[0].pacing_balance;
  EXPECT_EQ(looked_at, not_looked_at);
  EXPECT_LT(not_looked_at, absl::ZeroDuration());
}

// On a GPU the tasks of all partitions run at once and share the device, so work in flight
// is a claim on it: a debtor yields to another partition's running work, though nothing of
// that one waits, and goes once that work has finished and the anticipation has passed (a
// synchronous client's next task would have come by then).
TEST_F(PacingTest, DebtorYieldsToAnotherPartitionsWorkInFlight) {
  BuildAB();
  SessionTicket a = Open("a");
  SessionTicket b = Open("b");
  TaskRef busy = Submit(b);  // b runs, but nothing of b waits
  ASSERT_THAT(scheduler().Start(busy), IsOk());
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(a, absl::Milliseconds(50)));  // a: -40 ms
  ASSERT_LT(StatusOf("a").pacing_balance, absl::ZeroDuration());

  TaskRef next = Submit(a);
  EXPECT_EQ(StateOf(next), TaskState::kQueued) << "b's work is on the device";
  const absl::Time repaid = clock_.Now() + absl::Milliseconds(160) + absl::Nanoseconds(1);
  EXPECT_EQ(scheduler().Pump(), repaid);
  scheduler().Finish(busy, absl::OkStatus(), absl::ZeroDuration());
  EXPECT_EQ(StateOf(next), TaskState::kQueued) << "b's next task may be on its way";
  const absl::Time anticipated = clock_.Now() + SchedulerOptions().pacing_anticipation;
  EXPECT_EQ(scheduler().Pump(), anticipated);
  clock_.Advance(anticipated - clock_.Now());
  scheduler().Pump();
  EXPECT_EQ(StateOf(next), TaskState::kAdmitted) << "work-conserving: b has gone quiet";
  EXPECT_EQ(scheduler().Pump(), absl::InfiniteFuture());
}

TEST_F(PacingTest, DebtorProceedsWhenNoOtherPartitionHasWork) {
  BuildAB();
  SessionTicket a = Open("a");
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(a, absl::Milliseconds(50)));
  ASSERT_LT(StatusOf("a").pacing_balance, absl::ZeroDuration());
  EXPECT_EQ(StateOf(Submit(a)), TaskState::kAdmitted)
      << "work-conserving: debt alone holds nothing";
  EXPECT_EQ(StateOf(Submit(a)), TaskState::kAdmitted);
}

// Debt run up while no other partition wanted the device is forgiven down to the burst when
// one comes: a partition that ran alone for long is then held for burst / share, not for
// as long as it ran.
TEST_F(PacingTest, DebtRunUpAloneIsCutToTheBurstWhenAnotherPartitionComes) {
  BuildAB();
  SessionTicket a = Open("a");
  SessionTicket b = Open("b");
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(a, absl::Seconds(10)));
  ASSERT_EQ(StatusOf("a").pacing_balance, absl::Milliseconds(10) - absl::Seconds(10));
  clock_.Advance(absl::Milliseconds(1));  // past the anticipation of a's finish
  TaskRef b_running = Submit(b);
  ASSERT_EQ(StateOf(b_running), TaskState::kAdmitted);
  EXPECT_EQ(StatusOf("a").pacing_balance, -kBurst);
  TaskRef held = Submit(a);
  EXPECT_EQ(StateOf(held), TaskState::kQueued) << "b's work is on the device";
  EXPECT_EQ(scheduler().Pump(), clock_.Now() + absl::Milliseconds(40) + absl::Nanoseconds(1))
      << "10 ms of debt at 0.25";
  clock_.Advance(absl::Milliseconds(40) + absl::Nanoseconds(1));
  scheduler().Pump();
  EXPECT_EQ(StateOf(held), TaskState::kAdmitted);
}

// Throttled time (PartitionStatus::throttled_total, gpukit_partition_throttled_seconds_total)
// counts while pacing holds a partition's queued work, and only then.
TEST_F(PacingTest, ThrottledTimeCountsWhilePacingHoldsQueuedWorkAndOnlyThen) {
  BuildAB();
  SessionTicket a = Open("a");
  SessionTicket b = Open("b");
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(a, absl::Seconds(10)));
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_EQ(StateOf(Submit(b)), TaskState::kAdmitted);
  EXPECT_EQ(StatusOf("a").throttled_total, absl::ZeroDuration()) << "ran alone: never held";
  TaskRef held = Submit(a);
  ASSERT_EQ(StateOf(held), TaskState::kQueued);
  clock_.Advance(absl::Milliseconds(15));
  EXPECT_EQ(StatusOf("a").throttled_total, absl::Milliseconds(15)) << "held now, still counting";
  clock_.Advance(absl::Milliseconds(25) + absl::Nanoseconds(1));
  scheduler().Pump();
  ASSERT_EQ(StateOf(held), TaskState::kAdmitted);
  clock_.Advance(absl::Milliseconds(5));
  EXPECT_EQ(StatusOf("a").throttled_total, absl::Milliseconds(40) + absl::Nanoseconds(1))
      << "admitted: the count stops";
  EXPECT_EQ(StatusOf("b").throttled_total, absl::ZeroDuration());
}

// Tasks running at once share the device, and each one's measured device time includes the
// others': pacing charges each its own part, its device time times the mean of
// 1 / (tasks running on the device) over its run.
TEST_F(PacingTest, ConcurrentTasksAreChargedTheirOwnPartOfTheDevicesTime) {
  BuildAB();
  SessionTicket a = Open("a");
  SessionTicket b = Open("b");
  TaskRef a_task = Submit(a, Named("a-op"));
  TaskRef b_task = Submit(b, Named("b-op"));
  ASSERT_THAT(scheduler().Start(a_task), IsOk());
  clock_.Advance(absl::Milliseconds(10));  // a alone: all 10 ms its own
  ASSERT_THAT(scheduler().Start(b_task), IsOk());
  clock_.Advance(absl::Milliseconds(20));  // both: 10 ms each
  const absl::Duration a_before = StatusOf("a").pacing_balance;
  scheduler().Finish(a_task, absl::OkStatus(), absl::Milliseconds(30));
  // a's estimate (1 ms) comes back and its own 20 ms is charged.
  EXPECT_EQ(StatusOf("a").pacing_balance,
            a_before + absl::Milliseconds(1) - absl::Milliseconds(20));
  EXPECT_EQ(StatusOf("a").device_time_total, absl::Milliseconds(30))
      << "accounting keeps the measured device time";
  clock_.Advance(absl::Milliseconds(10));  // b alone again
  const absl::Duration b_before = StatusOf("b").pacing_balance;
  scheduler().Finish(b_task, absl::OkStatus(), absl::Milliseconds(30));
  EXPECT_EQ(StatusOf("b").pacing_balance, b_before + absl::Milliseconds(1) - absl::Milliseconds(20))
      << "10 ms alone, 20 ms shared with a";
}

// A partition that reserves SMs runs on its own range of them (PlaceSms): its tasks share
// that range only with each other, and each is charged its share of the range times the
// range's fraction of the device. The shared partitions' tasks share the rest likewise.
TEST_F(PacingTest, TasksOnReservedSmsAreChargedTheSmsTheyCouldUse) {
  PartitionSpec a = Partition("a", 16 * kMiB, 0.25);
  a.reserve_sms = true;
  Build({a, Partition("b", 48 * kMiB, 0.75)}, Burst(kBurst));
  SessionTicket sa = Open("a");
  SessionTicket sb = Open("b");
  TaskRef a1 = Submit(sa, Named("a-op"));
  TaskRef a2 = Submit(sa, Named("a-op"));
  TaskRef b1 = Submit(sb, Named("b-op"));
  ASSERT_THAT(scheduler().Start(a1), IsOk());
  ASSERT_THAT(scheduler().Start(b1), IsOk());
  clock_.Advance(absl::Milliseconds(20));  // a1 alone on a's SMs, b1 alone on the rest
  ASSERT_THAT(scheduler().Start(a2), IsOk());
  clock_.Advance(absl::Milliseconds(20));  // a1 and a2 share a's SMs; b1 is still alone
  const absl::Duration a_before = StatusOf("a").pacing_balance;
  const absl::Duration b_before = StatusOf("b").pacing_balance;
  scheduler().Finish(a1, absl::OkStatus(), absl::Milliseconds(40));
  // a1's estimate (1 ms) comes back; its own part: (20 + 20 / 2) ms of a's SMs, a quarter
  // of the device.
  EXPECT_EQ(StatusOf("a").pacing_balance,
            a_before + absl::Milliseconds(1) - absl::Microseconds(7500));
  scheduler().Finish(b1, absl::OkStatus(), absl::Milliseconds(40));
  EXPECT_EQ(StatusOf("b").pacing_balance, b_before + absl::Milliseconds(1) - absl::Milliseconds(30))
      << "40 ms alone on the three quarters no partition reserves";
  EXPECT_EQ(StatusOf("b").device_time_total, absl::Milliseconds(40))
      << "accounting keeps the measured device time";
}

// A reserved partition in debt is not held for other partitions' work (its SMs would only
// idle), and its own work holds nobody back on the shared SMs.
TEST_F(PacingTest, ReservedSmsTakeNoPartInTheShareRule) {
  PartitionSpec a = Partition("a", 16 * kMiB, 0.25);
  a.reserve_sms = true;
  Build({a, Partition("b", 24 * kMiB, 0.25), Partition("c", 24 * kMiB, 0.5)}, Burst(kBurst));
  SessionTicket sa = Open("a");
  SessionTicket sb = Open("b");
  SessionTicket sc = Open("c");
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(sa, absl::Milliseconds(400)));  // a: in debt
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(sb, absl::Milliseconds(400)));  // b: in debt
  ASSERT_LT(StatusOf("a").pacing_balance, absl::ZeroDuration());
  ASSERT_LT(StatusOf("b").pacing_balance, absl::ZeroDuration());
  clock_.Advance(absl::Milliseconds(1));  // past the anticipation of both finishes
  TaskRef c_running = Submit(sc);
  ASSERT_EQ(StateOf(c_running), TaskState::kAdmitted);
  EXPECT_EQ(StateOf(Submit(sa)), TaskState::kAdmitted) << "a's SMs are its own";
  EXPECT_EQ(StateOf(Submit(sb)), TaskState::kQueued) << "b shares c's SMs and owes them";
  ASSERT_THAT(scheduler().UpdatePartition("a", PartitionFieldMask{.reserve_sms = true},
                                          PartitionSpec{.reserve_sms = false}),
              IsOk());
  EXPECT_EQ(StateOf(Submit(sa)), TaskState::kQueued) << "shared again: a yields to c too";
}

// A partition in debt yields to another of its device that has work queued, also when that
// one waits only for its own running slot: the device is busy with its work, and holding the
// debtor is what keeps the other's share. The debtor goes once its debt is repaid, or once
// the other has nothing queued.
TEST_F(PacingTest, DebtorYieldsToAPartitionWaitingForItsOwnSlotWhileTheDeviceIsBusy) {
  BuildAB(/*a_max_running=*/64, /*b_max_running=*/1);
  SessionTicket a = Open("a");
  SessionTicket b = Open("b");
  TaskRef b_running = Submit(b);
  ASSERT_THAT(scheduler().Start(b_running), IsOk());
  TaskRef b_waiting = Submit(b);
  ASSERT_EQ(StateOf(b_waiting), TaskState::kQueued);
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(a, absl::Milliseconds(50)));  // a: -40 ms

  TaskRef held = Submit(a);
  EXPECT_EQ(StateOf(held), TaskState::kQueued);
  // 40 ms of debt at 0.25 takes 160 ms to repay.
  const absl::Time repaid = clock_.Now() + absl::Milliseconds(160) + absl::Nanoseconds(1);
  EXPECT_EQ(scheduler().Pump(), repaid);
  scheduler().Finish(b_running, absl::OkStatus(), absl::Milliseconds(1));
  EXPECT_EQ(StateOf(b_waiting), TaskState::kAdmitted);
  EXPECT_EQ(StateOf(held), TaskState::kQueued) << "b has nothing queued, but work in flight";
  scheduler().Finish(b_waiting, absl::OkStatus(), absl::Milliseconds(1));
  clock_.Advance(SchedulerOptions().pacing_anticipation);
  scheduler().Pump();
  EXPECT_EQ(StateOf(held), TaskState::kAdmitted) << "b has nothing on the device any more";
}

TEST_F(PacingTest, DebtorGoesWhenItsDebtIsRepaidThoughOthersWait) {
  BuildAB(/*a_max_running=*/64, /*b_max_running=*/1);
  SessionTicket a = Open("a");
  SessionTicket b = Open("b");
  TaskRef b_running = Submit(b);
  ASSERT_THAT(scheduler().Start(b_running), IsOk());
  ASSERT_EQ(StateOf(Submit(b)), TaskState::kQueued);
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(a, absl::Milliseconds(50)));
  TaskRef held = Submit(a);
  ASSERT_EQ(StateOf(held), TaskState::kQueued);
  clock_.Advance(absl::Milliseconds(160));
  scheduler().Pump();
  EXPECT_EQ(StateOf(held), TaskState::kQueued) << "the debt is exactly repaid, not yet in credit";
  clock_.Advance(absl::Nanoseconds(1));
  scheduler().Pump();
  EXPECT_EQ(StateOf(held), TaskState::kAdmitted);
}

// On an idle device one partition in debt must go: the one nearest to repaying, one task at
// a time, while the other waits.
TEST_F(PacingTest, OnAnIdleDeviceTheDebtorNearestToRepayingGoesFirst) {
  BuildAB(/*a_max_running=*/1, /*b_max_running=*/1);
  SessionTicket a = Open("a");
  SessionTicket b = Open("b");
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(a, absl::Milliseconds(20)));  // -10 ms: 40 ms away
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(b, absl::Milliseconds(70)));  // -60 ms: 80 ms away
  clock_.Advance(SchedulerOptions().pacing_anticipation);  // b's finish no longer holds a
  TaskRef a_running = Submit(a);
  ASSERT_EQ(StateOf(a_running), TaskState::kAdmitted) << "nothing else queued: a goes";
  TaskRef a_next = Submit(a);
  TaskRef a_last = Submit(a);
  TaskRef b_next = Submit(b);
  ASSERT_EQ(StateOf(a_next), TaskState::kQueued) << "a's slot is taken";
  ASSERT_EQ(StateOf(b_next), TaskState::kQueued) << "b yields to a while the device is busy";
  scheduler().Finish(a_running, absl::OkStatus(), absl::ZeroDuration());
  EXPECT_EQ(StateOf(a_next), TaskState::kAdmitted) << "a is nearer to repaying than b";
  EXPECT_EQ(StateOf(b_next), TaskState::kQueued) << "a has work queued, the device is busy";
  scheduler().Finish(a_next, absl::OkStatus(), absl::ZeroDuration());
  EXPECT_EQ(StateOf(a_last), TaskState::kAdmitted) << "a is still nearer to repaying";
  EXPECT_EQ(StateOf(b_next), TaskState::kQueued) << "a's last task is on the device";
  scheduler().Finish(a_last, absl::OkStatus(), absl::ZeroDuration());
  clock_.Advance(SchedulerOptions().pacing_anticipation);
  scheduler().Pump();
  EXPECT_EQ(StateOf(b_next), TaskState::kAdmitted) << "nothing of a on the device: b goes";
}

// A debtor is held while another partition of the device has work queued or in flight,
// whichever order the scheduler visits the partitions in (tried with several pairs of
// names): admitting the other's queued task must not let the debtor go in the same Pump.
// Once the other's work has finished and the anticipation passed, a Pump admits it.
TEST_F(SchedulerTest, PumpHoldsADebtorWhileAnotherPartitionHasWorkQueuedOrInFlight) {
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE(::testing::Message() << "partitions a" << i << " and b" << i);
    PartitionSpec a = Partition(absl::StrCat("a", i), 16 * kMiB, 0.25);
    a.max_running_tasks = 1;
    PartitionSpec b = Partition(absl::StrCat("b", i), 48 * kMiB, 0.75);
    b.max_running_tasks = 1;
    Build({a, b}, Burst(absl::Milliseconds(10)));
    SessionTicket debtor = Open(a.name, BestEffort());
    SessionTicket silver = Open(b.name, Burstable());
    ASSERT_NO_FATAL_FAILURE(RunToCompletion(debtor, absl::Milliseconds(50)));
    TaskRef blocking = Submit(silver);
    ASSERT_THAT(scheduler().Start(blocking), IsOk());
    TaskRef other = Submit(silver);  // waits for b's slot
    TaskRef held = Submit(debtor);   // yields to b's queued work
    ASSERT_EQ(StateOf(held), TaskState::kQueued);
    ASSERT_EQ(StateOf(other), TaskState::kQueued);

    scheduler().Finish(blocking, absl::OkStatus(), absl::ZeroDuration());
    EXPECT_EQ(StateOf(other), TaskState::kAdmitted);
    EXPECT_EQ(StateOf(held), TaskState::kQueued) << "b's task has been admitted: it is in flight";
    scheduler().Finish(other, absl::OkStatus(), absl::ZeroDuration());
    clock_.Advance(SchedulerOptions().pacing_anticipation);
    scheduler().Pump();
    EXPECT_EQ(StateOf(held), TaskState::kAdmitted) << "nothing of b queued or in flight";
  }
}

TEST_F(PacingTest, BandwidthCapHoldsAPartitionBackEvenOnAnIdleDevice) {
  BuildAB(/*a_max_running=*/64, /*b_max_running=*/64, /*a_cap=*/0.25);
  SessionTicket a = Open("a");
  SessionTicket b = Open("b");
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(a, absl::Milliseconds(50)));  // cap bucket: -40 ms

  TaskRef capped = Submit(a);
  EXPECT_EQ(StateOf(capped), TaskState::kQueued) << "nothing else runs, yet the cap holds";
  // 40 ms of debt at 0.25 takes 160 ms to repay; the bucket must then be positive.
  const absl::Time ready = clock_.Now() + absl::Milliseconds(160) + absl::Nanoseconds(1);
  EXPECT_EQ(scheduler().Pump(), ready);
  TaskRef other = Submit(b);
  EXPECT_EQ(StateOf(other), TaskState::kAdmitted) << "a's cap does not hold b";

  clock_.Advance(absl::Milliseconds(160));
  EXPECT_EQ(scheduler().Pump(), ready);
  EXPECT_EQ(StateOf(capped), TaskState::kQueued);
  clock_.Advance(absl::Nanoseconds(1));
  EXPECT_EQ(scheduler().Pump(), absl::InfiniteFuture());
  EXPECT_EQ(StateOf(capped), TaskState::kAdmitted);
}

TEST_F(PacingTest, PartitionWithoutACapIsNotHeldOnAnIdleDevice) {
  BuildAB();
  SessionTicket a = Open("a");
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(a, absl::Milliseconds(500)));
  EXPECT_EQ(StateOf(Submit(a)), TaskState::kAdmitted);
}

// ======================================================================================
// BestEffort and Burstable work in flight beside Guaranteed work
// ======================================================================================

enum class GuaranteedEnd { kSucceeds, kFails, kCancelledWhileQueued, kExpires, kSessionEnds };

struct GateCase {
  std::string name;
  GuaranteedEnd end;
};
void PrintTo(const GateCase& c, std::ostream* os) { *os << c.name; }

class BestEffortGateTest : public SchedulerTest, public ::testing::WithParamInterface<GateCase> {};

// "gold" runs one task at a time and has a Guaranteed session; "bulk" has a BestEffort and
// a Burstable session. Both are on device 0. Task names never measured are estimated at
// their class's bound, so one BestEffort task in flight uses the whole BestEffort bound.
TEST_P(BestEffortGateTest, BestEffortBeyondItsBoundWaitsWhileGuaranteedWorkIsActive) {
  PartitionSpec gold = Partition("gold", 32 * kMiB, 0.5);
  gold.max_running_tasks = 1;
  Build({gold, Partition("bulk", 32 * kMiB, 0.5)});
  SessionTicket guaranteed = Open("gold", Guaranteed());
  SessionTicket blocker = Open("gold", Burstable());
  SessionTicket best_effort = Open("bulk", BestEffort());
  SessionTicket burstable = Open("bulk", Burstable());

  TaskRef blocking = Submit(blocker);
  ASSERT_THAT(scheduler().Start(blocking), IsOk());
  TaskRef g = Submit(guaranteed, WithQueueTimeout(absl::Seconds(1)));
  ASSERT_EQ(StateOf(g), TaskState::kQueued);
  TaskRef first = Submit(best_effort);
  EXPECT_EQ(StateOf(first), TaskState::kAdmitted) << "none in flight: one always goes";
  TaskRef be = Submit(best_effort);
  EXPECT_EQ(StateOf(be), TaskState::kQueued) << "the bound is used, a Guaranteed task queued";
  EXPECT_EQ(StateOf(Submit(burstable)), TaskState::kQueued)
      << "bounded too: the blocker, a Burstable task never measured, uses the whole bound";
  scheduler().Pump();
  EXPECT_EQ(StateOf(be), TaskState::kQueued);

  switch (GetParam().end) {
    case GuaranteedEnd::kSucceeds:
    case GuaranteedEnd::kFails:
      scheduler().Finish(blocking, absl::OkStatus(), absl::ZeroDuration());
      ASSERT_EQ(StateOf(g), TaskState::kAdmitted);
      EXPECT_EQ(StateOf(be), TaskState::kQueued) << "bounded beside an admitted Guaranteed task";
      ASSERT_THAT(scheduler().Start(g), IsOk());
      scheduler().Pump();
      EXPECT_EQ(StateOf(be), TaskState::kQueued) << "bounded beside a running Guaranteed task";
      scheduler().Finish(
          g,
          GetParam().end == GuaranteedEnd::kSucceeds ? absl::OkStatus() : absl::InternalError("x"),
          absl::Milliseconds(1));
      break;
    case GuaranteedEnd::kCancelledWhileQueued:
      ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(g), "no longer needed"), IsOk());
      break;
    case GuaranteedEnd::kExpires:
      clock_.Advance(absl::Seconds(1));
      scheduler().Pump();
      ASSERT_EQ(StateOf(g), TaskState::kExpired);
      break;
    case GuaranteedEnd::kSessionEnds:
      scheduler().Finish(blocking, absl::OkStatus(), absl::ZeroDuration());
      ASSERT_EQ(StateOf(g), TaskState::kAdmitted);
      scheduler().EndSession(guaranteed);
      ASSERT_EQ(StateOf(g), TaskState::kCancelled);
      break;
  }
  EXPECT_EQ(StateOf(be), TaskState::kAdmitted) << "no bound once the Guaranteed task ended";
}

INSTANTIATE_TEST_SUITE_P(
    Table, BestEffortGateTest,
    ::testing::Values(GateCase{"GuaranteedSucceeds", GuaranteedEnd::kSucceeds},
                      GateCase{"GuaranteedFails", GuaranteedEnd::kFails},
                      GateCase{"GuaranteedCancelledWhileQueued",
                               GuaranteedEnd::kCancelledWhileQueued},
                      GateCase{"GuaranteedExpires", GuaranteedEnd::kExpires},
                      GateCase{"GuaranteedSessionEnds", GuaranteedEnd::kSessionEnds}),
    [](const ::testing::TestParamInfo<GateCase>& info) { return info.param.name; });

// One partition over the whole device with sessions of the three classes; tasks of the
// lower classes are named so that their estimates can be taught first (with no Guaranteed
// work active, so without a bound).
class InFlightBoundTest : public SchedulerTest {
 protected:
  void SetUp() override {
    Build({WholeDevice("p")});
    gold_ = Open("p", Guaranteed());
    silver_ = Open("p", Burstable());
    bronze_ = Open("p", BestEffort());
  }
  // Runs one task of `name` to success with `device_time`, which its session learns.
  void Teach(const SessionTicket& session, const std::string& name, absl::Duration device_time) {
    TaskRef task = Submit(session, Named(name));
    ASSERT_THAT(scheduler().Start(task), IsOk());
    scheduler().Finish(task, absl::OkStatus(), device_time);
  }
  void StartGuaranteed() {
    guaranteed_ = Submit(gold_, Named("gold"));
    ASSERT_THAT(scheduler().Start(guaranteed_), IsOk());
  }
  std::vector<TaskRef> SubmitMany(const SessionTicket& session, const std::string& name, int n) {
    std::vector<TaskRef> tasks;
    for (int i = 0; i < n; ++i) tasks.push_back(Submit(session, Named(name)));
    return tasks;
  }
  int Admitted(const std::vector<TaskRef>& tasks) {
    return static_cast<int>(std::count_if(tasks.begin(), tasks.end(), [&](const TaskRef& t) {
      return StateOf(t) == TaskState::kAdmitted;
    }));
  }

  SessionTicket gold_, silver_, bronze_;
  TaskRef guaranteed_;
};

TEST_F(InFlightBoundTest, BestEffortIsAdmittedWhileItsEstimatedTimeInFlightIsBelowTheBound) {
  ASSERT_NO_FATAL_FAILURE(Teach(bronze_, "small", absl::Microseconds(300)));
  ASSERT_NO_FATAL_FAILURE(StartGuaranteed());
  std::vector<TaskRef> tasks = SubmitMany(bronze_, "small", 6);
  // Admitted while the sum before it is below 1 ms: 0, 0.3, 0.6 and 0.9 ms.
  EXPECT_EQ(Admitted(tasks), 4);
  EXPECT_EQ(StateOf(tasks[4]), TaskState::kQueued);
  ASSERT_THAT(scheduler().Start(tasks[0]), IsOk());
  scheduler().Finish(tasks[0], absl::OkStatus(), absl::Microseconds(300));
  EXPECT_EQ(StateOf(tasks[4]), TaskState::kAdmitted) << "the finish made room: 0.9 ms in flight";
  EXPECT_EQ(StateOf(tasks[5]), TaskState::kQueued);
  ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(tasks[1]), "not needed"), IsOk());
  EXPECT_EQ(StateOf(tasks[5]), TaskState::kAdmitted) << "a cancelled task leaves the sum too";
}

TEST_F(InFlightBoundTest, OneTaskAlwaysGoesWhenNoneOfItsClassIsInFlight) {
  ASSERT_NO_FATAL_FAILURE(Teach(bronze_, "huge", absl::Milliseconds(50)));
  ASSERT_NO_FATAL_FAILURE(StartGuaranteed());
  std::vector<TaskRef> tasks = SubmitMany(bronze_, "huge", 2);
  EXPECT_EQ(StateOf(tasks[0]), TaskState::kAdmitted) << "50 ms, far above the bound, goes alone";
  EXPECT_EQ(StateOf(tasks[1]), TaskState::kQueued);
  ASSERT_THAT(scheduler().Start(tasks[0]), IsOk());
  scheduler().Finish(tasks[0], absl::OkStatus(), absl::Milliseconds(50));
  EXPECT_EQ(StateOf(tasks[1]), TaskState::kAdmitted) << "the finish pumped";
}

TEST_F(InFlightBoundTest, BurstableHasItsOwnLargerBound) {
  ASSERT_NO_FATAL_FAILURE(Teach(silver_, "mid", absl::Milliseconds(1)));
  ASSERT_NO_FATAL_FAILURE(Teach(bronze_, "mid", absl::Milliseconds(1)));
  ASSERT_NO_FATAL_FAILURE(StartGuaranteed());
  std::vector<TaskRef> best_effort = SubmitMany(bronze_, "mid", 2);
  EXPECT_EQ(Admitted(best_effort), 1) << "1 ms in flight: the BestEffort bound is used";
  std::vector<TaskRef> burstable = SubmitMany(silver_, "mid", 6);
  EXPECT_EQ(Admitted(burstable), 4) << "its own sum: 0, 1, 2 and 3 ms are below 4 ms";
  ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(best_effort[0]), "not needed"), IsOk());
  EXPECT_EQ(StateOf(best_effort[1]), TaskState::kQueued)
      << "queued behind Burstable in the partition's queue";
  ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(burstable[0]), "not needed"), IsOk());
  EXPECT_EQ(Admitted(burstable), 4) << "one left, one more went";
}

TEST_F(InFlightBoundTest, NoBoundWithoutGuaranteedWork) {
  std::vector<TaskRef> best_effort = SubmitMany(bronze_, "unknown", 20);
  std::vector<TaskRef> burstable = SubmitMany(silver_, "unknown", 20);
  EXPECT_EQ(Admitted(best_effort), 20);
  EXPECT_EQ(Admitted(burstable), 20);
  // Guaranteed work arriving takes nothing back, but holds new ones.
  ASSERT_NO_FATAL_FAILURE(StartGuaranteed());
  EXPECT_EQ(StateOf(Submit(silver_, Named("unknown"))), TaskState::kQueued);
  EXPECT_EQ(StateOf(Submit(bronze_, Named("unknown"))), TaskState::kQueued);
  EXPECT_EQ(Admitted(best_effort), 20);
}

// A name never measured is estimated at its class's bound, so it goes alone; a successful
// finish of a task that ran teaches the estimate (a rise at once), a failure or a task that
// never started does not, and names are learned apart.
TEST_F(InFlightBoundTest, EstimatesLearnFromSuccessfulFinishesOfTasksThatRan) {
  ASSERT_NO_FATAL_FAILURE(StartGuaranteed());
  std::vector<TaskRef> tasks = SubmitMany(bronze_, "op", 2);
  EXPECT_EQ(Admitted(tasks), 1) << "unknown: estimated at the whole 1 ms bound";
  scheduler().Finish(tasks[0], absl::OkStatus(), absl::Microseconds(10));  // never started
  ASSERT_EQ(StateOf(tasks[1]), TaskState::kAdmitted);
  ASSERT_THAT(scheduler().Start(tasks[1]), IsOk());
  scheduler().Finish(tasks[1], absl::InternalError("failed"), absl::Microseconds(10));
  tasks = SubmitMany(bronze_, "op", 2);
  EXPECT_EQ(Admitted(tasks), 1) << "neither taught anything";
  for (const TaskRef& task : tasks) {
    if (StateOf(task) != TaskState::kAdmitted) scheduler().Pump();
    ASSERT_EQ(StateOf(task), TaskState::kAdmitted);
    ASSERT_THAT(scheduler().Start(task), IsOk());
    scheduler().Finish(task, absl::OkStatus(), absl::Microseconds(200));
  }

  tasks = SubmitMany(bronze_, "op", 6);
  EXPECT_EQ(Admitted(tasks), 5) << "200 us each: 0 to 0.8 ms in flight are below 1 ms";
  ASSERT_THAT(scheduler().Start(tasks[0]), IsOk());
  scheduler().Finish(tasks[0], absl::OkStatus(), absl::Microseconds(400));
  for (int i = 5; i >= 1; --i) {  // the queued one first, so that nothing else is admitted
    ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(tasks[i]), "done"), IsOk());
  }
  tasks = SubmitMany(bronze_, "op", 4);
  EXPECT_EQ(Admitted(tasks), 3) << "a rise is taken at once: 400 us each, 0, 0.4 and 0.8 ms";
  EXPECT_EQ(StateOf(Submit(bronze_, Named("other"))), TaskState::kQueued)
      << "BestEffort queue order: behind the queued op";
}

TEST_F(PacingTest, GuaranteedTaskHeldByItsOwnCapDoesNotGateBestEffort) {
  BuildAB(/*a_max_running=*/64, /*b_max_running=*/64, /*a_cap=*/0.25);
  SessionTicket guaranteed = Open("a", Guaranteed(kMiB, 0.25));
  SessionTicket best_effort = Open("b", BestEffort());
  ASSERT_NO_FATAL_FAILURE(RunToCompletion(guaranteed, absl::Milliseconds(50)));

  TaskRef capped = Submit(guaranteed);
  ASSERT_EQ(StateOf(capped), TaskState::kQueued) << "held by a's cap";
  EXPECT_EQ(StateOf(Submit(best_effort)), TaskState::kAdmitted)
      << "a Guaranteed task that cannot run must not leave the device idle";

  clock_.Advance(absl::Milliseconds(161));
  scheduler().Pump();
  ASSERT_EQ(StateOf(capped), TaskState::kAdmitted);
  EXPECT_EQ(StateOf(Submit(best_effort)), TaskState::kQueued) << "gated again once it may run";
  scheduler().Finish(capped, absl::OkStatus(), absl::ZeroDuration());
}

TEST_F(SchedulerTest, StartOfATaskCancelledAfterAdmissionCarriesTheReason) {
  Build({WholeDevice("p")});
  SessionTicket s = Open("p");
  TaskRef admitted = Submit(s);
  ASSERT_EQ(StateOf(admitted), TaskState::kAdmitted);
  ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(admitted), "the operator said so"), IsOk());
  const absl::Status started = scheduler().Start(admitted);
  EXPECT_THAT(started, StatusIs(absl::StatusCode::kCancelled, HasSubstr("the operator said so")));
  EXPECT_EQ(ReasonOf(started), RejectReason::kCancelled);
}

TEST_F(SchedulerTest, GuaranteedWorkOnAnotherDeviceDoesNotBoundBestEffort) {
  Build({Partition("gpu0", kDeviceBytes, 1.0, 0), Partition("gpu1", kDeviceBytes, 1.0, 1)}, {},
        {{0, kDeviceBytes}, {1, kDeviceBytes}});
  TaskRef g = Submit(Open("gpu1", Guaranteed()));
  ASSERT_THAT(scheduler().Start(g), IsOk());
  SessionTicket on0 = Open("gpu0", BestEffort());
  SessionTicket on1 = Open("gpu1", BestEffort());
  EXPECT_EQ(StateOf(Submit(on0)), TaskState::kAdmitted);
  EXPECT_EQ(StateOf(Submit(on0)), TaskState::kAdmitted);
  EXPECT_EQ(StateOf(Submit(on1)), TaskState::kAdmitted) << "none in flight on device 1";
  EXPECT_EQ(StateOf(Submit(on1)), TaskState::kQueued);
}

TEST_F(SchedulerTest, BoundedBestEffortDoesNotBlockBurstableBehindItInItsOwnQueue) {
  Build({WholeDevice("p")});
  TaskRef g = Submit(Open("p", Guaranteed()));
  ASSERT_THAT(scheduler().Start(g), IsOk());
  SessionTicket best_effort = Open("p", BestEffort());
  ASSERT_EQ(StateOf(Submit(best_effort)), TaskState::kAdmitted);
  TaskRef be = Submit(best_effort);
  TaskRef burst = Submit(Open("p", Burstable()));
  EXPECT_EQ(StateOf(be), TaskState::kQueued);
  EXPECT_EQ(StateOf(burst), TaskState::kAdmitted) << "Burstable orders ahead of BestEffort";
}

// ======================================================================================
// Compute share over time: a simulated device
// ======================================================================================
//
// One device modelled as serial: it runs the admitted tasks one at a time in the order they
// were admitted, each for its partition's fixed device time, which Finish reports. Busy
// partitions always have kDepth tasks queued. The loop pumps, starts, moves the fake clock
// to the next finish or to when the scheduler said something may change, and finishes;
// each partition's device time is then counted per 100 ms window after a warm-up.

struct SimPartition {
  std::string name;
  double share = 0;
  double cap = 0;  // bandwidth cap; 0: none
  absl::Duration task_time;
  bool busy = true;
  ResourceSpec resources;  // of its one session
};

struct ShareCase {
  std::string name;
  std::vector<SimPartition> partitions;
  // Each partition's expected fraction of every window, in partition order.
  std::vector<double> expected;
};
void PrintTo(const ShareCase& c, std::ostream* os) { *os << c.name; }

class ShareSimulationTest : public SchedulerTest, public ::testing::WithParamInterface<ShareCase> {
 protected:
  static constexpr int kDepth = 4;
  static constexpr absl::Duration kWarmUp = absl::Seconds(1);
  static constexpr absl::Duration kWindow = absl::Milliseconds(100);
  static constexpr int kWindows = 20;

  // Fills `device_time_ns_[partition][window]`, and `idle_with_work_` with the time the
  // device stood idle while a task was queued.
  void Simulate(const std::vector<SimPartition>& partitions) {
    std::vector<PartitionSpec> specs;
    for (const SimPartition& sim : partitions) {
      PartitionSpec spec = Partition(sim.name, kDeviceBytes / 4, sim.share);
      spec.bandwidth_cap = sim.cap;
      specs.push_back(spec);
    }
    Build(specs);  // the default options: the pacing burst and bounds as the daemon has them
    const int n = static_cast<int>(partitions.size());
    std::vector<SessionTicket> sessions;
    for (const SimPartition& sim : partitions) sessions.push_back(Open(sim.name, sim.resources));
    std::vector<std::deque<TaskRef>> queued(n);
    std::deque<std::pair<int, TaskRef>> admitted;  // in admission order: the device's queue
    device_time_ns_.assign(n, std::vector<int64_t>(kWindows, 0));
    idle_with_work_ = absl::ZeroDuration();

    // Moves what the scheduler admitted to the device's queue and tops the queues up.
    auto settle = [&] {
      bool changed = true;
      while (changed) {
        changed = false;
        for (int p = 0; p < n; ++p) {
          for (auto it = queued[p].begin(); it != queued[p].end();) {
            if (StateOf(*it) == TaskState::kAdmitted) {
              admitted.emplace_back(p, *it);
              it = queued[p].erase(it);
              changed = true;
            } else {
              ASSERT_EQ(StateOf(*it), TaskState::kQueued);
              ++it;
            }
          }
          while (partitions[p].busy && static_cast<int>(queued[p].size()) < kDepth) {
            queued[p].push_back(Submit(sessions[p], Named(partitions[p].name)));
            changed = true;
          }
        }
      }
    };

    const absl::Time start = clock_.Now();
    const absl::Time measured_from = start + kWarmUp;
    const absl::Time end = measured_from + kWindow * kWindows;
    std::optional<std::pair<int, TaskRef>> running;
    absl::Time running_since, running_until;
    while (clock_.Now() < end) {
      absl::Time wake;
      do {
        ASSERT_NO_FATAL_FAILURE(settle());
        if (!running && !admitted.empty()) {
          running = admitted.front();
          admitted.pop_front();
          ASSERT_THAT(scheduler().Start(running->second), IsOk());
          running_since = clock_.Now();
          running_until = running_since + partitions[running->first].task_time;
        }
        wake = scheduler().Pump();
      } while (!admitted.empty() && !running);
      ASSERT_NO_FATAL_FAILURE(settle());
      absl::Time next = std::min(wake, end);
      if (running) next = std::min(next, running_until);
      ASSERT_GT(next, clock_.Now()) << "nothing will change: the simulation is stuck";
      if (!running) idle_with_work_ += next - clock_.Now();
      clock_.Advance(next - clock_.Now());
      if (running && running_until <= clock_.Now()) {
        Count(running->first, running_since, running_until, measured_from);
        scheduler().Finish(running->second, absl::OkStatus(), running_until - running_since);
        running.reset();
      }
    }
  }

  // Adds the part of [from, to) that falls in each measured window.
  void Count(int partition, absl::Time from, absl::Time to, absl::Time measured_from) {
    for (int w = 0; w < kWindows; ++w) {
      const absl::Time lo = std::max(from, measured_from + kWindow * w);
      const absl::Time hi = std::min(to, measured_from + kWindow * (w + 1));
      if (hi > lo) device_time_ns_[partition][w] += absl::ToInt64Nanoseconds(hi - lo);
    }
  }

  std::vector<std::vector<int64_t>> device_time_ns_;
  absl::Duration idle_with_work_;
};

// Within 3 percentage points of the expected fraction in every 100 ms window.
TEST_P(ShareSimulationTest, EachPartitionGetsItsFractionOfEveryWindow) {
  const ShareCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(Simulate(c.partitions));
  for (size_t p = 0; p < c.partitions.size(); ++p) {
    for (int w = 0; w < kWindows; ++w) {
      const double fraction =
          static_cast<double>(device_time_ns_[p][w]) / absl::ToInt64Nanoseconds(kWindow);
      EXPECT_NEAR(fraction, c.expected[p], 0.03)
          << "partition " << c.partitions[p].name << ", window " << w;
    }
  }
  bool capped = false;
  for (const SimPartition& sim : c.partitions) capped |= sim.cap > 0;
  if (!capped) {
    EXPECT_EQ(idle_with_work_, absl::ZeroDuration()) << "work-conserving: never idle with work";
  }
}

ResourceSpec GuaranteedShare(double compute) { return Guaranteed(kMiB, compute); }

INSTANTIATE_TEST_SUITE_P(
    Table, ShareSimulationTest,
    ::testing::Values(
        ShareCase{"SixtyTwentyTwenty",
                  {{"a", 0.6, 0, absl::Microseconds(100)},
                   {"b", 0.2, 0, absl::Microseconds(500)},
                   {"c", 0.2, 0, absl::Milliseconds(2)}},
                  {0.6, 0.2, 0.2}},
        ShareCase{"SixtyTwentyTwentyLongTasksInTheLargeShare",
                  {{"a", 0.6, 0, absl::Milliseconds(2)},
                   {"b", 0.2, 0, absl::Microseconds(100)},
                   {"c", 0.2, 0, absl::Microseconds(500)}},
                  {0.6, 0.2, 0.2}},
        ShareCase{"HalfAndHalf",
                  {{"a", 0.5, 0, absl::Microseconds(100)}, {"b", 0.5, 0, absl::Milliseconds(2)}},
                  {0.5, 0.5}},
        ShareCase{"GuaranteedBesideBestEffort",
                  {{"gold", 0.6, 0, absl::Microseconds(100), true, GuaranteedShare(0.5)},
                   {"bulk", 0.4, 0, absl::Milliseconds(2)}},
                  {0.6, 0.4}},
        ShareCase{"LoneBusyPartitionGetsTheWholeDevice",
                  {{"a", 0.6, 0, absl::Microseconds(500)},
                   {"b", 0.2, 0, absl::Microseconds(100), false},
                   {"c", 0.2, 0, absl::Milliseconds(2), false}},
                  {1.0, 0, 0}},
        ShareCase{"IdlePartitionsShareGoesToTheBusyOnesInProportion",
                  {{"a", 0.6, 0, absl::Microseconds(100)},
                   {"b", 0.2, 0, absl::Milliseconds(2)},
                   {"c", 0.2, 0, absl::Microseconds(500), false}},
                  {0.75, 0.25, 0}},
        ShareCase{"BandwidthCapHoldsOnAnOtherwiseIdleDevice",
                  {{"a", 0.2, 0.3, absl::Microseconds(500)},
                   {"b", 0.8, 0, absl::Microseconds(100), false}},
                  {0.3, 0}},
        ShareCase{"BandwidthCapAboveTheShareUnderContention",
                  {{"a", 0.2, 0.3, absl::Microseconds(500)}, {"b", 0.8, 0, absl::Milliseconds(2)}},
                  {0.2, 0.8}}),
    [](const ::testing::TestParamInfo<ShareCase>& info) { return info.param.name; });

// ======================================================================================
// Compute share over time: a simulated concurrent device (a GPU)
// ======================================================================================
//
// A GPU runs the kernels of several streams at once. Modelled as processor sharing: every
// admitted task starts at once and, while k tasks run, each progresses at 1/k of the
// device's speed; the device time a task reports is its wall time from start to finish, as
// the events around it on its stream measure it (so it includes the time it shared the
// device). Clients are synchronous: a flood session submits its next task as soon as its
// previous one finishes (one in flight per session, so queues are mostly empty); a periodic
// session submits one every `period` (when its previous one has finished). The work a
// partition got in a 100 ms window is the solo device time of its tasks' progress in it
// (real work, not the inflated time each task reports).

struct ConcurrentSession {
  absl::Duration work;    // the task's device time when it runs alone
  absl::Duration period;  // zero: a flood (closed loop); else one task per period
  ResourceSpec resources;
  // A flood's round trip: from one task's finish to the submission of the next.
  absl::Duration round_trip;
};

struct ConcurrentPartition {
  std::string name;
  double share = 0;
  std::vector<ConcurrentSession> sessions;
};

struct ConcurrentCase {
  std::string name;
  std::vector<ConcurrentPartition> partitions;
  // Each partition's expected fraction of every window's work, in partition order.
  std::vector<double> expected;
  bool guaranteed_never_waits = false;
};
void PrintTo(const ConcurrentCase& c, std::ostream* os) { *os << c.name; }

class ConcurrentShareSimulationTest : public SchedulerTest,
                                      public ::testing::WithParamInterface<ConcurrentCase> {
 protected:
  static constexpr absl::Duration kWarmUp = absl::Seconds(1);
  static constexpr absl::Duration kWindow = absl::Milliseconds(100);
  static constexpr int kWindows = 20;

  struct SimSession {
    int partition = 0;
    ConcurrentSession spec;
    SessionTicket ticket;
    TaskRef task;  // submitted and not finished
    absl::Time submitted;
    absl::Time next_submit;  // periodic sessions
    bool running = false;
    absl::Time started;
    double remaining_ns = 0;  // solo work left
  };

  // Fills work_ns_[partition][window], and the longest time a Guaranteed task waited for
  // admission (max_guaranteed_wait_).
  void Simulate(const std::vector<ConcurrentPartition>& partitions) {
    std::vector<PartitionSpec> specs;
    for (const ConcurrentPartition& sim : partitions) {
      specs.push_back(Partition(sim.name, kDeviceBytes / 4, sim.share));
    }
    Build(specs);  // the default options, as the daemon has them
    std::vector<SimSession> sessions;
    for (size_t p = 0; p < partitions.size(); ++p) {
      for (const ConcurrentSession& spec : partitions[p].sessions) {
        SimSession s;
        s.partition = static_cast<int>(p);
        s.spec = spec;
        s.ticket = Open(partitions[p].name, spec.resources);
        s.next_submit = clock_.Now();
        sessions.push_back(std::move(s));
      }
    }
    work_ns_.assign(partitions.size(), std::vector<double>(kWindows, 0));
    max_guaranteed_wait_ = absl::ZeroDuration();
    const absl::Time measured_from = clock_.Now() + kWarmUp;
    const absl::Time end = measured_from + kWindow * kWindows;

    while (clock_.Now() < end) {
      const absl::Time now = clock_.Now();
      // Clients submit; admitted tasks start on the device at once.
      for (SimSession& s : sessions) {
        if (s.task == nullptr && s.next_submit <= now) {
          s.task = Submit(s.ticket, Named(partitions[s.partition].name));
          ASSERT_NE(s.task, nullptr);
          s.submitted = now;
          if (s.spec.period > absl::ZeroDuration()) s.next_submit += s.spec.period;
        }
      }
      const absl::Time wake = scheduler().Pump();
      int k = 0;
      for (SimSession& s : sessions) {
        if (s.task != nullptr && !s.running && StateOf(s.task) == TaskState::kAdmitted) {
          ASSERT_THAT(scheduler().Start(s.task), IsOk());
          s.running = true;
          s.started = now;
          s.remaining_ns = absl::ToDoubleNanoseconds(s.spec.work);
          if (DeriveQos(s.spec.resources) == QosClass::kGuaranteed) {
            max_guaranteed_wait_ = std::max(max_guaranteed_wait_, now - s.submitted);
          }
        }
        if (s.running) ++k;
      }
      // The next event: a finish, a submission, the scheduler's wake-up, a window's edge.
      absl::Time next = std::min(wake, end);
      if (now < measured_from) {
        next = std::min(next, measured_from);
      } else {
        const int64_t w = (now - measured_from) / kWindow;
        next = std::min(next, measured_from + kWindow * (w + 1));
      }
      for (const SimSession& s : sessions) {
        if (s.running) {
          next = std::min(
              next, now + absl::Nanoseconds(static_cast<int64_t>(std::ceil(s.remaining_ns * k))));
        } else if (s.task == nullptr) {
          next = std::min(next, std::max(s.next_submit, now));
        }
      }
      ASSERT_GT(next, now) << "nothing will change: the simulation is stuck";
      const double progress_ns = k == 0 ? 0 : absl::ToDoubleNanoseconds(next - now) / k;
      clock_.Advance(next - now);
      for (SimSession& s : sessions) {
        if (!s.running) continue;
        const double done_ns = std::min(progress_ns, s.remaining_ns);
        s.remaining_ns -= done_ns;
        if (now >= measured_from) {
          work_ns_[s.partition][(now - measured_from) / kWindow] += done_ns;
        }
        if (s.remaining_ns < 0.5) {
          scheduler().Finish(s.task, absl::OkStatus(), clock_.Now() - s.started);
          s.task = nullptr;
          s.running = false;
          if (s.spec.period == absl::ZeroDuration()) {
            s.next_submit = clock_.Now() + s.spec.round_trip;
          }
        }
      }
    }
  }

  std::vector<std::vector<double>> work_ns_;
  absl::Duration max_guaranteed_wait_;
};

// Each busy partition gets its fraction of every window's work within 3 percentage points,
// the device does at least 95% of the work it could in every window, and a Guaranteed
// session that uses less than its partition's share never waits for admission, whatever the
// BestEffort partition beside it owes.
TEST_P(ConcurrentShareSimulationTest, EachPartitionGetsItsFractionOfEveryWindowsWork) {
  const ConcurrentCase& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(Simulate(c.partitions));
  const double window_ns = absl::ToDoubleNanoseconds(kWindow);
  for (size_t p = 0; p < c.partitions.size(); ++p) {
    double sum_ns = 0;
    for (int w = 0; w < kWindows; ++w) sum_ns += work_ns_[p][w];
    const double mean = sum_ns / window_ns / kWindows;
    for (int w = 0; w < kWindows; ++w) {
      EXPECT_NEAR(work_ns_[p][w] / window_ns, c.expected[p], 0.03)
          << "partition " << c.partitions[p].name << ", window " << w << " (mean over windows "
          << mean << ")";
    }
  }
  for (int w = 0; w < kWindows; ++w) {
    double total_ns = 0;
    for (size_t p = 0; p < c.partitions.size(); ++p) total_ns += work_ns_[p][w];
    EXPECT_GE(total_ns / window_ns, 0.95) << "work-conserving: the device stays busy, window " << w;
  }
  if (c.guaranteed_never_waits) {
    EXPECT_EQ(max_guaranteed_wait_, absl::ZeroDuration());
  }
}

ConcurrentSession Flood(absl::Duration work, ResourceSpec resources = BestEffort(),
                        absl::Duration round_trip = absl::ZeroDuration()) {
  return {work, absl::ZeroDuration(), std::move(resources), round_trip};
}

INSTANTIATE_TEST_SUITE_P(
    Table, ConcurrentShareSimulationTest,
    ::testing::Values(
        // The H200 measurement: 8192^3 bf16 matmuls (about 1.4 ms alone) from two sessions in
        // each partition.
        ConcurrentCase{
            "EightyTwenty",
            {{"a", 0.8, {Flood(absl::Microseconds(1400)), Flood(absl::Microseconds(1400))}},
             {"b", 0.2, {Flood(absl::Microseconds(1400)), Flood(absl::Microseconds(1400))}}},
            {0.8, 0.2}},
        // The same with 100 us from each finish to the client's next submission, as through
        // gpukitd (the anticipation covers it).
        ConcurrentCase{"EightyTwentyWithClientRoundTrips",
                       {{"a",
                         0.8,
                         {Flood(absl::Microseconds(1400), BestEffort(), absl::Microseconds(100)),
                          Flood(absl::Microseconds(1400), BestEffort(), absl::Microseconds(100))}},
                        {"b",
                         0.2,
                         {Flood(absl::Microseconds(1400), BestEffort(), absl::Microseconds(100)),
                          Flood(absl::Microseconds(1400), BestEffort(), absl::Microseconds(100))}}},
                       {0.8, 0.2}},
        ConcurrentCase{
            "TwentyEightyShortTasksInTheLargeShare",
            {{"a", 0.2, {Flood(absl::Milliseconds(2)), Flood(absl::Milliseconds(2))}},
             {"b", 0.8, {Flood(absl::Microseconds(100)), Flood(absl::Microseconds(100))}}},
            {0.2, 0.8}},
        ConcurrentCase{
            "HalfAndHalf",
            {{"a", 0.5, {Flood(absl::Microseconds(100)), Flood(absl::Microseconds(100))}},
             {"b", 0.5, {Flood(absl::Milliseconds(2)), Flood(absl::Milliseconds(2))}}},
            {0.5, 0.5}},
        ConcurrentCase{
            "SixtyTwentyTwenty",
            {{"a", 0.6, {Flood(absl::Microseconds(100)), Flood(absl::Microseconds(100))}},
             {"b", 0.2, {Flood(absl::Microseconds(500)), Flood(absl::Microseconds(500))}},
             {"c", 0.2, {Flood(absl::Milliseconds(2)), Flood(absl::Milliseconds(2))}}},
            {0.6, 0.2, 0.2}},
        ConcurrentCase{
            "GuaranteedFloodBesideBestEffortFlood",
            {{"gold",
              0.6,
              {Flood(absl::Microseconds(200), Guaranteed()),
               Flood(absl::Microseconds(200), Guaranteed())}},
             {"bulk", 0.4, {Flood(absl::Microseconds(1400)), Flood(absl::Microseconds(1400))}}},
            {0.6, 0.4}},
        // A Guaranteed victim: 100 us every millisecond (10% of the device), under its
        // partition's half; the BestEffort flood beside it gets the rest.
        ConcurrentCase{
            "GuaranteedVictimBesideBestEffortFlood",
            {{"gold", 0.5, {{absl::Microseconds(100), absl::Milliseconds(1), Guaranteed()}}},
             {"bulk", 0.5, {Flood(absl::Microseconds(1400)), Flood(absl::Microseconds(1400))}}},
            {0.1, 0.9}},
        ConcurrentCase{
            "LoneBusyPartitionGetsTheWholeDevice",
            {{"a", 0.2, {Flood(absl::Microseconds(1400)), Flood(absl::Microseconds(1400))}},
             {"b", 0.8, {}}},
            {1.0, 0}}),
    [](const ::testing::TestParamInfo<ConcurrentCase>& info) { return info.param.name; });

// ======================================================================================
// AwaitAdmission
// ======================================================================================

TEST_F(SchedulerTest, AwaitAdmissionAnswersAtOnceForTasksPastTheQueue) {
  PartitionSpec p = WholeDevice("p");
  p.max_running_tasks = 1;
  Build({p});
  SessionTicket s = Open("p");
  auto never = [] { return false; };
  TaskRef admitted = Submit(s);
  EXPECT_THAT(scheduler().AwaitAdmission(admitted, never), IsOk());
  ASSERT_THAT(scheduler().Start(admitted), IsOk());
  EXPECT_THAT(scheduler().AwaitAdmission(admitted, never), IsOk()) << "running";

  TaskRef cancelled = Submit(s);
  ASSERT_THAT(scheduler().Cancel(scheduler().IdOf(cancelled), "stop"), IsOk());
  absl::Status status = scheduler().AwaitAdmission(cancelled, never);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kCancelled, HasSubstr("stop")));
  EXPECT_EQ(ReasonOf(status), RejectReason::kCancelled);

  scheduler().Finish(admitted, absl::OkStatus(), absl::ZeroDuration());
  EXPECT_THAT(scheduler().AwaitAdmission(admitted, never),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// A task queued behind one running task, awaited on another thread. `cancelled` counts its
// polls: two polls mean the waiter has blocked at least once.
class AwaitAdmissionTest : public SchedulerTest {
 protected:
  void SetUp() override {
    PartitionSpec p = WholeDevice("p");
    p.max_running_tasks = 1;
    Build({p});
    session_ = Open("p");
    running_ = Submit(session_);
    ASSERT_THAT(scheduler().Start(running_), IsOk());
  }

  void StartWaiting(const TaskRef& task) {
    waiter_ = std::thread([this, task] {
      result_ = scheduler().AwaitAdmission(task, [this] {
        polls_.fetch_add(1);
        return cancel_.load();
      });
      done_.store(true);
    });
    while (polls_.load() < 2 && !done_.load()) std::this_thread::yield();
    ASSERT_FALSE(done_.load()) << "returned before anything happened: " << result_;
  }

  absl::Status Join() {
    waiter_.join();
    return result_;
  }

  void TearDown() override {
    if (waiter_.joinable()) {
      cancel_.store(true);
      waiter_.join();
    }
  }

  SessionTicket session_;
  TaskRef running_;
  std::thread waiter_;
  std::atomic<int> polls_{0};
  std::atomic<bool> cancel_{false};
  std::atomic<bool> done_{false};
  absl::Status result_ = absl::UnknownError("not returned");
};

TEST_F(AwaitAdmissionTest, ReturnsOkOnceAnotherThreadFinishesTheRunningTask) {
  TaskRef waiting = Submit(session_);
  ASSERT_NO_FATAL_FAILURE(StartWaiting(waiting));
  scheduler().Finish(running_, absl::OkStatus(), absl::ZeroDuration());
  EXPECT_THAT(Join(), IsOk());
  EXPECT_EQ(StateOf(waiting), TaskState::kAdmitted);
}

TEST_F(AwaitAdmissionTest, ReturnsCancelledOnceTheCallbackSaysSo) {
  TaskRef waiting = Submit(session_);
  ASSERT_NO_FATAL_FAILURE(StartWaiting(waiting));
  cancel_.store(true);
  const absl::Status status = Join();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(ReasonOf(status), RejectReason::kCancelled);
  EXPECT_EQ(StateOf(waiting), TaskState::kCancelled);
  EXPECT_EQ(Rejected("p", RejectReason::kCancelled), 1);
  EXPECT_EQ(StatusOf("p").queued, 0);
}

TEST_F(AwaitAdmissionTest, ReturnsDeadlineExceededOnceAnotherThreadAdvancesTheClock) {
  TaskRef waiting = Submit(session_, WithQueueTimeout(absl::Seconds(1)));
  ASSERT_NO_FATAL_FAILURE(StartWaiting(waiting));
  clock_.Advance(absl::Seconds(2));  // no Pump: the waiter pumps as it polls
  const absl::Status status = Join();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("\"p\"")));
  EXPECT_EQ(ReasonOf(status), RejectReason::kDeadlineExceeded);
  EXPECT_EQ(StateOf(waiting), TaskState::kExpired);
  EXPECT_EQ(Rejected("p", RejectReason::kDeadlineExceeded), 1);
}

}  // namespace
}  // namespace gpukit
