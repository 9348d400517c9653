// Backend selection (runtime/device_factory.h).
#include "runtime/device_factory.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

struct ChoiceCase {
  std::string text;
  BackendChoice choice;
};

class ParseBackendChoiceTest : public ::testing::TestWithParam<ChoiceCase> {};

TEST_P(ParseBackendChoiceTest, AcceptsTheThreeNames) {
  EXPECT_THAT(ParseBackendChoice(GetParam().text), IsOkAndHolds(GetParam().choice));
}

INSTANTIATE_TEST_SUITE_P(Table, ParseBackendChoiceTest,
                         ::testing::Values(ChoiceCase{"auto", BackendChoice::kAuto},
                                           ChoiceCase{"cpu", BackendChoice::kCpu},
                                           ChoiceCase{"cuda", BackendChoice::kCuda}),
                         [](const ::testing::TestParamInfo<ChoiceCase>& info) {
                           return info.param.text;
                         });

class BadBackendChoiceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BadBackendChoiceTest, IsInvalidArgumentListingTheChoices) {
  EXPECT_THAT(ParseBackendChoice(GetParam()), StatusIs(absl::StatusCode::kInvalidArgument,
                                                       HasSubstr("expected auto, cpu or cuda")));
}

INSTANTIATE_TEST_SUITE_P(Table, BadBackendChoiceTest,
                         ::testing::Values("", "CPU", "gpu", "cuda ", "rocm", "auto,cpu"));

TEST(CreateDevicesTest, CpuBackendGivesOneCpuDeviceOfTheConfiguredSize) {
  DeviceFactoryOptions options;
  options.backend = BackendChoice::kCpu;
  options.cpu_memory_bytes = int64_t{3} << 20;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<std::unique_ptr<Device>> devices, CreateDevices(options));
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0]->properties().backend, BackendKind::kCpu);
  EXPECT_EQ(devices[0]->properties().index, 0);
  EXPECT_EQ(devices[0]->properties().memory_total_bytes, int64_t{3} << 20);
}

TEST(CreateDevicesTest, DefaultCpuMemoryIsFourGiB) {
  EXPECT_EQ(DeviceFactoryOptions{}.cpu_memory_bytes, int64_t{4} << 30);
  EXPECT_EQ(DeviceFactoryOptions{}.backend, BackendChoice::kAuto);
}

TEST(CreateDevicesTest, CpuBackendRejectsNonPositiveMemory) {
  DeviceFactoryOptions options;
  options.backend = BackendChoice::kCpu;
  options.cpu_memory_bytes = 0;
  EXPECT_THAT(CreateDevices(options), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Where the driver is usable, backend choice picks the CUDA devices; tests/gpu covers that.
bool DriverIsUsable(const DriverProbe& probe) { return probe.driver_loaded && probe.error.empty(); }

TEST(CreateDevicesTest, CudaBackendIsAFailedPreconditionWithoutAUsableDriver) {
  const DriverProbe probe = ProbeCudaDriver();
  if (DriverIsUsable(probe)) GTEST_SKIP() << "a usable CUDA driver is here (see tests/gpu)";
  DeviceFactoryOptions options;
  options.backend = BackendChoice::kCuda;
  EXPECT_THAT(
      CreateDevices(options),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               ::testing::AllOf(
                   HasSubstr("--backend=cuda"),
                   HasSubstr(probe.driver_loaded ? "CUDA driver " : "CUDA driver not detected"))));
}

TEST(CreateDevicesTest, AutoFallsBackToTheCpuDeviceWithoutAUsableDriver) {
  if (DriverIsUsable(ProbeCudaDriver())) {
    GTEST_SKIP() << "a usable CUDA driver is here (see tests/gpu)";
  }
  DeviceFactoryOptions options;
  options.backend = BackendChoice::kAuto;
  options.cpu_memory_bytes = int64_t{1} << 20;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<std::unique_ptr<Device>> devices, CreateDevices(options));
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0]->properties().backend, BackendKind::kCpu);
  EXPECT_EQ(devices[0]->properties().memory_total_bytes, int64_t{1} << 20);
}

TEST(ProbeCudaDriverTest, ExplainsWhyTheDriverIsUnusable) {
  const DriverProbe probe = ProbeCudaDriver();
  if (!probe.driver_loaded) {
    EXPECT_FALSE(probe.error.empty());
    EXPECT_THAT(probe.error, HasSubstr("libcuda.so.1"));
    EXPECT_EQ(probe.device_count, 0);
    EXPECT_TRUE(probe.library_path.empty());
  } else {
    EXPECT_FALSE(probe.library_path.empty());
    EXPECT_EQ(probe.error.empty(), probe.device_count > 0);
  }
}

}  // namespace
}  // namespace gpukit
