// OpPipeline (daemon/core/op_pipeline.h) over a CPU device and a FakeClock: ops queued
// without waiting give the values a synchronous chain gives, in order; handles are
// prefix + index and usable at once; a refused op is reported by Sync with its index and
// fails the pipeline until then; a device failure is reported by Sync; each op takes the
// outcome of its own event pair from the batch's one WaitEventPairs; Sync waits for the
// ops it finds queued on its own thread, also while the completion thread holds an earlier
// batch, and a Submit request's sync point waits inside its DeviceBatch; the in-flight cap
// holds; a session closed under queued ops leaves no task and no memory behind; and the
// device time of pipelined ops is accounted like RunOp's; EnqueuedTask::FinishAll ends each
// device's works on it.
#include "daemon/core/op_pipeline.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "daemon/core/core.h"
#include "daemon/core/running_task.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/partition.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/service/request_strings.h"
#include "daemon/service/submit_session.h"
#include "daemon/session/session_manager.h"
#include "gmock/gmock.h"
#include "gpukit/v1/compute.pb.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ForwardingDevice;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kDeviceBytes = int64_t{64} << 20;

OpInput Handle(const std::string& handle) {
  OpInput input;
  input.handle = handle;
  return input;
}

OpInput Scalar(double value) {
  OpInput input;
  input.is_scalar = true;
  input.scalar.is_float = true;
  input.scalar.float_value = value;
  return input;
}

class OpPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeCore(CoreOptions{}); }

  void MakeCore(CoreOptions options) {
    core_.reset();
    options.limits.max_array_bytes = kDeviceBytes;
    CpuDeviceOptions device_options;
    device_options.memory_bytes = kDeviceBytes;
    auto device = std::make_unique<ForwardingDevice>(*CpuDevice::Create(device_options));
    hooks_ = device.get();
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(std::move(device));
    absl::StatusOr<std::unique_ptr<Core>> core = Core::Create(clock_, std::move(devices), options);
    ASSERT_THAT(core, IsOk());
    core_ = *std::move(core);
    OpenSessionParams params;
    params.tenant = "pipeline";
    absl::StatusOr<SessionGrant> grant = core_->OpenSession(params);
    ASSERT_THAT(grant, IsOk());
    session_ = grant->session_id;
  }

  Core& core() { return *core_; }

  // A float32 array of `values`.
  std::string Floats(const std::vector<float>& values) {
    absl::StatusOr<ArrayView> view =
        core().CreateArray(session_, {DType::kFloat32, {static_cast<int64_t>(values.size())}});
    EXPECT_THAT(view, IsOk());
    std::string bytes(values.size() * sizeof(float), '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    EXPECT_THAT(core().WriteArray(session_, view->handle, 0, bytes), IsOk());
    return view->handle;
  }

  std::vector<float> Read(const std::string& handle, int64_t count) {
    std::vector<float> values(static_cast<size_t>(count));
    std::string bytes(values.size() * sizeof(float), '\0');
    EXPECT_THAT(core().ReadArray(session_, handle, 0, absl::MakeSpan(bytes)), IsOk());
    std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
  }

  // Queues `ops` adds `last = last + x` on `pipeline` (each previous result freed once its
  // consumer is queued) and returns the most ops it had in flight after queueing one.
  int MostInFlightOverAdds(OpPipeline& pipeline, const std::string& x, int ops, std::string& last) {
    uint64_t index = 0;
    int most = 0;
    for (int i = 0; i < ops; ++i) {
      absl::StatusOr<ArrayView> out = pipeline.RunOp(index++, "add", {Handle(last), Handle(x)}, {});
      EXPECT_THAT(out, IsOk()) << "op " << i;
      if (!out.ok()) break;
      most = std::max(most, pipeline.in_flight());
      if (last != x) {
        EXPECT_THAT(pipeline.Free(index++, last), IsOk());
      }
      last = out->handle;
    }
    return most;
  }

  int RunningTasks() const {
    int running = 0;
    for (const PartitionStatus& p : core_->scheduler().ListPartitions()) running += p.running;
    return running;
  }

  // One WaitEventPairs of the device: its pairs and the thread that waited.
  using Wait = std::pair<size_t, std::thread::id>;
  // Logs every WaitEventPairs into Waits(); `then` (if set) runs after each, on the waiting
  // thread.
  void LogWaits(std::function<void()> then = nullptr) {
    hooks_->after_wait_event_pairs = [this, then = std::move(then)](
                                         absl::Span<const EventPair> pairs,
                                         const std::vector<EventPairOutcome>&) {
      {
        absl::MutexLock lock(&waits_mu_);
        waits_.emplace_back(pairs.size(), std::this_thread::get_id());
      }
      if (then) then();
    };
  }
  std::vector<Wait> Waits() {
    absl::MutexLock lock(&waits_mu_);
    return waits_;
  }

  FakeClock clock_;
  std::unique_ptr<Core> core_;
  ForwardingDevice* hooks_ = nullptr;
  std::string session_;
  absl::Mutex waits_mu_;
  std::vector<Wait> waits_ ABSL_GUARDED_BY(waits_mu_);
};

TEST_F(OpPipelineTest, ChainOfDependentAddsGivesTheSynchronousValues) {
  const std::string x = Floats(std::vector<float>(16, 1.0f));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  std::string last = x;
  for (uint64_t i = 0; i < 100; ++i) {
    // Each add names the previous op's output, queued and perhaps not yet run.
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                pipeline->RunOp(i, "add", {Handle(last), Handle(x)}, {}));
    ASSERT_EQ(out.handle, absl::StrCat(pipeline->handle_prefix(), i));
    ASSERT_EQ(out.desc.shape, Shape({16}));
    last = out.handle;
  }
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  EXPECT_EQ(pipeline->in_flight(), 0);
  EXPECT_THAT(Read(last, 16), Each(101.0f));
  EXPECT_EQ(RunningTasks(), 0);
}

TEST_F(OpPipelineTest, HandlePrefixIsAnOpaqueIdThatRequestsMayCarry) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  EXPECT_THAT(pipeline->handle_prefix(), StartsWith("a-"));
  EXPECT_EQ(pipeline->handle_prefix().back(), '.');
  // "a-" + 32 hex digits + "." + an index: printable, far below the 256-byte string rule.
  EXPECT_EQ(pipeline->handle_prefix().size(), 2u + 32u + 1u);
  EXPECT_THAT(service::ValidateRequestString(
                  "handle", absl::StrCat(pipeline->handle_prefix(), uint64_t{1} << 63)),
              IsOk());
}

TEST_F(OpPipelineTest, HandleIsUsableBeforeItsProducerRan) {
  // A producer that takes the device a while (a 192^3 matmul on the CPU backend), and its
  // consumer queued right behind it: the consumer is accepted at once, and the stream's
  // order makes it read the producer's result.
  const int64_t n = 192;
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView a, core().CreateArray(session_, {DType::kFloat32, {n, n}}));
  std::vector<float> ones(static_cast<size_t>(n * n), 1.0f);
  std::string bytes(ones.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), ones.data(), bytes.size());
  GPUKIT_ASSERT_OK(core().WriteArray(session_, a.handle, 0, bytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ArrayView product, pipeline->RunOp(0, "matmul", {Handle(a.handle), Handle(a.handle)}, {}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView sum,
                              pipeline->RunOp(1, "add", {Handle(product.handle), Scalar(1)}, {}));
  // The producer's handle may even be freed before anything ran: its consumer pins it.
  GPUKIT_ASSERT_OK(pipeline->Free(2, product.handle));
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  const std::vector<float> values = Read(sum.handle, n * n);
  EXPECT_THAT(values, Each(static_cast<float>(n + 1)));
  EXPECT_THAT(core().DescribeArray(session_, product.handle),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(OpPipelineTest, RefusedOpIsReportedBySyncAndFailsLaterOpsUntilThen) {
  const std::string x = Floats(std::vector<float>(4, 2.0f));
  const std::string y = Floats(std::vector<float>(3, 1.0f));  // does not broadcast with x
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView first,
                              pipeline->RunOp(0, "add", {Handle(x), Handle(x)}, {}));
  EXPECT_THAT(pipeline->RunOp(1, "add", {Handle(first.handle), Handle(y)}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      pipeline->RunOp(2, "add", {Handle(x), Handle(x)}, {}),
      StatusIs(absl::StatusCode::kAborted, HasSubstr("not run: op #1 (add) failed before it")));
  EXPECT_THAT(pipeline->Free(3, x), StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(core().DescribeArray(session_, x), IsOk()) << "a refused free frees nothing";
  EXPECT_THAT(core().DescribeArray(session_, absl::StrCat(pipeline->handle_prefix(), 2)),
              StatusIs(absl::StatusCode::kNotFound));

  std::optional<OpPipeline::Failure> failure = pipeline->Sync();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->index, 1u);
  EXPECT_EQ(failure->op, "add");
  EXPECT_THAT(failure->status, StatusIs(absl::StatusCode::kInvalidArgument));

  // Clean again: the next op runs, and the next sync has nothing to say.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView after,
                              pipeline->RunOp(4, "add", {Handle(x), Handle(x)}, {}));
  EXPECT_EQ(after.handle, absl::StrCat(pipeline->handle_prefix(), 4));
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  EXPECT_THAT(Read(after.handle, 4), Each(4.0f));
  EXPECT_THAT(Read(first.handle, 4), Each(4.0f));
}

TEST_F(OpPipelineTest, FreeOfAnUnknownHandleIsRefused) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  EXPECT_THAT(pipeline->Free(0, "a-nothing"), StatusIs(absl::StatusCode::kNotFound));
  std::optional<OpPipeline::Failure> failure = pipeline->Sync();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->index, 0u);
  EXPECT_EQ(failure->op, "free");
}

#if GPUKIT_FAULT_INJECTION
TEST_F(OpPipelineTest, DeviceFailureIsReportedBySyncWithItsOp) {
  const std::string x = Floats(std::vector<float>(4, 1.0f));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  GPUKIT_ASSERT_OK(pipeline->RunOp(0, "add", {Handle(x), Handle(x)}, {}).status());
  // A sticky fault poisons the whole device: every op whose completion is observed after it
  // fails with a mention of it, so op 0 is seen through first (else Sync could name it).
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  // Accepted: the fault happens on the device, after the op was queued.
  GPUKIT_ASSERT_OK(pipeline->RunOp(1, "_test_fault", {Handle(x)}, {}).status());
  std::optional<OpPipeline::Failure> failure = pipeline->Sync();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->index, 1u);
  EXPECT_EQ(failure->op, "_test_fault");
  EXPECT_THAT(failure->status, StatusIs(absl::StatusCode::kInternal, HasSubstr("_test_fault")));
  EXPECT_EQ(RunningTasks(), 0);
}
#endif

TEST_F(OpPipelineTest, OneOpenPipelinePerSession) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  EXPECT_THAT(core().OpenPipeline(session_), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(core().OpenPipeline("s-unknown"), StatusIs(absl::StatusCode::kNotFound));
  pipeline.reset();
  EXPECT_THAT(core().OpenPipeline(session_), IsOk());
}

TEST_F(OpPipelineTest, TasksInFlightNeverExceedTheCap) {
  CoreOptions options;
  options.max_ops_in_flight = 3;
  MakeCore(options);
  const std::string x = Floats(std::vector<float>(4096, 1.0f));
  // Sampled as each op reaches the device: its own task is running by then.
  absl::Mutex mu;
  int most_running = 0;
  hooks_->before_run_op = [&](const OpLaunch&) {
    const int running = RunningTasks();
    absl::MutexLock lock(&mu);
    most_running = std::max(most_running, running);
  };
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  std::string last = x;
  uint64_t index = 0;
  for (int i = 0; i < 200; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                pipeline->RunOp(index++, "add", {Handle(last), Handle(x)}, {}));
    EXPECT_LE(pipeline->in_flight(), 3);
    // The previous result goes as soon as its consumer is queued (it pins it).
    if (last != x) {
      GPUKIT_ASSERT_OK(pipeline->Free(index++, last));
    }
    last = out.handle;
  }
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  hooks_->before_run_op = nullptr;
  {
    absl::MutexLock lock(&mu);
    EXPECT_GE(most_running, 1);
    EXPECT_LE(most_running, 3);
  }
  EXPECT_THAT(Read(last, 4096), Each(201.0f));
}

// Every op of a pipeline holds a running task of its partition until its completion is seen,
// so the default partition's slots must hold several sessions' pipelines at their base
// window: none of their ops may wait for a slot (each such wait costs a wake-up per op).
TEST_F(OpPipelineTest, EightPipelinesAtTheirBaseWindowFitTheDefaultPartitionsSlots) {
  const int cap = OpPipeline::BaseWindow(CoreOptions{}.max_ops_in_flight);
  ASSERT_EQ(cap, 32);
  std::vector<std::unique_ptr<OpPipeline>> pipelines;
  std::vector<std::string> sessions;
  std::vector<std::string> inputs;
  for (int s = 0; s < 8; ++s) {
    OpenSessionParams params;
    params.tenant = "pipeline";
    GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant grant, core().OpenSession(params));
    sessions.push_back(grant.session_id);
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView input,
                                core().CreateArray(grant.session_id, {DType::kFloat32, {16}}));
    inputs.push_back(input.handle);  // zeroes
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline,
                                core().OpenPipeline(grant.session_id));
    pipeline->HoldCompletions(true);  // their tasks stay running until released
    pipelines.push_back(std::move(pipeline));
  }
  // An op that waits for a slot would wait for good (nothing completes while held): after a
  // second of real time the clock jumps past its deadline, and it fails DEADLINE_EXCEEDED.
  // An op admitted at once never sees its deadline, and the clock does not move.
  TaskOptions no_wait;
  no_wait.queue_timeout = absl::Seconds(1);
  absl::Notification queued_all;
  std::thread watchdog([&] {
    while (!queued_all.WaitForNotificationWithTimeout(absl::Seconds(1))) {
      clock_.Advance(absl::Seconds(2));
    }
  });
  std::vector<std::string> outputs(8);
  bool refused = false;
  for (int s = 0; s < 8 && !refused; ++s) {
    for (int i = 0; i < cap && !refused; ++i) {
      absl::StatusOr<ArrayView> out = pipelines[s]->RunOp(
          static_cast<uint64_t>(i), "add", {Handle(inputs[s]), Scalar(1.0)}, {}, no_wait);
      EXPECT_THAT(out, IsOk()) << "session " << s << ", op " << i;
      refused = !out.ok();
      if (out.ok()) outputs[s] = out->handle;
    }
  }
  queued_all.Notify();
  watchdog.join();
  ASSERT_FALSE(refused);
  EXPECT_EQ(RunningTasks(), 8 * cap);
  for (int s = 0; s < 8; ++s) {
    pipelines[s]->ReleaseCompletions();
    EXPECT_EQ(pipelines[s]->Sync(), std::nullopt);
    std::string bytes(16 * sizeof(float), '\0');
    GPUKIT_ASSERT_OK(core().ReadArray(sessions[s], outputs[s], 0, absl::MakeSpan(bytes)));
    std::vector<float> values(16);
    std::memcpy(values.data(), bytes.data(), bytes.size());
    EXPECT_THAT(values, Each(1.0f)) << "session " << s;
  }
  EXPECT_EQ(RunningTasks(), 0);
}

// A pipeline alone in its partition takes slots past its base window, up to its cap: its
// held ops stay in flight together, and the op past the cap hands them over and goes on.
TEST_F(OpPipelineTest, APipelineAloneGrowsPastItsBaseWindowUpToItsCap) {
  CoreOptions options;
  options.max_ops_in_flight = 12;  // base window 3
  MakeCore(options);
  const std::string x = Floats(std::vector<float>(16, 1.0f));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  pipeline->HoldCompletions(true);
  std::string last = x;
  EXPECT_EQ(MostInFlightOverAdds(*pipeline, x, 30, last), 12);
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  EXPECT_EQ(RunningTasks(), 0);
  EXPECT_THAT(Read(last, 16), Each(31.0f));
}

// Past its base window a pipeline takes a slot only while its ops in flight hold less than
// CoreOptions::pipeline_growth_bytes of outputs: large ops keep to the base window.
TEST_F(OpPipelineTest, PastItsBaseWindowOnlyWhileItsOpsInFlightHoldLittleMemory) {
  CoreOptions options;
  options.max_ops_in_flight = 12;               // base window 3
  options.pipeline_growth_bytes = 1024 * 1024;  // four outputs of 256 KiB
  MakeCore(options);
  const std::string x = Floats(std::vector<float>(65536, 1.0f));  // 256 KiB
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  pipeline->HoldCompletions(true);
  std::string last = x;
  // 3 outputs (768 KiB) let a fourth op past the base window; 4 (1 MiB) do not.
  EXPECT_EQ(MostInFlightOverAdds(*pipeline, x, 12, last), 4);
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  EXPECT_THAT(Read(last, 65536), Each(13.0f));
}

// Past its base window a pipeline takes a slot only while its partition has fewer than half
// its running slots taken (running or queued): a busy partition's sessions keep to their base
// windows, so their ops cannot fill its slots and queue.
TEST_F(OpPipelineTest, PastItsBaseWindowOnlyWhileItsPartitionHasSlotsToSpare) {
  CoreOptions options;
  options.max_ops_in_flight = 12;  // base window 3
  MakeCore(options);
  PartitionFieldMask mask;
  mask.max_running_tasks = true;
  PartitionSpec values;
  values.max_running_tasks = 8;  // spare while fewer than 4 tasks are running or queued
  GPUKIT_ASSERT_OK(core().scheduler().UpdatePartition(kDefaultPartition, mask, values).status());
  const std::string x = Floats(std::vector<float>(16, 1.0f));
  OpenSessionParams params;
  params.tenant = "pipeline";
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionGrant other, core().OpenSession(params));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView other_x,
                              core().CreateArray(other.session_id, {DType::kFloat32, {16}}));

  // The first pipeline takes its base window and one slot more (3 tasks then: spare).
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> first, core().OpenPipeline(session_));
  first->HoldCompletions(true);
  std::string last = x;
  MostInFlightOverAdds(*first, x, 4, last);
  EXPECT_EQ(first->in_flight(), 4);
  EXPECT_EQ(RunningTasks(), 4);

  // With 4 of 8 slots taken, the second keeps to its base window of 3: each op past it hands
  // its held ops over and waits for one of them.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> second,
                              core().OpenPipeline(other.session_id));
  second->HoldCompletions(true);
  std::string other_last = other_x.handle;
  for (uint64_t i = 0; i < 10; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                second->RunOp(i, "add", {Handle(other_last), Scalar(1.0)}, {}));
    EXPECT_LE(second->in_flight(), 3) << "op " << i;
    other_last = out.handle;
  }
  EXPECT_EQ(second->Sync(), std::nullopt);
  EXPECT_EQ(first->Sync(), std::nullopt);
  EXPECT_EQ(RunningTasks(), 0);
  EXPECT_THAT(Read(last, 16), Each(5.0f));
  std::string bytes(16 * sizeof(float), '\0');
  GPUKIT_ASSERT_OK(core().ReadArray(other.session_id, other_last, 0, absl::MakeSpan(bytes)));
  std::vector<float> values16(16);
  std::memcpy(values16.data(), bytes.data(), bytes.size());
  EXPECT_THAT(values16, Each(10.0f));
}

// Held ops are handed over together, on release: one wait for all of them (by the completion
// thread or by the Sync that finds them not taken).
TEST_F(OpPipelineTest, HeldOpsAreWaitedForTogetherOnceReleased) {
  const std::string x = Floats(std::vector<float>(16, 1.0f));
  absl::Mutex mu;
  std::vector<size_t> waits;  // pairs per WaitEventPairs
  hooks_->after_wait_event_pairs = [&](absl::Span<const EventPair> pairs,
                                       const std::vector<EventPairOutcome>&) {
    absl::MutexLock lock(&mu);
    waits.push_back(pairs.size());
  };
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  pipeline->HoldCompletions(true);
  std::string last = x;
  for (uint64_t i = 0; i < 5; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                pipeline->RunOp(i, "add", {Handle(last), Handle(x)}, {}));
    last = out.handle;
  }
  pipeline->ReleaseCompletions();
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  EXPECT_EQ(pipeline->in_flight(), 0);
  {
    absl::MutexLock lock(&mu);
    EXPECT_THAT(waits, ::testing::ElementsAre(5u));
  }
  hooks_->after_wait_event_pairs = nullptr;
  EXPECT_THAT(Read(last, 16), Each(6.0f));
}

// Sync completes the ops the completion thread has not taken on its own thread, in one
// wait: a synchronous client's op is waited for by the thread that answers it, with no
// hand-off to the completion thread and back on its path.
TEST_F(OpPipelineTest, SyncWaitsForTheOpsItFindsOnItsOwnThread) {
  const std::string x = Floats(std::vector<float>(16, 1.0f));
  LogWaits();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  pipeline->HoldCompletions(true);  // as the submit socket does: the ops wait for their batch
  std::string last = x;
  for (uint64_t i = 0; i < 3; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                pipeline->RunOp(i, "add", {Handle(last), Handle(x)}, {}));
    last = out.handle;
  }
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  EXPECT_EQ(pipeline->in_flight(), 0);
  EXPECT_EQ(RunningTasks(), 0);
  EXPECT_THAT(Waits(),
              ::testing::ElementsAre(std::make_pair(size_t{3}, std::this_thread::get_id())));
  hooks_->after_wait_event_pairs = nullptr;
  EXPECT_THAT(Read(last, 16), Each(4.0f));
}

// While the completion thread still holds an earlier batch (its wait answered, its batch not
// yet counted), Sync completes the later ops itself and then waits for that batch: it
// returns only once every op queued before it has completed.
TEST_F(OpPipelineTest, SyncCompletesLaterOpsWhileTheCompletionThreadHoldsEarlierOnes) {
  const std::string x = Floats(std::vector<float>(16, 1.0f));
  absl::Notification first_waited;
  absl::Notification release;
  LogWaits([&] {
    if (!first_waited.HasBeenNotified()) {  // the completion thread's wait for op 0
      first_waited.Notify();
      release.WaitForNotification();
    }
  });
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView first,
                              pipeline->RunOp(0, "add", {Handle(x), Handle(x)}, {}));
  ASSERT_TRUE(first_waited.WaitForNotificationWithTimeout(absl::Seconds(10)));
  std::string last = first.handle;
  for (uint64_t i = 1; i < 3; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                pipeline->RunOp(i, "add", {Handle(last), Handle(x)}, {}));
    last = out.handle;
  }
  std::atomic<bool> synced{false};
  std::optional<OpPipeline::Failure> failure;
  std::thread::id syncer;
  std::thread sync([&] {
    syncer = std::this_thread::get_id();
    failure = pipeline->Sync();
    synced.store(true);
  });
  // Sync's own wait (ops 1 and 2) comes while op 0's batch is still held.
  for (int i = 0; i < 1000 && Waits().size() < 2; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE(synced.load());  // op 0 is not counted until the completion thread goes on
  release.Notify();
  sync.join();
  EXPECT_TRUE(synced.load());
  EXPECT_EQ(failure, std::nullopt);
  EXPECT_EQ(pipeline->in_flight(), 0);
  EXPECT_EQ(RunningTasks(), 0);
  const std::vector<Wait> waits = Waits();
  ASSERT_EQ(waits.size(), 2u);
  EXPECT_EQ(waits[0].first, 1u);
  EXPECT_NE(waits[0].second, syncer);
  EXPECT_EQ(waits[1], std::make_pair(size_t{2}, syncer));
  hooks_->after_wait_event_pairs = nullptr;
  EXPECT_THAT(Read(last, 16), Each(4.0f));
}

// A Submit request that ends with a sync point waits for its ops before its DeviceBatch
// ends, so that on a device executor the wait goes with the work held (one message).
TEST_F(OpPipelineTest, ASubmitRequestsSyncWaitsBeforeItsBatchEnds) {
  const std::string x = Floats(std::vector<float>(16, 1.0f));
  absl::Mutex mu;
  std::vector<std::string> calls;  // "wait" and "end batch", in order
  hooks_->after_wait_event_pairs = [&](absl::Span<const EventPair>,
                                       const std::vector<EventPairOutcome>&) {
    absl::MutexLock lock(&mu);
    calls.push_back("wait");
  };
  hooks_->on_end_batch = [&] {
    absl::MutexLock lock(&mu);
    calls.push_back("end batch");
  };
  service::SubmitSession session(core(), [](absl::string_view) { return absl::OkStatus(); });
  v1::SubmitRequest request;
  request.set_session_id(session_);
  v1::PipelinedRunOp& run = *request.add_ops()->mutable_run();
  run.set_op("add");
  run.add_inputs()->set_handle(x);
  run.add_inputs()->set_handle(x);
  request.set_sync(1);
  v1::SubmitResponse response;
  GPUKIT_ASSERT_OK_AND_ASSIGN(bool answered,
                              session.Answer(request, response, [](v1::SubmitResponse) {}));
  EXPECT_TRUE(answered);
  EXPECT_EQ(response.synced(), 1u);
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).code(), 0);
  {
    absl::MutexLock lock(&mu);
    EXPECT_THAT(calls, ::testing::ElementsAre("wait", "end batch"));
  }
  session.Close();
  hooks_->after_wait_event_pairs = nullptr;
  hooks_->on_end_batch = nullptr;
  EXPECT_THAT(Read(response.results(0).output().handle(), 16), Each(2.0f));
}

// Holding never blocks a pipeline at its in-flight cap (the oldest are handed over there),
// and Sync and Close hand over what is held.
TEST_F(OpPipelineTest, HoldingNeitherBlocksAtTheCapNorKeepsOpsFromSyncAndClose) {
  CoreOptions options;
  options.max_ops_in_flight = 2;
  MakeCore(options);
  const std::string x = Floats(std::vector<float>(16, 1.0f));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  pipeline->HoldCompletions(true);
  std::string last = x;
  uint64_t index = 0;
  for (int i = 0; i < 10; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                pipeline->RunOp(index++, "add", {Handle(last), Handle(x)}, {}));
    EXPECT_LE(pipeline->in_flight(), 2);
    last = out.handle;
  }
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  EXPECT_EQ(pipeline->in_flight(), 0);
  EXPECT_THAT(Read(last, 16), Each(11.0f));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                              pipeline->RunOp(index++, "add", {Handle(last), Handle(x)}, {}));
  pipeline->Close();  // waits for the held op to run
  EXPECT_EQ(RunningTasks(), 0);
  EXPECT_THAT(Read(out.handle, 16), Each(12.0f));
}

TEST_F(OpPipelineTest, SessionClosedWithOpsInFlightLeavesNothingBehind) {
  const std::string x = Floats(std::vector<float>(4096, 1.0f));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  std::string last = x;
  for (uint64_t i = 0; i < 50; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                pipeline->RunOp(i, "add", {Handle(last), Handle(x)}, {}));
    last = out.handle;
  }
  GPUKIT_ASSERT_OK(core().CloseSession(session_).status());
  // Later ops are refused; what was queued drains.
  EXPECT_THAT(pipeline->RunOp(50, "add", {Handle(last), Handle(x)}, {}),
              StatusIs(absl::StatusCode::kNotFound));
  std::optional<OpPipeline::Failure> failure = pipeline->Sync();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->index, 50u);
  pipeline.reset();
  EXPECT_EQ(RunningTasks(), 0);
  EXPECT_EQ(core().array_count(), 0);
  EXPECT_EQ(core().ListDevices()[0].memory_used_bytes, 0);
  EXPECT_EQ(core().scheduler().device_memory_used(0), 0);
}

TEST_F(OpPipelineTest, PipelineDroppedWithOpsInFlightDrainsThem) {
  const std::string x = Floats(std::vector<float>(4096, 1.0f));
  std::string last = x;
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline,
                                core().OpenPipeline(session_));
    for (uint64_t i = 0; i < 50; ++i) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                  pipeline->RunOp(i, "add", {Handle(last), Handle(x)}, {}));
      last = out.handle;
    }
  }  // no Sync: the destructor waits for them
  EXPECT_EQ(RunningTasks(), 0);
  EXPECT_THAT(Read(last, 4096), Each(51.0f));
  EXPECT_EQ(core().array_count(), 51);
}

// Every op completes through WaitEventPairs (one call per batch, one pair per op, in order),
// and the error its pair carries is that op's alone: Sync names it, the ops around it ran.
// The ops are held until Sync, which waits for them in one call: the hook counts pairs in the
// order it sees them, which is the ops' order only within one call (the completion thread
// and a Sync may wait for two batches at once).
TEST_F(OpPipelineTest, EachOpTakesTheOutcomeOfItsOwnEventPair) {
  constexpr uint64_t kOps = 12;
  constexpr uint64_t kFailing = 5;
  absl::Mutex mu;
  uint64_t pairs_seen = 0;
  int calls = 0;
  hooks_->after_wait_event_pairs = [&](absl::Span<const EventPair> pairs,
                                       std::vector<EventPairOutcome>& outcomes) {
    absl::MutexLock lock(&mu);
    ++calls;
    EXPECT_EQ(outcomes.size(), pairs.size());
    for (size_t i = 0; i < outcomes.size(); ++i, ++pairs_seen) {
      EXPECT_THAT(outcomes[i].status, IsOk());
      if (pairs_seen == kFailing) {
        outcomes[i] = {absl::DataLossError("injected into op 5's pair"), 0};
      }
    }
  };
  const std::string x = Floats(std::vector<float>(4, 1.0f));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  pipeline->HoldCompletions(true);
  std::vector<std::string> outputs;
  for (uint64_t i = 0; i < kOps; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                pipeline->RunOp(i, "add", {Handle(x), Handle(x)}, {}));
    outputs.push_back(out.handle);
  }
  std::optional<OpPipeline::Failure> failure = pipeline->Sync();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->index, kFailing);
  EXPECT_EQ(failure->op, "add");
  EXPECT_THAT(failure->status, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("op 5's pair")));
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(pairs_seen, kOps);  // every op once, none waited for apart
    EXPECT_GE(calls, 1);
  }
  EXPECT_EQ(RunningTasks(), 0);
  // The ops before and after the failing one ran (the injection changed only its outcome).
  EXPECT_THAT(Read(outputs[kFailing - 1], 4), Each(2.0f));
  EXPECT_THAT(Read(outputs[kFailing + 1], 4), Each(2.0f));
  hooks_->after_wait_event_pairs = nullptr;
}

TEST_F(OpPipelineTest, DeviceTimeIsAccountedToTheSessionAndTenant) {
  const std::string x = Floats(std::vector<float>(1 << 16, 1.0f));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<OpPipeline> pipeline, core().OpenPipeline(session_));
  std::string last = x;
  for (uint64_t i = 0; i < 20; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(ArrayView out,
                                pipeline->RunOp(i, "add", {Handle(last), Handle(x)}, {}));
    last = out.handle;
  }
  EXPECT_EQ(pipeline->Sync(), std::nullopt);
  const std::vector<SessionSummary> sessions = core().ListSessions();
  ASSERT_EQ(sessions.size(), 1u);
  // The zeroing and the upload (Floats), and the 20 ops.
  EXPECT_EQ(sessions[0].tasks_finished, 22);
  EXPECT_GT(sessions[0].device_time, absl::ZeroDuration());
  bool found = false;
  for (const TenantUsage& tenant : core().ListTenants()) {
    if (tenant.tenant != "pipeline") continue;
    found = true;
    EXPECT_GT(tenant.device_time_total, absl::ZeroDuration());
    EXPECT_EQ(tenant.tasks_finished, 22);
  }
  EXPECT_TRUE(found);
}

// A completion batch of works from two devices of one scheduler (FinishAll's callers pass
// one pipeline's, of one device): every task ends, and each work's events are destroyed on
// its own device.
TEST(EnqueuedTaskTest, FinishAllEndsWorksOfEachDeviceOnTheirOwnDevice) {
  FakeClock clock;
  PartitionSpec all{.name = "default", .memory_quota_bytes = kDeviceBytes, .compute_share = 1};
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Scheduler> scheduler,
                              Scheduler::Create(clock, {{0, kDeviceBytes}}, {all}, {}));
  SessionManager sessions(clock, SessionOptions{}, *scheduler);
  OpenSessionParams params;
  params.tenant = "finish";
  GPUKIT_ASSERT_OK_AND_ASSIGN(SessionAdmission admission,
                              scheduler->AdmitSession("s-finish", params.partition, {}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Session> session,
                              sessions.Open("s-finish", params, std::move(admission)));
  CpuDeviceOptions device_options;
  device_options.memory_bytes = kDeviceBytes;
  std::vector<std::unique_ptr<CpuDevice>> devices;
  std::vector<StreamId> streams;
  for (int i = 0; i < 2; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CpuDevice> device,
                                CpuDevice::Create(device_options));
    GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device->CreateStream(StreamPriority::kNormal));
    devices.push_back(std::move(device));
    streams.push_back(stream);
  }
  std::vector<EnqueuedTask> works;
  for (int device : {0, 1, 0}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        RunningTask task, RunningTask::Create(*scheduler, *session, TaskKind::kOp, "finish", {}));
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        EnqueuedTask work,
        task.Enqueue(*devices[static_cast<size_t>(device)], streams[static_cast<size_t>(device)],
                     [] { return absl::OkStatus(); }));
    GPUKIT_ASSERT_OK(work.device().WaitEvent(work.end_event()));
    works.push_back(std::move(work));
  }
  std::vector<EnqueuedTask*> batch;
  for (EnqueuedTask& work : works) batch.push_back(&work);
  const std::vector<absl::Status> statuses(3, absl::OkStatus());
  const std::vector<absl::Duration> times(3, absl::Microseconds(5));
  EnqueuedTask::FinishAll(batch, statuses, times);
  for (const EnqueuedTask& work : works) {
    EXPECT_TRUE(work.finished());
    EXPECT_THAT(work.device().WaitEvent(work.start_event()), StatusIs(absl::StatusCode::kNotFound));
    EXPECT_THAT(work.device().WaitEvent(work.end_event()), StatusIs(absl::StatusCode::kNotFound));
  }
  int running = 0;
  for (const PartitionStatus& p : scheduler->ListPartitions()) running += p.running;
  EXPECT_EQ(running, 0);
  for (int i = 0; i < 2; ++i) GPUKIT_EXPECT_OK(devices[i]->DestroyStream(streams[i]));
}

}  // namespace
}  // namespace gpukit
