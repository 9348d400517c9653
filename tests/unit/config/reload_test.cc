// SIGHUP's reload below gRPC (daemon/config/reload.h): over a Core on the CPU device, what is
// refused changes nothing and calls no target; what is accepted applies the partitions, then
// calls every target with the new configuration.
#include "daemon/config/reload.h"

#include <memory>
#include <string>
#include <vector>

#include "daemon/scheduler/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpukit {
namespace {

using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr absl::string_view kStartConfig =
    R"({"partitions": [{"name": "infer", "memory": "64MiB", "compute": 0.5}]})";

class ConfigReloaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.WriteFile("gpukitd.json", std::string(kStartConfig));
    flags_.config_path = path_;
    GPUKIT_ASSERT_OK_AND_ASSIGN(config_, ResolveConfig(flags_));
    CpuDeviceOptions device;
    device.memory_bytes = 256 * kMiB;
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(*CpuDevice::Create(device));
    GPUKIT_ASSERT_OK_AND_ASSIGN(core_, Core::Create(clock_, std::move(devices), config_.core));
  }

  // A reloader whose one target records each configuration it gets and what "batch" was then.
  std::unique_ptr<ConfigReloader> Reloader(absl::Status target_result = absl::OkStatus()) {
    ReloadTargets targets;
    targets.on_reload.push_back([this, target_result](const DaemonConfig& config) {
      received_.push_back(config);
      batch_when_called_ = core_->scheduler().GetPartition("batch").ok();
      return target_result;
    });
    targets.on_reload.push_back([this](const DaemonConfig&) {
      ++second_target_calls_;
      return absl::OkStatus();
    });
    return std::make_unique<ConfigReloader>(*core_, flags_, config_, std::move(targets));
  }

  ScopedTempDir dir_;
  std::string path_;
  CommandLine flags_;
  DaemonConfig config_;
  FakeClock clock_;
  std::unique_ptr<Core> core_;
  std::vector<DaemonConfig> received_;
  bool batch_when_called_ = false;
  int second_target_calls_ = 0;
};

TEST_F(ConfigReloaderTest, AppliesPartitionsThenCallsEveryTarget) {
  std::unique_ptr<ConfigReloader> reloader = Reloader();
  dir_.WriteFile("gpukitd.json", R"({"logLevel": "debug", "partitions": [
    {"name": "infer", "memory": "32MiB", "compute": 0.5},
    {"name": "batch", "memory": "16MiB", "compute": 0.25}]})");
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string summary, reloader->Reload());
  EXPECT_THAT(summary, HasSubstr("1 created, 2 updated"));  // infer, and the implied default
  GPUKIT_ASSERT_OK_AND_ASSIGN(PartitionSpec infer, core_->scheduler().GetPartition("infer"));
  EXPECT_EQ(infer.memory_quota_bytes, 32 * kMiB);
  ASSERT_EQ(received_.size(), 1u);
  EXPECT_EQ(received_[0].log_level, "debug");
  EXPECT_EQ(received_[0].core.partitions.size(), 2u);
  EXPECT_TRUE(batch_when_called_) << "targets run after the partitions are applied";
  EXPECT_EQ(second_target_calls_, 1);
  EXPECT_EQ(reloader->config().log_level, "debug");
}

TEST_F(ConfigReloaderTest, AFailingTargetIsReportedAndTheOthersStillRun) {
  std::unique_ptr<ConfigReloader> reloader = Reloader(absl::InternalError("policy broke"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string summary, reloader->Reload());
  EXPECT_THAT(summary, HasSubstr("1 step(s) failed"));
  EXPECT_EQ(second_target_calls_, 1);
}

TEST_F(ConfigReloaderTest, ABadFileChangesNothingAndCallsNoTarget) {
  std::unique_ptr<ConfigReloader> reloader = Reloader();
  dir_.WriteFile("gpukitd.json",
                 "{\n  \"partitions\": [\n    {\"name\": \"infer\", \"memory\": "
                 "\"lots\", \"compute\": 0.5}\n  ]\n}\n");
  EXPECT_THAT(reloader->Reload(), StatusIs(absl::StatusCode::kInvalidArgument,
                                           AllOf(HasSubstr(path_ + ":3: "), HasSubstr("memory"))));
  dir_.WriteFile("gpukitd.json", R"({"partitions": [{"name": "infer", "memory": "1GiB",
                                                     "compute": 0.5}]})");
  EXPECT_THAT(reloader->Reload(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not fit")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(PartitionSpec infer, core_->scheduler().GetPartition("infer"));
  EXPECT_EQ(infer.memory_quota_bytes, 64 * kMiB);
  EXPECT_TRUE(received_.empty());
  EXPECT_EQ(second_target_calls_, 0);
}

TEST_F(ConfigReloaderTest, WithoutAConfigFileThereIsNothingToReload) {
  flags_.config_path.reset();
  std::unique_ptr<ConfigReloader> reloader = Reloader();
  EXPECT_THAT(reloader->Reload(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(received_.empty());
}

}  // namespace
}  // namespace gpukit
