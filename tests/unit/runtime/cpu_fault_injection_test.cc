// The test build's fault-injection ops on the CPU device (runtime/cpu/cpu_op_kernels.h):
// _test_fault poisons the device as a sticky CUDA fault poisons a context; _test_abort and
// _test_hang run on the stream's thread, so RunOp returns as a GPU's launch does (each is
// checked in a death-test child: the process that runs them dies or never finishes).
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/cpu_op_kernels.h"
#include "runtime/device.h"
#include "runtime/op_registry.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(StickyFaultTest, IsInternalAndRecognisedThroughAPrefix) {
  const absl::Status fault = StickyFault("it broke");
  EXPECT_THAT(fault, StatusIs(absl::StatusCode::kInternal, "it broke"));
  EXPECT_TRUE(IsStickyFault(fault));
  EXPECT_TRUE(IsStickyFault(PrefixStatus(fault, "while running op: ")));
  EXPECT_FALSE(IsStickyFault(absl::InternalError("it broke")));
  EXPECT_FALSE(IsStickyFault(absl::OkStatus()));
}

TEST(StickyFaultTest, NoReleaseOpRunsOffTheEnqueuingThread) {
  for (const OpDef& op : OpRegistry::Builtin().ops()) {
    if (!IsTestOnlyOp(op.name)) {
      EXPECT_FALSE(op.cpu_on_stream_thread) << op.name;
    }
  }
}

#if GPUKIT_FAULT_INJECTION

// A device with one stream and a float32 [4] array holding 1, 2, 3, 4.
class CpuFaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CpuDeviceOptions options;
    options.memory_bytes = int64_t{16} << 20;
    GPUKIT_ASSERT_OK_AND_ASSIGN(device_, CpuDevice::Create(options));
    GPUKIT_ASSERT_OK_AND_ASSIGN(stream_, device_->CreateStream(StreamPriority::kNormal));
    GPUKIT_ASSERT_OK_AND_ASSIGN(input_, device_->Allocate(16));
    GPUKIT_ASSERT_OK_AND_ASSIGN(output_, device_->Allocate(16));
    const std::vector<float> values = {1, 2, 3, 4};
    GPUKIT_ASSERT_OK(device_->CopyHostToDevice(input_, 0, values.data(), 16, stream_));
    GPUKIT_ASSERT_OK(SynchronizeStream(*device_, stream_));
  }

  // RunOp of `op` (a built-in) over the input array into the output buffer.
  absl::Status Run(absl::string_view op) {
    const OpRegistry& registry = OpRegistry::Builtin();
    OpLaunch launch;
    GPUKIT_ASSIGN_OR_RETURN(launch.op, registry.Find(op));
    OperandDesc desc;
    desc.tensor = {DType::kFloat32, {4}};
    GPUKIT_ASSIGN_OR_RETURN(launch.plan, registry.Plan(*launch.op, {desc}, {}));
    OpOperand operand;
    operand.buffer = input_;
    operand.desc = desc.tensor;
    launch.inputs = {operand};
    launch.output = output_;
    return device_->RunOp(launch, stream_);
  }

  std::unique_ptr<CpuDevice> device_;
  StreamId stream_;
  BufferId input_, output_;
};

const auto kIsTheFault =
    StatusIs(absl::StatusCode::kInternal, HasSubstr("simulated device fault (_test_fault)"));

TEST_F(CpuFaultInjectionTest, TheFaultOpsWorkFailsWithTheSimulatedFault) {
  GPUKIT_ASSERT_OK(device_->CheckHealth());
  // Enqueueing succeeds, as a kernel launch does; the fault shows where the work's errors do.
  GPUKIT_ASSERT_OK(Run("_test_fault"));
  EXPECT_THAT(SynchronizeStream(*device_, stream_), kIsTheFault);
  EXPECT_THAT(device_->CheckHealth(), kIsTheFault);
}

TEST_F(CpuFaultInjectionTest, TheErrorOpsWorkFailsAloneAndTheDeviceStaysHealthy) {
  GPUKIT_ASSERT_OK(Run("_test_error"));
  EXPECT_THAT(SynchronizeStream(*device_, stream_),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("simulated op failure")));
  GPUKIT_EXPECT_OK(device_->CheckHealth());
  GPUKIT_ASSERT_OK(Run("neg"));  // later work runs and waits as usual
  GPUKIT_EXPECT_OK(SynchronizeStream(*device_, stream_));
  std::vector<float> host(4, 0);
  GPUKIT_ASSERT_OK(device_->CopyDeviceToHost(host.data(), output_, 0, 16, stream_));
  GPUKIT_ASSERT_OK(SynchronizeStream(*device_, stream_));
  EXPECT_THAT(host, ElementsAre(-1, -2, -3, -4));
}

TEST_F(CpuFaultInjectionTest, APoisonedDeviceFailsEveryEnqueueAndWaitWithTheFault) {
  // Events of another stream, recorded and completed before the fault.
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId other, device_->CreateStream(StreamPriority::kHigh));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId start, device_->RecordEvent(other));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId end, device_->RecordEvent(other));
  GPUKIT_ASSERT_OK(device_->WaitEvent(end));

  GPUKIT_ASSERT_OK(Run("_test_fault"));
  EXPECT_THAT(SynchronizeStream(*device_, stream_), kIsTheFault);

  std::vector<float> host(4, -1);
  EXPECT_THAT(device_->CopyHostToDevice(input_, 0, host.data(), 16, other), kIsTheFault);
  EXPECT_THAT(device_->CopyDeviceToHost(host.data(), input_, 0, 16, other), kIsTheFault);
  EXPECT_THAT(device_->CopyDeviceToDevice(output_, 0, input_, 0, 16, other), kIsTheFault);
  EXPECT_THAT(Run("neg"), kIsTheFault);
  // An event is still recorded (it carries the fault to its waiter); later work's failures
  // mention the fault as an earlier one's, and only the faulting work's is the fault itself.
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId later, device_->RecordEvent(other));
  EXPECT_THAT(device_->WaitEvent(later),
              StatusIs(absl::StatusCode::kInternal,
                       AllOf(HasSubstr("poisoned by an earlier fault"),
                             HasSubstr("simulated device fault (_test_fault)"))));
  GPUKIT_EXPECT_OK(device_->DestroyEvent(later));
  EXPECT_THAT(device_->WaitEvent(end), kIsTheFault);
  EXPECT_THAT(device_->QueryEvent(end), kIsTheFault);
  EXPECT_THAT(device_->EventElapsedNs(start, end), kIsTheFault);
  EXPECT_THAT(device_->CheckHealth(), kIsTheFault);
  EXPECT_THAT(host, ElementsAre(-1, -1, -1, -1)) << "a refused copy must not have run";

  // The owner can still tear everything down.
  GPUKIT_EXPECT_OK(device_->DestroyEvent(start));
  GPUKIT_EXPECT_OK(device_->DestroyEvent(end));
  GPUKIT_EXPECT_OK(device_->DestroyStream(other));
  GPUKIT_EXPECT_OK(device_->Free(input_));
  GPUKIT_EXPECT_OK(device_->Free(output_));
  EXPECT_EQ(device_->GetMemoryInfo().used_bytes, 0);
  GPUKIT_EXPECT_OK(device_->DestroyStream(stream_));
}

TEST_F(CpuFaultInjectionTest, TheFirstFaultStaysAndOtherDevicesAreUntouched) {
  CpuDeviceOptions options;
  options.memory_bytes = int64_t{1} << 20;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CpuDevice> bystander, CpuDevice::Create(options));
  GPUKIT_ASSERT_OK(Run("_test_fault"));
  EXPECT_THAT(SynchronizeStream(*device_, stream_), kIsTheFault);
  // Nothing that fails later replaces the fault.
  EXPECT_THAT(Run("_test_fault"), kIsTheFault);
  EXPECT_THAT(device_->CheckHealth(), kIsTheFault);

  // Poisoning is per device, as a CUDA fault is per process: another device works on.
  GPUKIT_EXPECT_OK(bystander->CheckHealth());
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, bystander->CreateStream(StreamPriority::kNormal));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, bystander->Allocate(4));
  const int32_t value = 17;
  int32_t back = 0;
  GPUKIT_ASSERT_OK(bystander->CopyHostToDevice(buffer, 0, &value, 4, stream));
  GPUKIT_ASSERT_OK(bystander->CopyDeviceToHost(&back, buffer, 0, 4, stream));
  GPUKIT_ASSERT_OK(SynchronizeStream(*bystander, stream));
  EXPECT_EQ(back, 17);
  GPUKIT_EXPECT_OK(bystander->Free(buffer));
  GPUKIT_EXPECT_OK(bystander->DestroyStream(stream));
}

using CpuFaultInjectionDeathTest = CpuFaultInjectionTest;

TEST_F(CpuFaultInjectionDeathTest, TheAbortOpKillsTheProcessWithSigabrtAfterRunOpReturns) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // RunOp returns: the abort happens on the stream's thread, not the caller's.
        if (!Run("_test_abort").ok()) _exit(3);
        (void)SynchronizeStream(*device_, stream_);
        _exit(4);  // not reached
      },
      ::testing::KilledBySignal(SIGABRT), "");
}

TEST_F(CpuFaultInjectionDeathTest, TheHangOpLeavesRunOpReturningAndItsEventNeverDone) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // A hang that took the caller's thread would never get here (the test would time out).
        if (!Run("_test_hang").ok()) _exit(3);
        absl::StatusOr<EventId> event = device_->RecordEvent(stream_);
        if (!event.ok()) _exit(4);
        // The stream's thread is in the kernel (or about to be): the event cannot be done.
        absl::StatusOr<bool> done = device_->QueryEvent(*event);
        if (!done.ok() || *done) _exit(5);
        if (!device_->CheckHealth().ok()) _exit(6);  // a hang is not a fault
        _exit(42);  // without destroying the device: its hung stream can never be joined
      },
      ::testing::ExitedWithCode(42), "");
}

#else  // !GPUKIT_FAULT_INJECTION

TEST(CpuFaultInjectionTest, AReleaseBuildHasNoFaultInjectionOps) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CpuDevice> device, CpuDevice::Create({}));
  for (const char* op : {"_test_fault", "_test_hang", "_test_abort"}) {
    EXPECT_FALSE(OpRegistry::Builtin().Find(op).ok()) << op;
    EXPECT_FALSE(device->SupportsOp(op)) << op;
  }
}

#endif  // GPUKIT_FAULT_INJECTION

}  // namespace
}  // namespace gpukit
