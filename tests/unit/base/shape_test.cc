#include "runtime/base/shape.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpukit {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int64_t kTwoTo32 = int64_t{1} << 32;
constexpr int64_t kTwoTo62 = int64_t{1} << 62;

TEST(ShapeToStringTest, FormatsLikeAList) {
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(ShapeToString({0}), "[0]");
  EXPECT_EQ(ShapeToString({2, 3, 4}), "[2, 3, 4]");
}

TEST(ValidateShapeTest, AcceptsScalarEmptyAndMaxRankShapes) {
  EXPECT_TRUE(ValidateShape({}, "shape").ok());
  EXPECT_TRUE(ValidateShape({0}, "shape").ok());
  EXPECT_TRUE(ValidateShape({0, kTwoTo62, 4}, "shape").ok());  // 0 elements, no overflow
  EXPECT_TRUE(ValidateShape(Shape(kMaxRank, 2), "shape").ok());
}

TEST(ValidateShapeTest, RejectsRankAboveMaximum) {
  const absl::Status status = ValidateShape(Shape(kMaxRank + 1, 1), "a.shape");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("a.shape has 9 dimensions; at most 8"));
}

TEST(ValidateShapeTest, RejectsNegativeDimensionNamingFieldIndexAndValue) {
  const absl::Status status = ValidateShape({2, -3}, "shape");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "shape[1] = -3 must be >= 0");
}

TEST(ValidateShapeTest, RejectsElementCountOverflowNamingTheShape) {
  const absl::Status status = ValidateShape({kTwoTo32, kTwoTo32}, "b.shape");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("b.shape = [4294967296, 4294967296]"));
  EXPECT_THAT(status.message(), HasSubstr("overflow"));
}

struct CountCase {
  std::string name;
  Shape shape;
  int64_t count;
};

class ElementCountTest : public testing::TestWithParam<CountCase> {};

TEST_P(ElementCountTest, IsProductOfDimensions) {
  const absl::StatusOr<int64_t> count = ElementCount(GetParam().shape);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, GetParam().count);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ElementCountTest,
    testing::Values(CountCase{"ScalarHasOneElement", {}, 1}, CountCase{"Vector", {5}, 5},
                    CountCase{"Rank3", {2, 3, 4}, 24},
                    CountCase{"ZeroExtentGivesZero", {5, 0, 7}, 0},
                    CountCase{"LeadingZeroBeforeHugeExtents", {0, kTwoTo62, 4}, 0},
                    CountCase{"LargeButRepresentable", {kTwoTo32, kTwoTo32 / 4}, kTwoTo62}),
    [](const testing::TestParamInfo<CountCase>& info) { return info.param.name; });

TEST(ElementCountTest, FailsOnOverflow) {
  EXPECT_EQ(ElementCount({kTwoTo62, 4}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ElementCount({kTwoTo32, kTwoTo32}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ElementCountTest, FailsOnNegativeDimension) {
  EXPECT_EQ(ElementCount({3, -1}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Disabled: ElementCount multiplies left to right and reports an overflow before it reaches
// a later 0, so {2^62, 4, 0} (no elements at all) is rejected while {0, 2^62, 4} is accepted.
// Reported to the lead rather than fixed here; enable once ElementCount checks for a zero
// extent first.
TEST(ElementCountTest, ZeroExtentAnywhereMeansZeroElements) {
  const absl::StatusOr<int64_t> count = ElementCount({kTwoTo62, 4, 0});
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 0);
}

TEST(ByteSizeTest, IsElementCountTimesDTypeSize) {
  EXPECT_EQ(*ByteSize({2, 3}, DType::kFloat32), 24);
  EXPECT_EQ(*ByteSize({2, 3}, DType::kBFloat16), 12);
  EXPECT_EQ(*ByteSize({}, DType::kInt64), 8);
  EXPECT_EQ(*ByteSize({7}, DType::kUInt8), 7);
  EXPECT_EQ(*ByteSize({0, 5}, DType::kFloat16), 0);
}

TEST(ByteSizeTest, FailsWhenOnlyTheByteCountOverflows) {
  // 2^62 elements fit in int64; 2^62 float32 bytes * 4 do not.
  const absl::StatusOr<int64_t> bytes = ByteSize({kTwoTo62}, DType::kFloat32);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.status().message(), HasSubstr("[4611686018427387904] float32"));
  EXPECT_TRUE(ByteSize({kTwoTo62}, DType::kUInt8).ok());
}

TEST(ByteSizeTest, FailsWhenElementCountOverflows) {
  EXPECT_EQ(ByteSize({kTwoTo32, kTwoTo32}, DType::kUInt8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

struct BroadcastCase {
  std::string name;
  Shape a;
  Shape b;
  std::optional<Shape> expected;  // nullopt: incompatible
};

class BroadcastShapesTest : public testing::TestWithParam<BroadcastCase> {};

TEST_P(BroadcastShapesTest, FollowsNumPyRulesInEitherOrder) {
  const BroadcastCase& c = GetParam();
  for (const auto& [a, b] : {std::pair(c.a, c.b), std::pair(c.b, c.a)}) {
    SCOPED_TRACE(ShapeToString(a) + " with " + ShapeToString(b));
    const absl::StatusOr<Shape> out = BroadcastShapes(a, b);
    if (c.expected.has_value()) {
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_THAT(*out, ElementsAreArray(*c.expected));
    } else {
      ASSERT_FALSE(out.ok());
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(out.status().message(), HasSubstr("cannot be broadcast together"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, BroadcastShapesTest,
    testing::Values(BroadcastCase{"EqualShapes", {2, 3}, {2, 3}, Shape{2, 3}},
                    BroadcastCase{"ScalarsGiveScalar", {}, {}, Shape{}},
                    BroadcastCase{"ScalarStretchesToAnyShape", {}, {2, 3}, Shape{2, 3}},
                    BroadcastCase{"AlignsRightAndStretchesOnes", {2, 1, 3}, {4, 3}, Shape{2, 4, 3}},
                    BroadcastCase{"BothSidesStretch", {3, 1}, {1, 4}, Shape{3, 4}},
                    BroadcastCase{"OneStretchesToZero", {1}, {0}, Shape{0}},
                    BroadcastCase{"LeadingOnesKept", {1, 1, 5}, {5}, Shape{1, 1, 5}},
                    BroadcastCase{"MismatchedExtents", {2}, {3}, std::nullopt},
                    BroadcastCase{"MismatchedInnerExtents", {2, 3}, {3, 2}, std::nullopt},
                    BroadcastCase{"ZeroDoesNotStretchToTwo", {0}, {2}, std::nullopt}),
    [](const testing::TestParamInfo<BroadcastCase>& info) { return info.param.name; });

TEST(ContiguousStridesTest, AreRowMajorElementStrides) {
  EXPECT_THAT(ContiguousStrides({}), ElementsAreArray(std::vector<int64_t>{}));
  EXPECT_THAT(ContiguousStrides({5}), ElementsAreArray({1}));
  EXPECT_THAT(ContiguousStrides({2, 3, 4}), ElementsAreArray({12, 4, 1}));
  EXPECT_THAT(ContiguousStrides({3, 0, 2}), ElementsAreArray({0, 2, 1}));
}

struct BroadcastStridesCase {
  std::string name;
  Shape in;
  Shape out;
  std::vector<int64_t> strides;
};

class BroadcastStridesTest : public testing::TestWithParam<BroadcastStridesCase> {};

TEST_P(BroadcastStridesTest, AreZeroAlongBroadcastDimensions) {
  EXPECT_THAT(BroadcastStrides(GetParam().in, GetParam().out),
              ElementsAreArray(GetParam().strides));
}

INSTANTIATE_TEST_SUITE_P(
    Table, BroadcastStridesTest,
    testing::Values(BroadcastStridesCase{"SameShapeIsContiguous", {2, 3}, {2, 3}, {3, 1}},
                    BroadcastStridesCase{"RowVectorRepeatsOverRows", {3}, {2, 3}, {0, 1}},
                    BroadcastStridesCase{"ColumnVectorRepeatsOverColumns", {2, 1}, {2, 3}, {1, 0}},
                    BroadcastStridesCase{"ScalarRepeatsEverywhere", {}, {2, 3}, {0, 0}},
                    BroadcastStridesCase{"AllOnesRepeatEverywhere", {1, 1}, {4, 5}, {0, 0}},
                    BroadcastStridesCase{"MiddleOneRepeats", {2, 1, 3}, {2, 4, 3}, {3, 0, 1}},
                    BroadcastStridesCase{"ScalarToScalar", {}, {}, {}}),
    [](const testing::TestParamInfo<BroadcastStridesCase>& info) { return info.param.name; });

struct AxisCase {
  std::string name;
  int64_t axis;
  int rank;
  int expected;
};

class NormalizeAxisTest : public testing::TestWithParam<AxisCase> {};

TEST_P(NormalizeAxisTest, ResolvesNegativeAxesFromTheEnd) {
  const absl::StatusOr<int> axis = NormalizeAxis(GetParam().axis, GetParam().rank, "axis");
  ASSERT_TRUE(axis.ok()) << axis.status();
  EXPECT_EQ(*axis, GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(Table, NormalizeAxisTest,
                         testing::Values(AxisCase{"First", 0, 3, 0}, AxisCase{"Last", 2, 3, 2},
                                         AxisCase{"MinusOneIsLast", -1, 3, 2},
                                         AxisCase{"MinusRankIsFirst", -3, 3, 0},
                                         AxisCase{"OnlyAxisOfVector", -1, 1, 0}),
                         [](const testing::TestParamInfo<AxisCase>& info) {
                           return info.param.name;
                         });

TEST(NormalizeAxisTest, RejectsOutOfRangeNamingFieldAndRank) {
  for (const auto& [axis, rank] : {std::pair<int64_t, int>(3, 3), std::pair<int64_t, int>(-4, 3),
                                   std::pair<int64_t, int>(0, 0)}) {
    const absl::StatusOr<int> result = NormalizeAxis(axis, rank, "reduce.axis");
    ASSERT_FALSE(result.ok()) << axis << " of rank " << rank;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(result.status().message(),
                HasSubstr("reduce.axis = " + std::to_string(axis) +
                          " is out of range for an array of rank " + std::to_string(rank)));
  }
}

}  // namespace
}  // namespace gpukit
