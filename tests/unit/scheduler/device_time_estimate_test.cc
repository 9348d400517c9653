// Device time estimates per task name (daemon/scheduler/device_time_estimate.h).
#include "daemon/scheduler/device_time_estimate.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace gpukit {
namespace {

constexpr absl::Duration kFallback = absl::Milliseconds(1);

struct LearnCase {
  std::string name;
  std::vector<absl::Duration> measured;  // in order, all of one task name
  absl::Duration expected;
};
void PrintTo(const LearnCase& c, std::ostream* os) { *os << c.name; }

class LearnTest : public ::testing::TestWithParam<LearnCase> {};

TEST_P(LearnTest, EstimateFollowsTheMeasurements) {
  DeviceTimeEstimates estimates;
  for (absl::Duration d : GetParam().measured) estimates.Learn("matmul", d);
  EXPECT_EQ(estimates.Estimate("matmul", kFallback), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Table, LearnTest,
    ::testing::Values(
        LearnCase{"NeverMeasuredIsTheFallback", {}, kFallback},
        LearnCase{"FirstMeasurementAsItIs", {absl::Microseconds(300)}, absl::Microseconds(300)},
        LearnCase{"ARiseIsTakenAtOnce",
                  {absl::Microseconds(100), absl::Microseconds(900)},
                  absl::Microseconds(900)},
        LearnCase{"AFallByAQuarterOfTheDifference",
                  {absl::Microseconds(900), absl::Microseconds(100)},
                  absl::Microseconds(700)},
        LearnCase{"RepeatedFallsApproachTheValue",
                  {absl::Microseconds(1000), absl::ZeroDuration(), absl::ZeroDuration()},
                  absl::Nanoseconds(562500)},  // 1000 us -> 750 us -> 562.5 us
        LearnCase{"ASmallFallIsReachedNotLeftAbove",
                  {absl::Nanoseconds(3), absl::Nanoseconds(2)},
                  absl::Nanoseconds(2)},
        LearnCase{"NegativeCountsAsZero", {-absl::Milliseconds(5)}, absl::ZeroDuration()}),
    [](const ::testing::TestParamInfo<LearnCase>& info) { return info.param.name; });

TEST(DeviceTimeEstimatesTest, NamesAreLearnedApart) {
  DeviceTimeEstimates estimates;
  estimates.Learn("add", absl::Microseconds(5));
  estimates.Learn("matmul", absl::Milliseconds(2));
  EXPECT_EQ(estimates.Estimate("add", kFallback), absl::Microseconds(5));
  EXPECT_EQ(estimates.Estimate("matmul", kFallback), absl::Milliseconds(2));
  EXPECT_EQ(estimates.Estimate("upload", kFallback), kFallback);
}

TEST(DeviceTimeEstimatesTest, KeepsAtMostMaxNamesAndStillLearnsThoseItHas) {
  DeviceTimeEstimates estimates;
  for (int i = 0; i < DeviceTimeEstimates::kMaxNames + 10; ++i) {
    estimates.Learn(absl::StrCat("k", i), absl::Microseconds(i + 1));
  }
  EXPECT_EQ(estimates.size(), DeviceTimeEstimates::kMaxNames);
  const std::string late = absl::StrCat("k", DeviceTimeEstimates::kMaxNames);
  EXPECT_EQ(estimates.Estimate(late, kFallback), kFallback) << "a name past the limit";
  estimates.Learn("k0", absl::Milliseconds(3));
  EXPECT_EQ(estimates.Estimate("k0", kFallback), absl::Milliseconds(3));
}

}  // namespace
}  // namespace gpukit
