// Allocate's answer: the socket directory's mount and the two variables, per container.
#include "daemon/device_plugin/allocate.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::device_plugin {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

const SocketMount kMount{.host_socket_dir = "/run/gpukit",
                         .container_socket_dir = "/var/run/gk",
                         .socket_name = "gpukitd.sock"};

TEST(AllocateTest, EachContainerGetsTheMountAddressAndPartition) {
  v1beta1::AllocateRequest request;
  request.add_container_requests()->add_devices_ids("team-0");
  v1beta1::ContainerAllocateRequest* two = request.add_container_requests();
  two->add_devices_ids("team-1");
  two->add_devices_ids("team-2");
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      v1beta1::AllocateResponse response,
      AllocateResponseFor("team", {"team-0", "team-1", "team-2"}, kMount, request));
  ASSERT_EQ(response.container_responses_size(), 2);
  for (const v1beta1::ContainerAllocateResponse& c : response.container_responses()) {
    ASSERT_EQ(c.mounts_size(), 1);
    EXPECT_EQ(c.mounts(0).host_path(), "/run/gpukit");
    EXPECT_EQ(c.mounts(0).container_path(), "/var/run/gk");
    EXPECT_TRUE(c.mounts(0).read_only());
    EXPECT_THAT(c.envs(),
                UnorderedElementsAre(Pair("GPUKIT_ADDR", "unix:///var/run/gk/gpukitd.sock"),
                                     Pair("GPUKIT_PARTITION", "team")));
    EXPECT_THAT(c.devices(), IsEmpty());
  }
}

TEST(AllocateTest, UnknownDeviceIsRefusedNamingIt) {
  v1beta1::AllocateRequest request;
  request.add_container_requests()->add_devices_ids("team-0");
  request.add_container_requests()->add_devices_ids("team-7");
  absl::StatusOr<v1beta1::AllocateResponse> response =
      AllocateResponseFor("team", {"team-0"}, kMount, request);
  EXPECT_THAT(response.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("container_requests[1]: device \"team-7\"")));
}

TEST(AllocateTest, ContainerWithoutDevicesIsRefused) {
  v1beta1::AllocateRequest request;
  request.add_container_requests();
  EXPECT_THAT(AllocateResponseFor("team", {"team-0"}, kMount, request).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names no device")));
}

TEST(AllocateTest, NoContainerRequestsGiveAnEmptyAnswer) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1beta1::AllocateResponse response,
                              AllocateResponseFor("team", {"team-0"}, kMount, {}));
  EXPECT_EQ(response.container_responses_size(), 0);
}

TEST(AllocateTest, ContainerAddressJoinsDirectoryAndSocket) {
  EXPECT_EQ(ContainerAddress(kMount), "unix:///var/run/gk/gpukitd.sock");
}

}  // namespace
}  // namespace gpukit::device_plugin
