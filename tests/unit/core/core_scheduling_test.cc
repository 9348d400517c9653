// The Core under the scheduler: sessions admitted into partitions with QoS classes, every
// op and transfer run as a task, memory reclaimed by spilling under pressure and restored
// bit for bit, partitions deleted with force. The scheduler's own rules are tested in
// tests/unit/scheduler; these tests check that the Core applies them to real arrays.
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/core.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kDeviceBytes = int64_t{1} << 20;
constexpr int64_t kQuarter = kDeviceBytes / 4;

ResourceSpec Guaranteed(int64_t bytes) {
  ResourceSpec spec;
  spec.memory_limit_bytes = bytes;
  spec.compute_limit = 0.25;
  return spec;
}

ResourceSpec Burstable(int64_t request_bytes, int64_t limit_bytes) {
  ResourceSpec spec;
  spec.memory_request_bytes = request_bytes;
  spec.memory_limit_bytes = limit_bytes;
  return spec;
}

OpInput ScalarZero() {
  OpInput zero;
  zero.is_scalar = true;
  return zero;
}

class CoreSchedulingTest : public ::testing::Test {
 protected:
  // One partition, "shared", over the whole device, spilling unless a test says otherwise.
  CoreSchedulingTest() {
    options_.limits.max_array_bytes = kDeviceBytes;
    options_.streams_per_partition = 1;
    PartitionSpec shared;
    shared.name = "shared";
    shared.memory_quota_bytes = kDeviceBytes;
    shared.compute_share = 1.0;
    shared.spill = true;
    options_.partitions = {shared};
  }

  Core& core() {
    if (core_ == nullptr) {
      CpuDeviceOptions device_options;
      device_options.memory_bytes = kDeviceBytes;
      std::vector<std::unique_ptr<Device>> devices;
      devices.push_back(*CpuDevice::Create(device_options));
      absl::StatusOr<std::unique_ptr<Core>> core =
          Core::Create(clock_, std::move(devices), options_);
      EXPECT_THAT(core, IsOk());
      core_ = *std::move(core);
    }
    return *core_;
  }

  absl::StatusOr<SessionGrant> Open(const ResourceSpec& resources,
                                    std::string partition = "shared") {
    OpenSessionParams params;
    params.tenant = "tenant";
    params.partition = std::move(partition);
    params.resources = resources;
    return core().OpenSession(params);
  }

  // A uint8 array of `bytes` filled with seeded random bytes; returns its handle.
  absl::StatusOr<std::string> Fill(const std::string& session, int64_t bytes, uint32_t seed) {
    GPUKIT_ASSIGN_OR_RETURN(ArrayView view, core().CreateArray(session, {DType::kUInt8, {bytes}}));
    const std::vector<char> data = Bytes(bytes, seed);
    GPUKIT_RETURN_IF_ERROR(core().WriteArray(session, view.handle, 0, data));
    return view.handle;
  }

  static std::vector<char> Bytes(int64_t bytes, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<char> data(static_cast<size_t>(bytes));
    for (char& c : data) c = static_cast<char>(rng());
    return data;
  }

  absl::StatusOr<std::vector<char>> Read(const std::string& session, const std::string& handle,
                                         int64_t bytes) {
    std::vector<char> out(static_cast<size_t>(bytes));
    GPUKIT_RETURN_IF_ERROR(core().ReadArray(session, handle, 0, absl::MakeSpan(out)));
    return out;
  }

  SessionSummary Summary(const std::string& session) {
    for (const SessionSummary& s : core().ListSessions()) {
      if (s.session_id == session) return s;
    }
    ADD_FAILURE() << "no session " << session;
    return {};
  }

  FakeClock clock_;
  CoreOptions options_;
  std::unique_ptr<Core> core_;
};

TEST_F(CoreSchedulingTest, EmptyPartitionListMakesADefaultPartitionOverTheWholeDevice) {
  options_.partitions.clear();
  const std::vector<PartitionStatus> partitions = core().scheduler().ListPartitions();
  ASSERT_EQ(partitions.size(), 1u);
  EXPECT_EQ(partitions[0].spec.name, "default");
  EXPECT_EQ(partitions[0].spec.memory_quota_bytes, kDeviceBytes);
  EXPECT_DOUBLE_EQ(partitions[0].spec.compute_share, 1.0);
  EXPECT_FALSE(partitions[0].spec.spill);
}

TEST_F(CoreSchedulingTest, DefaultPartitionTakesWhatTheConfiguredOnesLeave) {
  options_.partitions[0].memory_quota_bytes = kQuarter;
  options_.partitions[0].compute_share = 0.25;
  const std::vector<PartitionStatus> partitions = core().scheduler().ListPartitions();
  ASSERT_EQ(partitions.size(), 2u);
  EXPECT_EQ(partitions[0].spec.name, "default");
  EXPECT_EQ(partitions[0].spec.memory_quota_bytes, kDeviceBytes - kQuarter);
  EXPECT_DOUBLE_EQ(partitions[0].spec.compute_share, 0.75);
}

TEST_F(CoreSchedulingTest, NoDefaultPartitionWhenTheConfiguredOnesTakeEverything) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant g, Open({}));
  EXPECT_EQ(g.partition, "shared");
  EXPECT_THAT(Open({}, ""), StatusIs(absl::StatusCode::kNotFound,
                                     HasSubstr("partition \"default\" does not exist")));
}

TEST_F(CoreSchedulingTest, GrantCarriesTheQosClassAndDefaultedResources) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant guaranteed, Open(Guaranteed(kQuarter)));
  EXPECT_EQ(guaranteed.qos, QosClass::kGuaranteed);
  EXPECT_EQ(guaranteed.resources.memory_request_bytes, kQuarter);
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant burstable, Open(Burstable(1024, kQuarter)));
  EXPECT_EQ(burstable.qos, QosClass::kBurstable);
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant best_effort, Open({}));
  EXPECT_EQ(best_effort.qos, QosClass::kBestEffort);
  EXPECT_EQ(Summary(guaranteed.session_id).qos, QosClass::kGuaranteed);
}

TEST_F(CoreSchedulingTest, SessionLimitRefusesTheArrayThatWouldCrossIt) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open(Burstable(0, 4096)));
  GPUKIT_ASSERT_OK(core().CreateArray(s.session_id, {DType::kUInt8, {4096}}).status());
  absl::StatusOr<ArrayView> over = core().CreateArray(s.session_id, {DType::kUInt8, {1}});
  EXPECT_THAT(over, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("limits.memory")));
  EXPECT_EQ(ReasonOf(over.status()), RejectReason::kSessionLimitExceeded);
}

TEST_F(CoreSchedulingTest, GuaranteedAllocationSpillsBestEffortArraysAndTheyComeBackBitForBit) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant best_effort, Open({}));
  // BestEffort fills the device with three quarters, in three arrays.
  std::vector<std::string> handles;
  for (uint32_t i = 0; i < 3; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::string h, Fill(best_effort.session_id, kQuarter, 100 + i));
    handles.push_back(h);
    clock_.Advance(absl::Seconds(1));  // distinct last-use times: handles[0] is the oldest
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant guaranteed, Open(Guaranteed(kDeviceBytes / 2)));
  // Half the device for Guaranteed: one quarter is free, one must be reclaimed, the least
  // recently used.
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ArrayView big, core().CreateArray(guaranteed.session_id, {DType::kUInt8, {kDeviceBytes / 2}}));
  EXPECT_EQ(Summary(best_effort.session_id).spilled_bytes, kQuarter);
  EXPECT_EQ(Summary(best_effort.session_id).memory_bytes, 2 * kQuarter);
  EXPECT_EQ(core().scheduler().device_memory_used(0), kDeviceBytes);
  // The Guaranteed session frees its memory; the BestEffort data comes back on next use.
  GPUKIT_ASSERT_OK(core().FreeArray(guaranteed.session_id, big.handle).status());
  for (uint32_t i = 0; i < 3; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<char> data,
                                Read(best_effort.session_id, handles[i], kQuarter));
    EXPECT_EQ(data, Bytes(kQuarter, 100 + i)) << "array " << i;
  }
  EXPECT_EQ(Summary(best_effort.session_id).spilled_bytes, 0);
  EXPECT_EQ(core().scheduler().device_memory_used(0), 3 * kQuarter);
}

TEST_F(CoreSchedulingTest, RunOpRestoresASpilledInput) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant best_effort, Open({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Fill(best_effort.session_id, kQuarter, 7));
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant guaranteed, Open(Guaranteed(kDeviceBytes)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView all,
                              core().CreateArray(guaranteed.session_id, {DType::kUInt8, {kDeviceBytes}}));
  EXPECT_EQ(Summary(best_effort.session_id).spilled_bytes, kQuarter);
  GPUKIT_ASSERT_OK(core().FreeArray(guaranteed.session_id, all.handle).status());
  OpInput in;
  in.handle = a;
  OpInput zero;
  zero.is_scalar = true;
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView sum,
                              core().RunOp(best_effort.session_id, "add", {in, zero}, {}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<char> data, Read(best_effort.session_id, sum.handle, kQuarter));
  EXPECT_EQ(data, Bytes(kQuarter, 7));
}

TEST_F(CoreSchedulingTest, WithoutSpillPressureRefusesTheAllocation) {
  options_.partitions[0].spill = false;
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant best_effort, Open({}));
  GPUKIT_ASSERT_OK(Fill(best_effort.session_id, kDeviceBytes, 1).status());
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant guaranteed, Open(Guaranteed(kQuarter)));
  absl::StatusOr<ArrayView> refused =
      core().CreateArray(guaranteed.session_id, {DType::kUInt8, {kQuarter}});
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(refused.status()), RejectReason::kDeviceMemoryExhausted);
  EXPECT_EQ(Summary(best_effort.session_id).spilled_bytes, 0);
}

TEST_F(CoreSchedulingTest, GuaranteedMemoryIsNeverReclaimed) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant guaranteed, Open(Guaranteed(kDeviceBytes / 2)));
  GPUKIT_ASSERT_OK(Fill(guaranteed.session_id, kDeviceBytes / 2, 1).status());
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant burstable, Open(Burstable(kDeviceBytes / 2, kDeviceBytes)));
  GPUKIT_ASSERT_OK(Fill(burstable.session_id, kDeviceBytes / 2, 2).status());
  // Burstable above its request may not take Guaranteed memory: refused, nothing spilled.
  absl::StatusOr<ArrayView> more = core().CreateArray(burstable.session_id, {DType::kUInt8, {1024}});
  EXPECT_THAT(more, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(Summary(guaranteed.session_id).spilled_bytes, 0);
}

TEST_F(CoreSchedulingTest, BurstableMemoryAboveItsRequestIsReclaimedButNotBelow) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant burstable, Open(Burstable(kQuarter, kDeviceBytes)));
  for (uint32_t i = 0; i < 4; ++i) {
    GPUKIT_ASSERT_OK(Fill(burstable.session_id, kQuarter, i).status());
    clock_.Advance(absl::Seconds(1));
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant guaranteed, Open(Guaranteed(kDeviceBytes / 2)));
  GPUKIT_ASSERT_OK(core().CreateArray(guaranteed.session_id, {DType::kUInt8, {kDeviceBytes / 2}}).status());
  EXPECT_EQ(Summary(burstable.session_id).spilled_bytes, kDeviceBytes / 2);
  // A quarter more would take the Burstable session below its request: refused.
  absl::StatusOr<ArrayView> refused =
      core().CreateArray(guaranteed.session_id, {DType::kUInt8, {kQuarter}});
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(Summary(burstable.session_id).memory_bytes, 2 * kQuarter);
}

TEST_F(CoreSchedulingTest, EveryOpAndTransferIsATaskWithMeasuredDeviceTime) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Fill(s.session_id, kQuarter, 3));
  OpInput in;
  in.handle = a;
  GPUKIT_ASSERT_OK(core().RunOp(s.session_id, "sum", {in}, {}).status());
  const std::vector<TaskInfo> tasks = core().scheduler().ListTasks({});
  ASSERT_EQ(tasks.size(), 3u);  // newest first
  EXPECT_EQ(tasks[0].name, "sum");
  EXPECT_EQ(tasks[0].kind, TaskKind::kOp);
  EXPECT_EQ(tasks[0].state, TaskState::kSucceeded);
  EXPECT_EQ(tasks[1].name, "upload");
  EXPECT_EQ(tasks[1].kind, TaskKind::kTransfer);
  EXPECT_EQ(tasks[2].name, "zero");  // CreateArray's zeroing of the new array
  EXPECT_EQ(tasks[2].kind, TaskKind::kTransfer);
  EXPECT_EQ(tasks[2].state, TaskState::kSucceeded);
  // Summing 256 Ki bytes takes the CPU device some time; the events measured it.
  EXPECT_GT(tasks[0].device_time, absl::ZeroDuration());
  const PartitionStatus p = core().scheduler().ListPartitions()[0];
  EXPECT_EQ(p.succeeded_total, 3);
  EXPECT_EQ(p.device_time_total,
            tasks[0].device_time + tasks[1].device_time + tasks[2].device_time);
}

TEST_F(CoreSchedulingTest, OpWhoseDeadlinePassedInTheQueueExpires) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Fill(s.session_id, 64, 3));
  OpInput in;
  in.handle = a;
  TaskOptions late;
  late.queue_timeout = -absl::Milliseconds(1);  // a call already past its deadline
  absl::StatusOr<ArrayView> result = core().RunOp(s.session_id, "sum", {in}, {}, late);
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(ReasonOf(result.status()), RejectReason::kDeadlineExceeded);
  // Nothing was allocated for the result.
  EXPECT_EQ(core().scheduler().device_memory_used(0), 64);
}

// A task of a scheduler-only session that takes the partition's only running slot and
// keeps it until the test finishes it.
class CoreQueueTest : public CoreSchedulingTest {
 protected:
  CoreQueueTest() { options_.partitions[0].max_running_tasks = 1; }

  void OccupyTheSlot() {
    GPUKIT_ASSERT_OK_AND_ASSIGN(SessionAdmission other,
                                core().scheduler().AdmitSession("s-other", "shared", {}));
    other_ = other.ticket;
    GPUKIT_ASSERT_OK_AND_ASSIGN(blocker_, core().scheduler().Submit(other_, {}));
    ASSERT_EQ(core().scheduler().StateOf(blocker_), TaskState::kAdmitted);
  }

  void TearDown() override {
    if (blocker_ != nullptr) core().scheduler().Finish(blocker_, absl::OkStatus(), {});
    if (other_ != nullptr) core().scheduler().EndSession(other_);
  }

  SessionTicket other_;
  TaskRef blocker_;
};

TEST_F(CoreQueueTest, ClientCancellationEndsAQueuedOpAndAllocatesNothing) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Fill(s.session_id, 64, 3));
  OccupyTheSlot();
  int polls = 0;
  TaskOptions options;
  options.cancelled = [&polls] { return ++polls >= 3; };  // the client goes away
  OpInput in;
  in.handle = a;
  absl::StatusOr<ArrayView> result = core().RunOp(s.session_id, "sum", {in}, {}, options);
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(ReasonOf(result.status()), RejectReason::kCancelled);
  EXPECT_GE(polls, 3);
  EXPECT_EQ(core().scheduler().device_memory_used(0), 64);
  const PartitionStatus p = core().scheduler().ListPartitions()[0];
  EXPECT_EQ(p.rejected[static_cast<int>(RejectReason::kCancelled)], 1);
  EXPECT_EQ(p.queued, 0);
}

TEST_F(CoreQueueTest, QueuedOpExpiresWhenItsDeadlinePasses) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Fill(s.session_id, 64, 3));
  OccupyTheSlot();
  TaskOptions options;
  options.queue_timeout = absl::Milliseconds(10);
  // Time passes only as the waiter polls: each poll is one fake millisecond.
  options.cancelled = [this] {
    clock_.Advance(absl::Milliseconds(1));
    return false;
  };
  OpInput in;
  in.handle = a;
  absl::StatusOr<ArrayView> result = core().RunOp(s.session_id, "sum", {in}, {}, options);
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("shared")));
  EXPECT_EQ(ReasonOf(result.status()), RejectReason::kDeadlineExceeded);
}

// The timeout is a duration that the scheduler adds to its own clock when the task is
// submitted: the fake clock, which starts years away from the real one, is the only time
// involved.
TEST_F(CoreQueueTest, QueueTimeoutCountsFromSubmissionOnTheCoresClock) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Fill(s.session_id, 64, 3));
  OccupyTheSlot();
  TaskOptions options;
  options.queue_timeout = absl::Milliseconds(10);
  options.cancelled = [this] {  // each poll is one fake millisecond
    clock_.Advance(absl::Milliseconds(1));
    return false;
  };
  OpInput in;
  in.handle = a;
  absl::StatusOr<ArrayView> result = core().RunOp(s.session_id, "sum", {in}, {}, options);
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("waited 10ms")));
  std::vector<TaskInfo> expired = core().ListTasks({.state = TaskState::kExpired});
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].deadline - expired[0].submitted, absl::Milliseconds(10));
  EXPECT_EQ(expired[0].finished, expired[0].deadline);
}

TEST_F(CoreQueueTest, ClosingTheSessionCancelsItsQueuedOp) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Fill(s.session_id, 64, 3));
  OccupyTheSlot();
  std::thread closer;
  TaskOptions options;
  // On the waiter's first poll another thread closes the session, as a racing Close would.
  options.cancelled = [&] {
    if (!closer.joinable()) {
      closer = std::thread([&] { EXPECT_THAT(core().CloseSession(s.session_id), IsOk()); });
    }
    return false;
  };
  OpInput in;
  in.handle = a;
  absl::StatusOr<ArrayView> result = core().RunOp(s.session_id, "sum", {in}, {}, options);
  closer.join();
  // The session's end, not a cancellation, is what the client learns (core.h).
  EXPECT_THAT(result,
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("ended (closed, or its lease lapsed) while the request ran")));
}

TEST_F(CoreSchedulingTest, BadOpIsRefusedBeforeItQueues) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open({}));
  OpInput missing;
  missing.handle = "a-nope";
  EXPECT_THAT(core().RunOp(s.session_id, "sum", {missing}, {}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(core().scheduler().ListTasks({}).empty());
}

TEST_F(CoreSchedulingTest, OpWhoseOutputDoesNotFitFailsWithTheRealCauseInItsHistory) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open(Burstable(0, 4096)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Fill(s.session_id, 4096, 5));
  OpInput in;
  in.handle = a;
  absl::StatusOr<ArrayView> out = core().RunOp(s.session_id, "add", {in, ScalarZero()}, {});
  EXPECT_THAT(out, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("limits.memory")));
  EXPECT_EQ(ReasonOf(out.status()), RejectReason::kSessionLimitExceeded);
  const std::vector<TaskInfo> tasks = core().scheduler().ListTasks({});
  ASSERT_EQ(tasks.size(), 3u);  // the op, the upload, the zeroing
  EXPECT_EQ(tasks[0].state, TaskState::kFailed);
  EXPECT_THAT(tasks[0].error, HasSubstr("limits.memory"));
  EXPECT_EQ(tasks[0].started, absl::InfinitePast())
      << "the output's reservation starts the op: refused, it never ran";
  EXPECT_EQ(core().scheduler().device_memory_used(0), 4096) << "the input alone";
}

TEST_F(CoreSchedulingTest, ArrayCountLimitRefusesAnOpBeforeItQueuesOrAllocates) {
  options_.limits.max_arrays_per_session = 1;
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Fill(s.session_id, 1024, 5));
  OpInput in;
  in.handle = a;
  absl::StatusOr<ArrayView> out = core().RunOp(s.session_id, "add", {in, ScalarZero()}, {});
  EXPECT_THAT(out, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(out.status()), RejectReason::kTooManyArrays);
  EXPECT_EQ(core().scheduler().ListTasks({}).size(), 2u) << "only the zeroing and upload ran";
  EXPECT_EQ(core().scheduler().device_memory_used(0), 1024);
  EXPECT_EQ(ReasonOf(core().CreateArray(s.session_id, {DType::kUInt8, {1}}).status()),
            RejectReason::kTooManyArrays);
}

TEST_F(CoreSchedulingTest, SpilledInputThatCannotComeBackKeepsTheAdmissionReason) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant best_effort, Open({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string a, Fill(best_effort.session_id, kQuarter, 7));
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant guaranteed, Open(Guaranteed(kDeviceBytes)));
  GPUKIT_ASSERT_OK(
      core().CreateArray(guaranteed.session_id, {DType::kUInt8, {kDeviceBytes}}).status());
  ASSERT_EQ(Summary(best_effort.session_id).spilled_bytes, kQuarter);
  OpInput in;
  in.handle = a;
  absl::StatusOr<ArrayView> out = core().RunOp(best_effort.session_id, "add", {in, ScalarZero()}, {});
  EXPECT_THAT(out, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("inputs[0]: ")));
  EXPECT_EQ(ReasonOf(out.status()), RejectReason::kDeviceMemoryExhausted);
}

TEST_F(CoreSchedulingTest, ForcedPartitionDeleteClosesItsSessionsAndFreesTheirMemory) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant s, Open({}));
  GPUKIT_ASSERT_OK(Fill(s.session_id, kQuarter, 1).status());
  EXPECT_THAT(core().DeletePartition("shared", /*force=*/false),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(core().DeletePartition("shared", /*force=*/true), ::gpukit::testing::IsOkAndHolds(1));
  EXPECT_EQ(core().session_count(), 0);
  EXPECT_EQ(core().scheduler().device_memory_used(0), 0);
  EXPECT_EQ(core().ListDevices()[0].memory_used_bytes, 0);
  EXPECT_THAT(core().KeepAlive(s.session_id), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CoreSchedulingTest, ClosingEverySessionReturnsAllAccountingToZero) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  std::mt19937 rng(seed);
  std::vector<std::string> sessions;
  for (const ResourceSpec& r : {Guaranteed(kQuarter), Burstable(kQuarter / 2, kDeviceBytes),
                                ResourceSpec{}}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant g, Open(r));
    sessions.push_back(g.session_id);
  }
  for (int i = 0; i < 40; ++i) {
    const std::string& s = sessions[rng() % sessions.size()];
    (void)Fill(s, 1 + static_cast<int64_t>(rng() % (kQuarter / 2)), rng());  // may be refused
    clock_.Advance(absl::Milliseconds(10));
  }
  for (const std::string& s : sessions) GPUKIT_ASSERT_OK(core().CloseSession(s).status());
  EXPECT_EQ(core().scheduler().device_memory_used(0), 0) << "seed " << seed;
  EXPECT_EQ(core().ListDevices()[0].memory_used_bytes, 0) << "seed " << seed;
  for (const PartitionStatus& p : core().scheduler().ListPartitions()) {
    EXPECT_EQ(p.memory_used_bytes, 0) << "seed " << seed;
    EXPECT_EQ(p.memory_requested_bytes, 0) << "seed " << seed;
    EXPECT_EQ(p.sessions, 0) << "seed " << seed;
  }
}

}  // namespace
}  // namespace gpukit
