// The partition a libgpukit session asks for: the program's choice, else $GPUKIT_PARTITION
// (set by gpukit-device-plugin in a Kubernetes container), else the daemon's default.
#include "client/cpp/channel.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_env.h"

namespace gpukit {
namespace {

using testing::ScopedEnv;

TEST(SessionPartitionTest, NamedPartitionWinsOverTheEnvironment) {
  ScopedEnv env("GPUKIT_PARTITION", "team-a");
  EXPECT_EQ(SessionPartition("batch"), "batch");
}

TEST(SessionPartitionTest, UnnamedPartitionComesFromTheEnvironment) {
  ScopedEnv env("GPUKIT_PARTITION", "team-a");
  EXPECT_EQ(SessionPartition(""), "team-a");
}

TEST(SessionPartitionTest, NeitherLeavesItToTheDaemon) {
  ScopedEnv unset("GPUKIT_PARTITION", std::nullopt);
  EXPECT_EQ(SessionPartition(""), "");
  ScopedEnv empty("GPUKIT_PARTITION", "");
  EXPECT_EQ(SessionPartition(""), "");
}

}  // namespace
}  // namespace gpukit
