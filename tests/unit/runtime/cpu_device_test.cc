// The CPU simulation device (runtime/cpu/cpu_device.h): the Device conformance suite, then
// what is particular to this backend (exact accounting, options, no device code).
#include "runtime/cpu/cpu_device.h"

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_op_kernels.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/status_matchers.h"
#include "tests/unit/runtime/device_conformance.h"

namespace gpukit {
namespace {

using ::gpukit::testing::DeviceConformanceParam;
using ::gpukit::testing::DeviceConformanceParamName;
using ::gpukit::testing::DeviceConformanceTest;
using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::HasSubstr;

constexpr int64_t kDeviceBytes = int64_t{64} << 20;

absl::StatusOr<std::unique_ptr<Device>> MakeCpuDevice() {
  CpuDeviceOptions options;
  options.memory_bytes = kDeviceBytes;  // small: exhaustion is cheap to reach
  absl::StatusOr<std::unique_ptr<CpuDevice>> device = CpuDevice::Create(options);
  if (!device.ok()) return device.status();
  return std::unique_ptr<Device>(*std::move(device));
}

// The CPU device with Device's own FillZero (host copies of a zeroed block) in place of its
// memset: the default every backend without a device memset inherits.
absl::StatusOr<std::unique_ptr<Device>> MakeCpuDeviceWithDefaultFill() {
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<Device> cpu, MakeCpuDevice());
  auto forwarding = std::make_unique<::gpukit::testing::ForwardingDevice>(std::move(cpu));
  ::gpukit::testing::ForwardingDevice* device = forwarding.get();
  forwarding->fill_zero = [device](BufferId buffer, int64_t offset, int64_t bytes,
                                   StreamId stream) {
    return device->Device::FillZero(buffer, offset, bytes, stream);
  };
  return std::unique_ptr<Device>(std::move(forwarding));
}

INSTANTIATE_TEST_SUITE_P(Cpu, DeviceConformanceTest,
                         ::testing::Values(DeviceConformanceParam{"Cpu", &MakeCpuDevice},
                                           DeviceConformanceParam{"CpuDefaultFill",
                                                                  &MakeCpuDeviceWithDefaultFill}),
                         DeviceConformanceParamName);

std::unique_ptr<CpuDevice> MakeDevice(int64_t memory_bytes, int index = 0) {
  CpuDeviceOptions options;
  options.index = index;
  options.memory_bytes = memory_bytes;
  absl::StatusOr<std::unique_ptr<CpuDevice>> device = CpuDevice::Create(options);
  EXPECT_THAT(device, IsOk());
  return device.ok() ? *std::move(device) : nullptr;
}

TEST(CpuDeviceTest, CreateRejectsNonPositiveMemory) {
  for (int64_t bytes : {int64_t{0}, int64_t{-1}}) {
    CpuDeviceOptions options;
    options.memory_bytes = bytes;
    EXPECT_THAT(CpuDevice::Create(options),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be > 0")));
  }
}

TEST(CpuDeviceTest, BuffersCannotBeExportedAndSayWhatToUseInstead) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CpuDevice> device, CpuDevice::Create({}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device->Allocate(64));
  EXPECT_THAT(device->ExportBuffer(buffer, ExportForm::kDescriptor).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("host shared memory")));
  EXPECT_THAT(device->ExportBuffer(BufferId{9999}, ExportForm::kDescriptor).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(CpuDeviceTest, DefaultOptionsOfferFourGiB) {
  EXPECT_EQ(CpuDeviceOptions{}.memory_bytes, int64_t{4} << 30);
}

TEST(CpuDeviceTest, PropertiesComeFromTheOptions) {
  std::unique_ptr<CpuDevice> device = MakeDevice(12345, /*index=*/3);
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->properties().index, 3);
  EXPECT_EQ(device->properties().memory_total_bytes, 12345);
  EXPECT_EQ(device->properties().backend, BackendKind::kCpu);
  EXPECT_EQ(device->properties().name, "CPU simulation device");
  EXPECT_EQ(device->GetMemoryInfo().total_bytes, 12345);
  EXPECT_EQ(device->GetMemoryInfo().used_bytes, 0);
}

TEST(CpuDeviceTest, BackendNamesAreLowerCase) {
  EXPECT_EQ(BackendName(BackendKind::kCpu), "cpu");
  EXPECT_EQ(BackendName(BackendKind::kCuda), "cuda");
}

TEST(CpuDeviceTest, UsedBytesIsTheExactSumOfLiveBuffers) {
  std::unique_ptr<CpuDevice> device = MakeDevice(1 << 20);
  ASSERT_NE(device, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, device->Allocate(1));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, device->Allocate(100));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId c, device->Allocate(0));
  EXPECT_EQ(device->GetMemoryInfo().used_bytes, 101);  // alignment padding is not charged
  GPUKIT_ASSERT_OK(device->Free(b));
  EXPECT_EQ(device->GetMemoryInfo().used_bytes, 1);
  GPUKIT_ASSERT_OK(device->Free(a));
  GPUKIT_ASSERT_OK(device->Free(c));
  EXPECT_EQ(device->GetMemoryInfo().used_bytes, 0);
}

TEST(CpuDeviceTest, AllocationsMayFillTheDeviceExactlyAndNotOneByteMore) {
  std::unique_ptr<CpuDevice> device = MakeDevice(4096);
  ASSERT_NE(device, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId half, device->Allocate(2048));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId rest, device->Allocate(2048));
  EXPECT_THAT(device->Allocate(1),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cannot hold 1 more bytes (4096 of 4096 in use)")));
  GPUKIT_ASSERT_OK(device->Free(half));
  EXPECT_THAT(device->Allocate(2049), StatusIs(absl::StatusCode::kResourceExhausted));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId again, device->Allocate(2048));
  GPUKIT_EXPECT_OK(device->Free(again));
  GPUKIT_EXPECT_OK(device->Free(rest));
  EXPECT_EQ(device->GetMemoryInfo().used_bytes, 0);
}

TEST(CpuDeviceTest, DeviceCodeIsAFailedPreconditionSayingAGpuIsNeeded) {
  std::unique_ptr<CpuDevice> device = MakeDevice(1 << 20);
  ASSERT_NE(device, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device->CreateStream(StreamPriority::kNormal));
  const auto needs_gpu =
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("kernel launch requires a GPU"));
  EXPECT_THAT(device->LoadModule("\x7f"
                                 "ELF fake cubin"),
              needs_gpu);
  EXPECT_THAT(device->UnloadModule(ModuleId{1}), needs_gpu);
  EXPECT_THAT(device->GetFunction(ModuleId{1}, "kernel"), needs_gpu);
  EXPECT_THAT(device->Launch(FunctionId{1}, LaunchConfig{}, {}, stream), needs_gpu);
  GPUKIT_EXPECT_OK(device->DestroyStream(stream));
}

TEST(CpuDeviceTest, SupportsEveryBuiltinOpThroughItsRegisteredKernel) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CpuDevice> device, CpuDevice::Create({}));
  for (const OpDef& op : OpRegistry::Builtin().ops()) {
    EXPECT_NE(op.cpu, nullptr) << op.name;
    EXPECT_TRUE(device->SupportsOp(op.name)) << op.name;
  }
  EXPECT_FALSE(device->SupportsOp("frobnicate"));
  EXPECT_FALSE(device->SupportsOp(""));
}

TEST(CpuDeviceTest, DestroyingTheDeviceReleasesLiveBuffersStreamsAndEvents) {
  // Checked by the leak checker under GPUKIT_SANITIZE: nothing here is freed explicitly.
  std::unique_ptr<CpuDevice> device = MakeDevice(1 << 20);
  ASSERT_NE(device, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device->Allocate(4096));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device->CreateStream(StreamPriority::kHigh));
  std::vector<uint8_t> data(4096, 7);
  GPUKIT_ASSERT_OK(device->CopyHostToDevice(buffer, 0, data.data(), 4096, stream));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId event, device->RecordEvent(stream));
  (void)event;
  device.reset();
}

// This process's VmRSS in bytes, from /proc/self/status; -1 if it cannot be read.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

TEST(CpuDeviceTest, FreedLargeBuffersGoBackToTheSystem) {
  // Through malloc, the second 16 MiB buffer came from the heap (glibc's mmap threshold had
  // risen to 16 MiB at the first free) and stayed resident after Free.
  constexpr int64_t kBytes = int64_t{16} << 20;
  std::unique_ptr<CpuDevice> device = MakeDevice(int64_t{1} << 30);
  ASSERT_NE(device, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device->CreateStream(StreamPriority::kHigh));
  const std::vector<uint8_t> data(kBytes, 7);  // before the first reading: in both
  const int64_t before = ResidentBytes();
  ASSERT_GT(before, 0);
  for (int round = 0; round < 3; ++round) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device->Allocate(kBytes));
    GPUKIT_ASSERT_OK(device->CopyHostToDevice(buffer, 0, data.data(), kBytes, stream));
    GPUKIT_ASSERT_OK(SynchronizeStream(*device, stream));
    EXPECT_GE(ResidentBytes() - before, kBytes / 2) << "the buffer's pages are resident";
    GPUKIT_ASSERT_OK(device->Free(buffer));
    EXPECT_LT(ResidentBytes() - before, kBytes / 4) << "round " << round;
  }
}

}  // namespace
}  // namespace gpukit
