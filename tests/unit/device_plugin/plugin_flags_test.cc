// gpukit-device-plugin's command line and the options it resolves to.
#include "daemon/device_plugin/plugin_flags.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scoped_env.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::device_plugin {
namespace {

using ::gpukit::testing::ScopedEnv;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

absl::StatusOr<PluginCommandLine> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "gpukit-device-plugin");
  return ParsePluginCommandLine(static_cast<int>(args.size()), args.data());
}

TEST(PluginFlagsTest, DefaultsAreTheKubeletsDirectoryAndFiveSeconds) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(PluginCommandLine flags, Parse({}));
  EXPECT_EQ(flags.plugin_dir, "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(flags.poll_interval, absl::Seconds(5));
  EXPECT_EQ(flags.devices_per_partition, 16);
  EXPECT_EQ(flags.container_socket_dir, "/run/gpukit");
  EXPECT_TRUE(flags.gpukit_address.empty());
}

TEST(PluginFlagsTest, ValuesAfterASpaceOrAnEqualsSign) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      PluginCommandLine flags,
      Parse({"--gpukit-addr", "unix:///srv/gk/d.sock", "--plugin-dir=/p", "--poll-interval",
             "250ms", "--devices-per-partition=3", "--container-socket-dir", "/c",
             "--host-socket-dir=/h", "--log-level", "debug"}));
  EXPECT_EQ(flags.gpukit_address, "unix:///srv/gk/d.sock");
  EXPECT_EQ(flags.plugin_dir, "/p");
  EXPECT_EQ(flags.poll_interval, absl::Milliseconds(250));
  EXPECT_EQ(flags.devices_per_partition, 3);
  EXPECT_EQ(flags.container_socket_dir, "/c");
  EXPECT_EQ(flags.host_socket_dir, "/h");
  EXPECT_EQ(flags.log_level, "debug");
}

struct BadCase {
  std::vector<const char*> args;
  std::string message;
};

class BadFlagsTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadFlagsTest, AreRefusedNamingTheFlag) {
  EXPECT_THAT(Parse(GetParam().args).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadFlagsTest,
    ::testing::Values(BadCase{{"--nope=1"}, "unknown flag --nope"},
                      BadCase{{"--plugin-dir"}, "--plugin-dir needs a value"},
                      BadCase{{"--plugin-dir=relative"}, "--plugin-dir = \"relative\""},
                      BadCase{{"--poll-interval=0s"}, "--poll-interval"},
                      BadCase{{"--poll-interval=soon"}, "--poll-interval"},
                      BadCase{{"--devices-per-partition=0"}, "--devices-per-partition"},
                      BadCase{{"--devices-per-partition=x"}, "--devices-per-partition"},
                      BadCase{{"--gpukit-addr="}, "--gpukit-addr must not be empty"},
                      BadCase{{"--log-level=loud"}, "--log-level"},
                      BadCase{{"stray"}, "unexpected argument \"stray\""}));

TEST(PluginFlagsTest, HostSocketDirIsTheAddressDirectoryUnlessGiven) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(PluginCommandLine flags,
                              Parse({"--gpukit-addr", "unix:///srv/gk/d.sock"}));
  std::string address;
  GPUKIT_ASSERT_OK_AND_ASSIGN(PluginOptions options, ResolvePluginOptions(flags, &address));
  EXPECT_EQ(address, "unix:///srv/gk/d.sock");
  EXPECT_EQ(options.mount.host_socket_dir, "/srv/gk");
  EXPECT_EQ(options.mount.socket_name, "d.sock");
  EXPECT_EQ(options.mount.container_socket_dir, "/run/gpukit");

  flags.host_socket_dir = "/host/run/gpukit";
  GPUKIT_ASSERT_OK_AND_ASSIGN(options, ResolvePluginOptions(flags, nullptr));
  EXPECT_EQ(options.mount.host_socket_dir, "/host/run/gpukit");
}

TEST(PluginFlagsTest, AddressDefaultsToGpukitAddr) {
  ScopedEnv env("GPUKIT_ADDR", "unix:///env/dir/g.sock");
  GPUKIT_ASSERT_OK_AND_ASSIGN(PluginCommandLine flags, Parse({}));
  std::string address;
  GPUKIT_ASSERT_OK_AND_ASSIGN(PluginOptions options, ResolvePluginOptions(flags, &address));
  EXPECT_EQ(address, "unix:///env/dir/g.sock");
  EXPECT_EQ(options.mount.host_socket_dir, "/env/dir");
}

TEST(PluginFlagsTest, TcpAddressIsRefused) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(PluginCommandLine flags, Parse({"--gpukit-addr=gpu-host:7070"}));
  EXPECT_THAT(ResolvePluginOptions(flags, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a unix socket")));
}

}  // namespace
}  // namespace gpukit::device_plugin
