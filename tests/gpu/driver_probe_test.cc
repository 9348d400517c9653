// GPU host tests of the driver probe and backend choice: libcuda is found through the system
// loader, cuInit succeeds, the devices are counted, and auto serves on the CUDA devices.
// Skipped (visibly) where no NVIDIA driver exists.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device_factory.h"

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

TEST_F(DriverProbeTest, AutoPicksCudaWhenAUsableDeviceExists) {
  // Where the driver shows devices that CudaDevice accepts (SM 80 and newer), auto serves on
  // exactly those; --backend=cuda gives every device the driver shows.
  int usable = 0;
  for (int index = 0; index < probe_.device_count; ++index) {
    CudaDeviceOptions options;
    options.index = index;
    if (CudaDevice::Create(options).ok()) ++usable;
  }
  if (usable == 0) GTEST_SKIP() << "no GPU here that gpukitd accepts (SM >= 80)";

  DeviceFactoryOptions options;
  options.backend = BackendChoice::kAuto;
  auto devices = CreateDevices(options);
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_EQ(devices->size(), static_cast<size_t>(usable));
  for (const auto& device : *devices) {
    EXPECT_EQ(device->properties().backend, BackendKind::kCuda);
    EXPECT_FALSE(device->properties().name.empty());
  }
  devices->clear();

  options.backend = BackendChoice::kCuda;
  auto cuda = CreateDevices(options);
  if (usable == probe_.device_count) {
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    EXPECT_EQ(cuda->size(), static_cast<size_t>(probe_.device_count));
    for (int index = 0; index < probe_.device_count; ++index) {
      EXPECT_EQ((*cuda)[index]->properties().index, index);
      EXPECT_EQ((*cuda)[index]->properties().backend, BackendKind::kCuda);
    }
  } else {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(cuda.status().message()), ::testing::HasSubstr("--backend=cuda"));
  }
}

}  // namespace
}  // namespace gpukit
