// SmLayout: placements of fractions over a device's SM groups (equal groups alone, as before
// the split's remainder was used, and with the remainder as a last group of its own size),
// and the CPU device's twin of a GPU's stream SM options (validated, and counted over its
// nominal H100 layout).
#include "runtime/sm_layout.h"

#include <algorithm>
#include <cmath>
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
// The layouts CudaDevice makes of the split's remainder: 16 groups of 8 and a last of 4 on an
// H100; 15 of 8 and a last of 12 on an H200 (its driver gave 15 groups of 8).
constexpr SmLayout kH100WithRest{.sm_count = 132, .group_sms = 8, .rest_sms = 4};
constexpr SmLayout kH200WithRest{.sm_count = 132, .group_sms = 8, .groups = 15, .rest_sms = 12};

struct PlaceCase {
  std::string name;
  double first;
  double share;
  SmGroupRange groups;
  int sms;
  SmLayout layout = kH100;
};

class PlaceSmGroupsTest : public ::testing::TestWithParam<PlaceCase> {};

TEST_P(PlaceSmGroupsTest, RoundsEachBoundaryToTheNearestGroup) {
  const PlaceCase& c = GetParam();
  GPUKIT_ASSERT_OK_AND_ASSIGN(SmGroupRange groups, PlaceSmGroups(c.layout, c.first, c.share));
  EXPECT_EQ(groups, c.groups) << groups.first << "+" << groups.count;
  EXPECT_EQ(PlacedSmCount(c.layout, groups), c.sms);
}

// Without a last group (rest_sms 0): the layout as it always was.
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

// The remainder as a last group: boundaries go to the group boundary whose SMs before it are
// nearest to the fraction of all 132 SMs.
INSTANTIATE_TEST_SUITE_P(
    H200, PlaceSmGroupsTest,
    ::testing::Values(
        // 0.8 x 132 = 105.6 SMs: 104 (group 13) is nearer than 112.
        PlaceCase{"EightTenthsFromTheStart", 0, 0.8, {0, 13}, 104, kH200WithRest},
        // Groups 13, 14 and the last: 8 + 8 + 12.
        PlaceCase{"TwoTenthsAtTheEndTakesTheLastGroup", 0.8, 0.2, {13, 3}, 28, kH200WithRest},
        // 66 SMs: 64 is nearer than 72.
        PlaceCase{"HalfFromTheStart", 0, 0.5, {0, 8}, 64, kH200WithRest},
        PlaceCase{"HalfToTheEnd", 0.5, 0.5, {8, 8}, 68, kH200WithRest},
        PlaceCase{"ThreeQuartersFromTheStart", 0, 0.75, {0, 12}, 96, kH200WithRest},  // 99 SMs
        PlaceCase{"QuarterAtTheEnd", 0.75, 0.25, {12, 4}, 36, kH200WithRest},
        PlaceCase{"EveryGroupIsTheWholeDevice", 0, 1, {0, 16}, 132, kH200WithRest},
        PlaceCase{"SliverGetsOneGroup", 0.25, 0.01, {4, 1}, 8, kH200WithRest},
        // Its start is placed at the very end: it gets the last group, of 12.
        PlaceCase{"SliverAtTheEndGetsTheLastGroup", 0.995, 0.005, {15, 1}, 12, kH200WithRest},
        // A tie goes to the later boundary, the same way for both neighbours: 68 SMs lie
        // half way between 64 and 72; 126 half way between 120 and 132.
        PlaceCase{"TieBetweenEqualGroupsGoesLater", 0, 68.0 / 132, {0, 9}, 72, kH200WithRest},
        PlaceCase{
            "NeighbourOfATieStartsAfterIt", 68.0 / 132, 64.0 / 132, {9, 7}, 60, kH200WithRest},
        PlaceCase{"TieBeforeTheLastGroupGoesLater", 0.5, 60.0 / 132, {8, 8}, 68, kH200WithRest},
        PlaceCase{"NearerTheLastGroupsStart", 0.5, 57.0 / 132, {8, 7}, 56, kH200WithRest}),
    [](const ::testing::TestParamInfo<PlaceCase>& info) { return info.param.name; });

// Consecutive placements [0, a), [a, b), [b, 1) on `layout`: the groups they get, checked to
// be consecutive, disjoint and to cover every group and SM.
void ExpectConsecutiveCoverEverySm(const SmLayout& layout, const std::vector<double>& cuts,
                                   const std::vector<int>& expected_sms) {
  SCOPED_TRACE(::testing::Message()
               << layout.group_count() << " groups of " << layout.sm_count << " SMs");
  int next = 0;
  int sms = 0;
  std::vector<int> got;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(SmGroupRange range,
                                PlaceSmGroups(layout, cuts[i], cuts[i + 1] - cuts[i]));
    EXPECT_EQ(range.first, next) << "placement " << i << " overlaps or leaves a gap";
    next = range.first + range.count;
    got.push_back(PlacedSmCount(layout, range));
    sms += got.back();
  }
  EXPECT_EQ(next, layout.group_count());
  EXPECT_EQ(sms, layout.sm_count);
  EXPECT_EQ(got, expected_sms);
}

TEST(PlaceSmGroupsLastGroupTest, PlacementsMeetingAtFractionsShareNoSmAndCoverEveryOne) {
  // 0.8 / 0.2 and 0.5 / 0.5 of the H200, where the 12 SMs of no group once idled.
  ExpectConsecutiveCoverEverySm(kH200WithRest, {0, 0.8, 1}, {104, 28});
  ExpectConsecutiveCoverEverySm(kH200WithRest, {0, 0.5, 1}, {64, 68});
  // Three partitions: 0.3 x 132 = 39.6 -> 40, 0.6 x 132 = 79.2 -> 80.
  ExpectConsecutiveCoverEverySm(kH200WithRest, {0, 0.3, 0.6, 1}, {40, 40, 52});
  // 0.1 + 0.2 misses 0.3 by an ulp; 0.7 x 132 = 92.4 -> 96.
  ExpectConsecutiveCoverEverySm(kH200WithRest, {0, 0.1 + 0.2, 0.7, 1}, {40, 56, 36});
  // The H100: 16 groups of 8 and a last group of 4.
  ExpectConsecutiveCoverEverySm(kH100WithRest, {0, 0.8, 1}, {104, 28});
  ExpectConsecutiveCoverEverySm(kH100WithRest, {0, 0.5, 1}, {64, 68});
  ExpectConsecutiveCoverEverySm(kH100WithRest, {0, 0.3, 0.6, 1}, {40, 40, 52});
}

TEST(PlaceSmGroupsLastGroupTest, H100SliversAndTheWholeDevice) {
  EXPECT_THAT(PlaceSmGroups(kH100WithRest, 0, 1), IsOkAndHolds(SmGroupRange{0, 17}));
  EXPECT_EQ(PlacedSmCount(kH100WithRest, SmGroupRange{0, 17}), 132);
  EXPECT_THAT(PlaceSmGroups(kH100WithRest, 0.25, 0.01), IsOkAndHolds(SmGroupRange{4, 1}));
  // 0.99 x 132 = 130.7 SMs: nearer 132 than 128, so its start is placed past every group.
  EXPECT_THAT(PlaceSmGroups(kH100WithRest, 0.99, 0.01), IsOkAndHolds(SmGroupRange{16, 1}));
  EXPECT_EQ(PlacedSmCount(kH100WithRest, SmGroupRange{16, 1}), 4);
  // The last equal group and the last group together: every SM but the first 15 groups'.
  EXPECT_EQ(PlacedSmCount(kH100WithRest, SmGroupRange{15, 2}), 12);
}

TEST(SmLayoutTest, CountsTheLastGroupAfterTheEqualOnes) {
  EXPECT_EQ(kH100.group_count(), 16);
  EXPECT_EQ(kH100WithRest.equal_groups(), 16);
  EXPECT_EQ(kH100WithRest.group_count(), 17);
  EXPECT_EQ(kH200WithRest.equal_groups(), 15);
  EXPECT_EQ(kH200WithRest.group_count(), 16);
  // Without `groups`, the equal groups are what the SMs outside the last group make.
  EXPECT_EQ((SmLayout{.sm_count = 132, .group_sms = 8, .rest_sms = 12}).equal_groups(), 15);
  EXPECT_EQ(kH200WithRest.SmsBefore(0), 0);
  EXPECT_EQ(kH200WithRest.SmsBefore(15), 120);
  EXPECT_EQ(kH200WithRest.SmsBefore(16), 132);
  EXPECT_TRUE(CheckSmLayout(kH200WithRest).ok());
  EXPECT_THAT(
      CheckSmLayout(SmLayout{.sm_count = 132, .group_sms = 8, .groups = 16, .rest_sms = 12}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("16 groups of 8 SMs and 12 in a last group exceed its sm_count = 132")));
  EXPECT_THAT(CheckSmLayout(SmLayout{.sm_count = 132, .group_sms = 8, .rest_sms = -1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no group")));
}

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

// Random cuts of [0, 1) into consecutive placements, on layouts of 1 to 40 equal groups with
// or without a last group (smaller or larger than the others): whatever the fractions, each
// gets at least one group inside the device; where every placement is at least as wide as the
// widest group, neighbours never share a group and together they cover every group and SM.
TEST(PlaceSmGroupsPropertyTest, ConsecutivePlacementsGetDisjointGroups) {
  const uint32_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  for (int round = 0; round < 2000; ++round) {
    const int equal = std::uniform_int_distribution<int>(1, 40)(rng);
    const int rest = std::uniform_int_distribution<int>(0, 10)(rng);
    const SmLayout layout{
        .sm_count = equal * 4 + std::max(rest, 3), .group_sms = 4, .rest_sms = rest};
    const int groups = layout.group_count();
    const double widest = std::max(4, rest);
    const double grouped_sms = layout.SmsBefore(groups);
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
      wide = wide && share * grouped_sms >= widest + 1e-6;
      GPUKIT_ASSERT_OK_AND_ASSIGN(SmGroupRange range, PlaceSmGroups(layout, cuts[i], share));
      ASSERT_GE(range.count, 1);
      ASSERT_GE(range.first, 0);
      ASSERT_LE(range.first + range.count, groups);
      placed.push_back(range);
    }
    if (!wide) continue;  // a sliver may share its neighbour's group; that is its rule
    int next = 0;
    int sms = 0;
    for (const SmGroupRange& range : placed) {
      ASSERT_EQ(range.first, next)
          << "round " << round << ": groups " << groups << ", rest " << rest;
      next = range.first + range.count;
      sms += PlacedSmCount(layout, range);
    }
    EXPECT_EQ(next, groups) << "round " << round;
    // Every SM: the whole device when one placement has it all, else every grouped SM.
    EXPECT_EQ(sms, placed.size() == 1 ? layout.sm_count : grouped_sms) << "round " << round;
  }
}

// Without a last group, placements are what they were before the remainder became one: each
// boundary the nearest whole group of fraction x groups, halves rounding up, and a sliver
// the group its start rounds to.
TEST(PlaceSmGroupsPropertyTest, WithoutALastGroupRoundsFractionsOfGroupsAsBefore) {
  const uint32_t seed = testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  const auto before = [](double fraction, int groups) {
    return static_cast<int>(
        std::clamp(std::floor(fraction * groups + 0.5 + 1e-9), 0.0, static_cast<double>(groups)));
  };
  for (int round = 0; round < 5000; ++round) {
    const int group_sms = std::uniform_int_distribution<int>(1, 9)(rng);
    // SMs of no group too, fewer than a group: sm_count / group_sms groups.
    const int groups = std::uniform_int_distribution<int>(1, 40)(rng);
    const SmLayout layout{.sm_count = groups * group_sms + round % group_sms,
                          .group_sms = group_sms};
    // Fractions on group halves too, where the rounding rule shows.
    const double first =
        round % 2 == 0
            ? std::uniform_real_distribution<double>(0, 1)(rng) * 0.999
            : std::uniform_int_distribution<int>(0, 2 * groups - 1)(rng) / (2.0 * groups);
    const double share = std::uniform_real_distribution<double>(0, 1)(rng) * (1 - first);
    if (share <= 0) continue;
    SmGroupRange expected{before(first, groups), 0};
    const int end = before(first + share, groups);
    if (end > expected.first) {
      expected.count = end - expected.first;
    } else {
      expected = {std::min(expected.first, groups - 1), 1};
    }
    EXPECT_THAT(PlaceSmGroups(layout, first, share), IsOkAndHolds(expected))
        << "round " << round << ": [" << first << ", +" << share << ") of " << groups;
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
  EXPECT_THAT(device_->StreamSmCount(small), IsOkAndHolds(28));  // 2 groups of 8 and the 4
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
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CpuDevice> h200,
                              CpuDevice::Create({.nominal_sms = kH200WithRest}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId second_half,
                              h200->CreateStream(StreamOptions{.sm_share = 0.5, .sm_first = 0.5}));
  EXPECT_THAT(h200->StreamSmCount(second_half), IsOkAndHolds(68));
  EXPECT_THAT(CpuDevice::Create({.nominal_sms = SmLayout{.sm_count = 4, .group_sms = 8}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nominal_sms")));
  EXPECT_THAT(
      CpuDevice::Create(
          {.nominal_sms = SmLayout{.sm_count = 128, .group_sms = 8, .groups = 16, .rest_sms = 4}}),
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
