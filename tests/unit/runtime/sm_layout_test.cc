// SmLayout: placements of fractions over a device's SM groups, and the CPU device's twin of
// a GPU's stream SM options (validated, and counted over its nominal H100 layout).
#include "runtime/sm_layout.h"

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/device.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr SmLayout kH100{.sm_count = 132, .group_sms = 8};  // 16 groups, 4 SMs in none

struct PlaceCase {
  std::string name;
  double first;
  double share;
  SmGroupRange groups;
  int sms;
};

class PlaceSmGroupsTest : public ::testing::TestWithParam<PlaceCase> {};

TEST_P(PlaceSmGroupsTest, RoundsEachBoundaryToTheNearestGroup) {
  const PlaceCase& c = GetParam();
  GPUKIT_ASSERT_OK_AND_ASSIGN(SmGroupRange groups, PlaceSmGroups(kH100, c.first, c.share));
  EXPECT_EQ(groups, c.groups) << groups.first << "+" << groups.count;
  EXPECT_EQ(PlacedSmCount(kH100, groups), c.sms);
}

INSTANTIATE_TEST_SUITE_P(
    H100, PlaceSmGroupsTest,
    ::testing::Values(
        // 0.8 x 16 = 12.8 groups: the boundary rounds to 13.
        PlaceCase{"EightTenthsFromTheStart", 0, 0.8, {0, 13}, 104},
        PlaceCase{"TwoTenthsAtTheEnd", 0.8, 0.2, {13, 3}, 24},
        PlaceCase{"HalfFromTheMiddle", 0.5, 0.5, {8, 8}, 64},
        // Every group: every SM, the 4 that no group holds included.
        PlaceCase{"EveryGroupIsTheWholeDevice", 0, 1, {0, 16}, 132},
        // Less than half a group still gets one: the one its start rounds to.
        PlaceCase{"SliverGetsOneGroup", 0.25, 0.01, {4, 1}, 8},
        PlaceCase{"SliverAtTheEndGetsTheLastGroup", 0.99, 0.01, {15, 1}, 8},
        // A half rounds up, the same way for both neighbours (8.5 -> 9).
        PlaceCase{"HalfGroupBoundaryRoundsUp", 0, 8.5 / 16, {0, 9}, 72},
        PlaceCase{"NeighbourOfAHalfStartsAfterIt", 8.5 / 16, 1 - 8.5 / 16, {9, 7}, 56}),
    [](const ::testing::TestParamInfo<PlaceCase>& info) { return info.param.name; });

TEST(PlaceSmGroupsErrorTest, RefusesPlacementsOutsideTheDevice) {
  EXPECT_THAT(PlaceSmGroups(kH100, 0, 0), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("sm_share = 0 must be in (0, 1]")));
  EXPECT_THAT(PlaceSmGroups(kH100, 0, 1.5),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sm_share = 1.5")));
  EXPECT_THAT(
      PlaceSmGroups(kH100, -0.1, 0.5),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sm_first = -0.1 must be in [0, 1)")));
  EXPECT_THAT(PlaceSmGroups(kH100, 1, 0.1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sm_first = 1")));
  EXPECT_THAT(PlaceSmGroups(kH100, 0.6, 0.5),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sm_first + sm_share = 0.6 + 0.5 must be at most 1")));
  EXPECT_THAT(PlaceSmGroups(SmLayout{.sm_count = 4, .group_sms = 8}, 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no group")));
}

TEST(PlaceSmGroupsErrorTest, AcceptsAnEndAboveOneByRoundingOnly) {
  // 0.7 + 0.3 is 1.0000000000000002 in doubles, as a policy's fractions may add up.
  GPUKIT_ASSERT_OK_AND_ASSIGN(SmGroupRange groups, PlaceSmGroups(kH100, 0.1 + 0.6, 0.3));
  EXPECT_EQ(groups.first + groups.count, 16);
}

// Random cuts of [0, 1) into consecutive placements, on layouts of 1 to 40 groups: whatever
// the fractions, each gets at least one group inside the device; where every placement is at
// least a group wide, neighbours never share a group and together they cover every group.
TEST(PlaceSmGroupsPropertyTest, ConsecutivePlacementsGetDisjointGroups) {
  const uint32_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  for (int round = 0; round < 2000; ++round) {
    const int groups = std::uniform_int_distribution<int>(1, 40)(rng);
    const SmLayout layout{.sm_count = groups * 4 + 3, .group_sms = 4};
    const int parts = std::uniform_int_distribution<int>(1, 6)(rng);
    std::vector<double> cuts = {0, 1};
    for (int i = 1; i < parts; ++i) {
      cuts.push_back(std::uniform_real_distribution<double>(0, 1)(rng));
    }
    std::sort(cuts.begin(), cuts.end());
    std::vector<SmGroupRange> placed;
    bool wide = true;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const double share = cuts[i + 1] - cuts[i];
      if (share <= 0) continue;
      wide = wide && share * groups >= 1 + 1e-6;
      GPUKIT_ASSERT_OK_AND_ASSIGN(SmGroupRange range, PlaceSmGroups(layout, cuts[i], share));
      ASSERT_GE(range.count, 1);
      ASSERT_GE(range.first, 0);
      ASSERT_LE(range.first + range.count, groups);
      placed.push_back(range);
    }
    if (!wide) continue;  // a sliver may share its neighbour's group; that is its rule
    int next = 0;
    for (const SmGroupRange& range : placed) {
      ASSERT_EQ(range.first, next) << "round " << round << ": groups " << groups;
      next = range.first + range.count;
    }
    EXPECT_EQ(next, groups) << "round " << round;
  }
}

TEST(SharedSmCountTest, RoundsDownToWholeGroupsAsOneGreenContextPerCount) {
  EXPECT_EQ(SharedSmCount(kH100, 1), 132);
  EXPECT_EQ(SharedSmCount(kH100, 0.5), 64);    // 66 -> 64
  EXPECT_EQ(SharedSmCount(kH100, 0.99), 128);  // a share below 1 is a green context
  EXPECT_EQ(SharedSmCount(kH100, 0.01), 8);    // at least a group
}

TEST(GroupSmsForTest, TakesTheMinimumRoundedUpToTheAlignment) {
  EXPECT_EQ(GroupSmsFor(8, 8), 8);
  EXPECT_EQ(GroupSmsFor(2, 2), 2);
  EXPECT_EQ(GroupSmsFor(6, 4), 8);
  EXPECT_EQ(GroupSmsFor(0, 0), 1);
}

// The CPU device: the options a GPU would take, checked the same way, and the SMs each
// stream would get on the nominal H100.
class CpuStreamSmTest : public ::testing::Test {
 protected:
  std::unique_ptr<CpuDevice> device_ = *CpuDevice::Create({});
};

TEST_F(CpuStreamSmTest, PlacedStreamsReportTheirGroupsSms) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      StreamId big, device_->CreateStream(StreamOptions{.sm_share = 0.8, .sm_first = 0.0}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      StreamId small, device_->CreateStream(StreamOptions{.sm_share = 0.2, .sm_first = 0.8}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId plain, device_->CreateStream(StreamOptions{}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId shared,
                              device_->CreateStream(StreamOptions{.sm_share = 0.5}));
  EXPECT_THAT(device_->StreamSmCount(big), IsOkAndHolds(104));
  EXPECT_THAT(device_->StreamSmCount(small), IsOkAndHolds(24));
  EXPECT_THAT(device_->StreamSmCount(plain), IsOkAndHolds(132));
  EXPECT_THAT(device_->StreamSmCount(shared), IsOkAndHolds(64));
  for (StreamId s : {big, small, plain, shared}) ASSERT_TRUE(device_->DestroyStream(s).ok());
  EXPECT_THAT(device_->StreamSmCount(big), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CpuStreamSmTest, UsesTheConfiguredNominalLayout) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<CpuDevice> a100,
      CpuDevice::Create({.nominal_sms = SmLayout{.sm_count = 108, .group_sms = 2}}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId s,
                              a100->CreateStream(StreamOptions{.sm_share = 0.25, .sm_first = 0.5}));
  EXPECT_THAT(a100->StreamSmCount(s), IsOkAndHolds(28));  // 54 groups: 27..40
  EXPECT_THAT(CpuDevice::Create({.nominal_sms = SmLayout{.sm_count = 4, .group_sms = 8}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nominal_sms")));
}

struct BadOptionsCase {
  std::string name;
  StreamOptions options;
  std::string error;
};

class CpuStreamSmBadOptionsTest : public ::testing::TestWithParam<BadOptionsCase> {};

TEST_P(CpuStreamSmBadOptionsTest, RefusesWithTheFieldAndValue) {
  std::unique_ptr<CpuDevice> device = *CpuDevice::Create({});
  EXPECT_THAT(device->CreateStream(GetParam().options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().error)));
  EXPECT_THAT(ValidateStreamOptions(GetParam().options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().error)));
}

INSTANTIATE_TEST_SUITE_P(
    Options, CpuStreamSmBadOptionsTest,
    ::testing::Values(
        BadOptionsCase{"ZeroShare", {.sm_share = 0}, "sm_share = 0 must be in (0, 1]"},
        BadOptionsCase{"ShareAboveOne", {.sm_share = 1.25}, "sm_share = 1.25"},
        BadOptionsCase{"NegativeFirst", {.sm_share = 0.5, .sm_first = -0.5}, "sm_first = -0.5"},
        BadOptionsCase{"FirstAtTheEnd", {.sm_share = 0.5, .sm_first = 1.0}, "sm_first = 1"},
        BadOptionsCase{"PastTheEnd",
                       {.sm_share = 0.5, .sm_first = 0.75},
                       "sm_first + sm_share = 0.75 + 0.5 must be at most 1"}),
    [](const ::testing::TestParamInfo<BadOptionsCase>& info) { return info.param.name; });

}  // namespace
}  // namespace gpukit
