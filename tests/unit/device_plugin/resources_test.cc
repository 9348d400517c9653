// Which partitions become which resources, endpoints and device ids.
#include "daemon/device_plugin/resources.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpukit::device_plugin {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

struct NameCase {
  std::string partition;
  bool advertisable;
};

class ResourceableTest : public ::testing::TestWithParam<NameCase> {};

TEST_P(ResourceableTest, FollowsKubernetesQualifiedNames) {
  const NameCase& c = GetParam();
  absl::Status status = CheckResourceable(c.partition);
  EXPECT_EQ(status.ok(), c.advertisable) << c.partition << ": " << status;
  if (!status.ok()) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("partition \""));
  }
}

INSTANTIATE_TEST_SUITE_P(Names, ResourceableTest,
                         ::testing::Values(NameCase{"default", true}, NameCase{"team-a", true},
                                           NameCase{"a.b_c-9", true}, NameCase{"7", true},
                                           NameCase{std::string(63, 'x'), true},
                                           NameCase{std::string(64, 'x'), false},
                                           NameCase{"", false}, NameCase{"-lead", false},
                                           NameCase{"trail.", false}, NameCase{"_x", false},
                                           NameCase{"x_", false}, NameCase{"sp ace", false},
                                           NameCase{"sl/ash", false}));

TEST(ResourcesTest, NamesEndpointAndIdsDeriveFromThePartition) {
  EXPECT_EQ(ResourceName("team-a"), "gpukit.io/team-a");
  EXPECT_EQ(EndpointName("team-a"), "gpukit-team-a.sock");
  EXPECT_THAT(DeviceIds("team-a", 3), ElementsAre("team-a-0", "team-a-1", "team-a-2"));
  EXPECT_THAT(DeviceIds("team-a", 0), IsEmpty());
}

TEST(ResourcesTest, MaxSessionsSetsTheCountElseTheOption) {
  const std::vector<AdvertisedResource> got = AdvertisedResources(
      {{.name = "default", .max_sessions = 0}, {.name = "batch", .max_sessions = 2}},
      {.devices_per_partition = 3});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (AdvertisedResource{.partition = "default",
                                        .resource_name = "gpukit.io/default",
                                        .endpoint = "gpukit-default.sock",
                                        .device_ids = {"default-0", "default-1", "default-2"}}));
  EXPECT_EQ(got[1].resource_name, "gpukit.io/batch");
  EXPECT_THAT(got[1].device_ids, ElementsAre("batch-0", "batch-1"));
}

TEST(ResourcesTest, UnadvertisablePartitionsAreLeftOutAndListed) {
  const std::vector<PartitionView> partitions = {
      {.name = "-odd"}, {.name = "good"}, {.name = "odd."}};
  const std::vector<AdvertisedResource> got = AdvertisedResources(partitions, {});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].partition, "good");
  EXPECT_EQ(got[0].device_ids.size(), 16u);  // the default devices_per_partition
  EXPECT_THAT(Unadvertisable(partitions), ElementsAre("-odd", "odd."));
}

}  // namespace
}  // namespace gpukit::device_plugin
