// PlaceSms: how a device's partitions are laid out over its SMs (reserved ones in name order
// from the first group, shared ones together on the rest, nothing placed without a reserved
// one), and the stream options each QoS class gets in a placement.
#include "daemon/core/sm_placement.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpukit {
namespace {

using ::testing::DoubleNear;
using ::testing::Optional;

PartitionSpec Spec(std::string name, double share, bool reserved) {
  return PartitionSpec{.name = std::move(name),
                       .memory_quota_bytes = 1 << 20,
                       .compute_share = share,
                       .reserve_sms = reserved};
}

struct Expected {
  std::string name;
  std::optional<double> first;  // unset: every SM
  double share;
};

struct PlaceCase {
  std::string name;
  std::vector<PartitionSpec> partitions;
  std::vector<Expected> expected;
};

class PlaceSmsTest : public ::testing::TestWithParam<PlaceCase> {};

TEST_P(PlaceSmsTest, LaysThePartitionsOut) {
  const PlaceCase& c = GetParam();
  const absl::flat_hash_map<std::string, SmPlacement> placed = PlaceSms(c.partitions);
  EXPECT_EQ(placed.size(), c.partitions.size());
  for (const Expected& e : c.expected) {
    SCOPED_TRACE(e.name);
    auto it = placed.find(e.name);
    ASSERT_NE(it, placed.end());
    if (e.first.has_value()) {
      EXPECT_THAT(it->second.first, Optional(DoubleNear(*e.first, 1e-12)));
    } else {
      EXPECT_EQ(it->second.first, std::nullopt);
    }
    EXPECT_NEAR(it->second.share, e.share, 1e-12);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Devices, PlaceSmsTest,
    ::testing::Values(
        // Today's behaviour, unchanged: nothing reserved, nothing placed.
        PlaceCase{"NothingReservedPlacesNothing",
                  {Spec("a", 0.8, false), Spec("b", 0.2, false)},
                  {{"a", std::nullopt, 1}, {"b", std::nullopt, 1}}},
        PlaceCase{"TwoReservedInNameOrder",
                  {Spec("small", 0.2, true), Spec("big", 0.8, true)},
                  {{"big", 0.0, 0.8}, {"small", 0.8, 0.2}}},
        // Shared partitions run together on what the reserved ones leave.
        PlaceCase{"SharedOnesShareTheRest",
                  {Spec("g", 0.5, true), Spec("x", 0.3, false), Spec("y", 0.2, false)},
                  {{"g", 0.0, 0.5}, {"x", 0.5, 0.5}, {"y", 0.5, 0.5}}},
        // Reserved below 1 with no shared partition: the rest idles.
        PlaceCase{"ReservedAloneKeepsItsShare", {Spec("g", 0.3, true)}, {{"g", 0.0, 0.3}}},
        // Shares summing above 1 (admission's rounding slack) are scaled to fit.
        PlaceCase{"SharesAboveOneAreScaled",
                  {Spec("a", 0.6, true), Spec("b", 0.6, true)},
                  {{"a", 0.0, 0.5}, {"b", 0.5, 0.5}}},
        PlaceCase{"SharedShareCountsInTheScale",
                  {Spec("a", 0.75, true), Spec("z", 0.5, false)},
                  {{"a", 0.0, 0.6}, {"z", 0.6, 0.4}}}),
    [](const ::testing::TestParamInfo<PlaceCase>& info) { return info.param.name; });

TEST(PlaceSmsTest, ReservedRangesNeverOverlapAndStayOnTheDevice) {
  std::vector<PartitionSpec> partitions;
  for (int i = 0; i < 7; ++i) {
    partitions.push_back(Spec("p" + std::to_string(i), 1.0 / 7, true));
  }
  const absl::flat_hash_map<std::string, SmPlacement> placed = PlaceSms(partitions);
  double end = 0;
  for (int i = 0; i < 7; ++i) {
    const SmPlacement& p = placed.at("p" + std::to_string(i));
    ASSERT_TRUE(p.first.has_value());
    EXPECT_DOUBLE_EQ(*p.first, end);
    EXPECT_GT(p.share, 0);
    end = *p.first + p.share;
    EXPECT_LE(end, 1 + 1e-12);
  }
}

TEST(StreamOptionsForTest, ClassesKeepTheirPrioritiesInThePlacement) {
  const SmPlacement placed{.first = 0.5, .share = 0.4};
  const StreamOptions g = StreamOptionsFor(placed, QosClass::kGuaranteed, 0.5);
  EXPECT_EQ(g.priority, StreamPriority::kHigh);
  EXPECT_THAT(g.sm_first, Optional(0.5));
  EXPECT_DOUBLE_EQ(g.sm_share, 0.4);
  const StreamOptions b = StreamOptionsFor(placed, QosClass::kBurstable, 0.5);
  EXPECT_EQ(b.priority, StreamPriority::kNormal);
  EXPECT_DOUBLE_EQ(b.sm_share, 0.4);
  // BestEffort takes its share of the placement, from the placement's start.
  const StreamOptions be = StreamOptionsFor(placed, QosClass::kBestEffort, 0.5);
  EXPECT_EQ(be.priority, StreamPriority::kLow);
  EXPECT_THAT(be.sm_first, Optional(0.5));
  EXPECT_DOUBLE_EQ(be.sm_share, 0.2);
}

TEST(StreamOptionsForTest, UnplacedStreamsAreTodaysStreams) {
  const StreamOptions g = StreamOptionsFor(SmPlacement{}, QosClass::kGuaranteed, 0.25);
  EXPECT_EQ(g.sm_first, std::nullopt);
  EXPECT_EQ(g.sm_share, 1);
  const StreamOptions be = StreamOptionsFor(SmPlacement{}, QosClass::kBestEffort, 0.25);
  EXPECT_EQ(be.sm_first, std::nullopt);
  EXPECT_EQ(be.sm_share, 0.25);
}

}  // namespace
}  // namespace gpukit
