// GPU host tests of the driver probe: libcuda is found through the system loader, cuInit
// succeeds and the devices are counted. Skipped (visibly) where no NVIDIA driver exists.
#include "runtime/device_factory.h"
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpukit {
namespace {

class DriverProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    probe_ = ProbeCudaDriver();
    if (!probe_.driver_loaded) GTEST_SKIP() << "no CUDA driver on this machine: " << probe_.error;
  }
  DriverProbe probe_;
};

TEST_F(DriverProbeTest, FindsUsableDriverWithDevices) {
  EXPECT_EQ(probe_.error, "");
  EXPECT_GE(probe_.device_count, 1);
  EXPECT_GE(probe_.driver_version, 12000) << "gpukit needs a CUDA 12 or newer driver";
  EXPECT_THAT(probe_.library_path, ::testing::HasSubstr("libcuda.so.1"));
}

TEST_F(DriverProbeTest, AutoBackendStillServesWhileCudaBackendIsAbsent) {
  // Until the CUDA backend lands, auto reports the driver and serves on the CPU device.
  DeviceFactoryOptions options;
  options.backend = BackendChoice::kAuto;
  auto devices = CreateDevices(options);
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), 1u);
  EXPECT_EQ((*devices)[0]->properties().backend, BackendKind::kCpu);

  options.backend = BackendChoice::kCuda;
  auto cuda = CreateDevices(options);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(cuda.status().message()), ::testing::HasSubstr("found with"));
}

}  // namespace
}  // namespace gpukit
