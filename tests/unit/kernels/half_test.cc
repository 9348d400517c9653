#include "kernels/cpu/half.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include "gtest/gtest.h"

namespace gpukit::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float FromBits(uint32_t bits) { return std::bit_cast<float>(bits); }

// A float with the given exact value `significand * 2^exponent`.
float Exact(double significand, int exponent) {
  return static_cast<float>(std::ldexp(significand, exponent));
}

struct FromFloatCase {
  std::string name;
  float value;
  uint16_t bits;
};

std::string CaseName(const testing::TestParamInfo<FromFloatCase>& info) { return info.param.name; }

class Float16FromFloatTest : public testing::TestWithParam<FromFloatCase> {};

TEST_P(Float16FromFloatTest, ProducesExpectedBits) {
  const FromFloatCase& c = GetParam();
  EXPECT_EQ(Float16::FromFloat(c.value).bits, c.bits)
      << std::hex << "value " << c.value << " (float bits 0x" << std::bit_cast<uint32_t>(c.value)
      << ")";
}

INSTANTIATE_TEST_SUITE_P(
    HandComputed, Float16FromFloatTest,
    testing::Values(
        FromFloatCase{"PositiveZero", 0.0f, 0x0000}, FromFloatCase{"NegativeZero", -0.0f, 0x8000},
        FromFloatCase{"One", 1.0f, 0x3c00}, FromFloatCase{"MinusTwo", -2.0f, 0xc000},
        FromFloatCase{"OneThirdRoundsDown", 1.0f / 3.0f, 0x3555},
        FromFloatCase{"PointOneRoundsToNearest", 0.1f, 0x2e66},
        FromFloatCase{"LargestFinite", 65504.0f, 0x7bff},
        FromFloatCase{"JustBelowOverflowTieStaysFinite", FromBits(0x477fefff), 0x7bff},
        FromFloatCase{"OverflowTieRoundsToInfinity", 65520.0f, 0x7c00},
        FromFloatCase{"LargeValueOverflowsToInfinity", 1e10f, 0x7c00},
        FromFloatCase{"LargeNegativeOverflowsToMinusInfinity", -1e10f, 0xfc00},
        FromFloatCase{"FloatMaxOverflowsToInfinity", std::numeric_limits<float>::max(), 0x7c00},
        FromFloatCase{"Infinity", kInf, 0x7c00}, FromFloatCase{"MinusInfinity", -kInf, 0xfc00},
        FromFloatCase{"TieAboveOneRoundsDownToEven", Exact(1 + 0x1p-11, 0), 0x3c00},
        FromFloatCase{"TieAboveOddRoundsUpToEven", Exact(1 + 3 * 0x1p-11, 0), 0x3c02},
        FromFloatCase{"JustAboveTieRoundsUp", Exact(1 + 0x1p-11 + 0x1p-23, 0), 0x3c01},
        FromFloatCase{"JustBelowTieRoundsDown", Exact(1 + 0x1p-11 - 0x1p-23, 0), 0x3c00},
        FromFloatCase{"CarryIntoExponent", Exact(2 - 0x1p-12, 0), 0x4000},
        FromFloatCase{"SmallestNormal", Exact(1, -14), 0x0400},
        FromFloatCase{"LargestSubnormal", Exact(1023, -24), 0x03ff},
        FromFloatCase{"SmallestSubnormal", Exact(1, -24), 0x0001},
        FromFloatCase{"NegativeSmallestSubnormal", Exact(-1, -24), 0x8001},
        FromFloatCase{"HalfOfSmallestSubnormalTiesToZero", Exact(1, -25), 0x0000},
        FromFloatCase{"JustAboveHalfOfSmallestSubnormalRoundsUp", Exact(1 + 0x1p-23, -25), 0x0001},
        FromFloatCase{"SubnormalTieRoundsUpToEven", Exact(3, -25), 0x0002},
        FromFloatCase{"SubnormalTieRoundsDownToEven", Exact(5, -25), 0x0002},
        FromFloatCase{"SubnormalRoundsUpIntoSmallestNormal", Exact(1023.5, -24), 0x0400},
        FromFloatCase{"TinyValueRoundsToZero", 1e-10f, 0x0000},
        FromFloatCase{"TinyNegativeValueRoundsToNegativeZero", -1e-10f, 0x8000},
        FromFloatCase{"FloatSubnormalRoundsToZero", FromBits(0x00000001), 0x0000}),
    CaseName);

class BFloat16FromFloatTest : public testing::TestWithParam<FromFloatCase> {};

TEST_P(BFloat16FromFloatTest, ProducesExpectedBits) {
  const FromFloatCase& c = GetParam();
  EXPECT_EQ(BFloat16::FromFloat(c.value).bits, c.bits)
      << std::hex << "value " << c.value << " (float bits 0x" << std::bit_cast<uint32_t>(c.value)
      << ")";
}

INSTANTIATE_TEST_SUITE_P(
    HandComputed, BFloat16FromFloatTest,
    testing::Values(
        FromFloatCase{"PositiveZero", 0.0f, 0x0000}, FromFloatCase{"NegativeZero", -0.0f, 0x8000},
        FromFloatCase{"One", 1.0f, 0x3f80}, FromFloatCase{"MinusTwo", -2.0f, 0xc000},
        FromFloatCase{"PiRoundsDown", FromBits(0x40490fdb), 0x4049},
        FromFloatCase{"TieRoundsDownToEven", FromBits(0x3f808000), 0x3f80},
        FromFloatCase{"TieRoundsUpToEven", FromBits(0x3f818000), 0x3f82},
        FromFloatCase{"JustAboveTieRoundsUp", FromBits(0x3f808001), 0x3f81},
        FromFloatCase{"JustBelowTieRoundsDown", FromBits(0x3f807fff), 0x3f80},
        FromFloatCase{"LargestFiniteStaysFinite", FromBits(0x7f7f7fff), 0x7f7f},
        FromFloatCase{"OverflowTieRoundsToInfinity", FromBits(0x7f7f8000), 0x7f80},
        FromFloatCase{"FloatMaxOverflowsToInfinity", std::numeric_limits<float>::max(), 0x7f80},
        FromFloatCase{"NegativeFloatMaxOverflowsToMinusInfinity",
                      -std::numeric_limits<float>::max(), 0xff80},
        FromFloatCase{"Infinity", kInf, 0x7f80}, FromFloatCase{"MinusInfinity", -kInf, 0xff80},
        FromFloatCase{"SmallestSubnormal", FromBits(0x00010000), 0x0001},
        FromFloatCase{"SubnormalTieRoundsDownToZero", FromBits(0x00008000), 0x0000},
        FromFloatCase{"SubnormalTieRoundsUpToEven", FromBits(0x00018000), 0x0002},
        FromFloatCase{"SubnormalJustAboveTieRoundsUp", FromBits(0x00008001), 0x0001},
        FromFloatCase{"SubnormalRoundsUpIntoSmallestNormal", FromBits(0x007fffff), 0x0080},
        FromFloatCase{"NegativeSubnormal", FromBits(0x80010000), 0x8001}),
    CaseName);

struct ToFloatCase {
  std::string name;
  uint16_t bits;
  float value;
};

std::string ToFloatCaseName(const testing::TestParamInfo<ToFloatCase>& info) {
  return info.param.name;
}

class Float16ToFloatTest : public testing::TestWithParam<ToFloatCase> {};

TEST_P(Float16ToFloatTest, ProducesExactValue) {
  const float value = Float16{GetParam().bits}.ToFloat();
  EXPECT_EQ(std::bit_cast<uint32_t>(value), std::bit_cast<uint32_t>(GetParam().value))
      << "got " << value << ", want " << GetParam().value;
}

INSTANTIATE_TEST_SUITE_P(HandComputed, Float16ToFloatTest,
                         testing::Values(ToFloatCase{"One", 0x3c00, 1.0f},
                                         ToFloatCase{"NegativeZero", 0x8000, -0.0f},
                                         ToFloatCase{"MinusOneAndAHalf", 0xbe00, -1.5f},
                                         ToFloatCase{"LargestFinite", 0x7bff, 65504.0f},
                                         ToFloatCase{"SmallestNormal", 0x0400, Exact(1, -14)},
                                         ToFloatCase{"SmallestSubnormal", 0x0001, Exact(1, -24)},
                                         ToFloatCase{"LargestSubnormal", 0x03ff, Exact(1023, -24)},
                                         ToFloatCase{"NegativeSubnormal", 0x8200, Exact(-1, -15)},
                                         ToFloatCase{"Infinity", 0x7c00, kInf},
                                         ToFloatCase{"MinusInfinity", 0xfc00, -kInf}),
                         ToFloatCaseName);

class BFloat16ToFloatTest : public testing::TestWithParam<ToFloatCase> {};

TEST_P(BFloat16ToFloatTest, ProducesExactValue) {
  const float value = BFloat16{GetParam().bits}.ToFloat();
  EXPECT_EQ(std::bit_cast<uint32_t>(value), std::bit_cast<uint32_t>(GetParam().value))
      << "got " << value << ", want " << GetParam().value;
}

INSTANTIATE_TEST_SUITE_P(HandComputed, BFloat16ToFloatTest,
                         testing::Values(ToFloatCase{"One", 0x3f80, 1.0f},
                                         ToFloatCase{"NegativeZero", 0x8000, -0.0f},
                                         ToFloatCase{"MinusThree", 0xc040, -3.0f},
                                         ToFloatCase{"LargestFinite", 0x7f7f, FromBits(0x7f7f0000)},
                                         ToFloatCase{"SmallestSubnormal", 0x0001, Exact(1, -133)},
                                         ToFloatCase{"Infinity", 0x7f80, kInf},
                                         ToFloatCase{"MinusInfinity", 0xff80, -kInf}),
                         ToFloatCaseName);

// The NaN, round-trip and rounding properties hold for both formats; the typed suite states
// them once. Traits give each format's layout.
template <typename T>
struct Format;

template <>
struct Format<Float16> {
  static constexpr int kFractionBits = 10;
  static constexpr int kMinExponent = -14;  // of the smallest normal
  static constexpr uint16_t kLargestFinite = 0x7bff;
  static constexpr uint16_t kExponentMask = 0x7c00;
};

template <>
struct Format<BFloat16> {
  static constexpr int kFractionBits = 7;
  static constexpr int kMinExponent = -126;
  static constexpr uint16_t kLargestFinite = 0x7f7f;
  static constexpr uint16_t kExponentMask = 0x7f80;
};

template <typename T>
bool IsNanBits(uint16_t bits) {
  return (bits & Format<T>::kExponentMask) == Format<T>::kExponentMask &&
         (bits & ~Format<T>::kExponentMask & 0x7fff) != 0;
}

// Independent reference: round `value` to the format's grid in double with std::nearbyint
// (round-half-even in the default rounding mode), or to infinity past the largest finite value.
template <typename T>
double ReferenceRound(double value) {
  if (value == 0 || !std::isfinite(value)) return value;
  int exponent = 0;
  std::frexp(value, &exponent);  // |value| in [2^(exponent-1), 2^exponent)
  const int unit_exponent =
      std::max(exponent - 1, Format<T>::kMinExponent) - Format<T>::kFractionBits;
  const double rounded =
      std::ldexp(std::nearbyint(std::ldexp(value, -unit_exponent)), unit_exponent);
  const double largest = T{Format<T>::kLargestFinite}.ToFloat();
  if (std::fabs(rounded) > largest) return std::copysign(INFINITY, value);
  return rounded;
}

template <typename T>
class HalfFormatTest : public testing::Test {};

using HalfFormats = testing::Types<Float16, BFloat16>;
TYPED_TEST_SUITE(HalfFormatTest, HalfFormats);

TYPED_TEST(HalfFormatTest, IsTwoTriviallyCopyableBytes) {
  static_assert(sizeof(TypeParam) == 2);
  static_assert(std::is_trivially_copyable_v<TypeParam>);
  EXPECT_EQ(TypeParam{}.bits, 0);  // value-initialized to +0
}

TYPED_TEST(HalfFormatTest, NanStaysNanWithSign) {
  const float quiet = std::numeric_limits<float>::quiet_NaN();
  const uint16_t positive = TypeParam::FromFloat(quiet).bits;
  const uint16_t negative = TypeParam::FromFloat(-quiet).bits;
  EXPECT_TRUE(IsNanBits<TypeParam>(positive)) << std::hex << positive;
  EXPECT_TRUE(IsNanBits<TypeParam>(negative)) << std::hex << negative;
  EXPECT_EQ(positive & 0x8000, 0);
  EXPECT_EQ(negative & 0x8000, 0x8000);
  EXPECT_TRUE(std::isnan(TypeParam{positive}.ToFloat()));
}

TYPED_TEST(HalfFormatTest, NanWithPayloadOnlyInDroppedBitsStaysNan) {
  // A signalling NaN whose only payload bit is the lowest: truncating the fraction alone would
  // turn it into infinity.
  for (uint32_t bits : {0x7f800001u, 0xff800001u, 0x7f801000u, 0x7fc00000u, 0x7fffffffu}) {
    const uint16_t result = TypeParam::FromFloat(FromBits(bits)).bits;
    EXPECT_TRUE(IsNanBits<TypeParam>(result)) << std::hex << bits << " -> " << result;
  }
}

TYPED_TEST(HalfFormatTest, EveryValueRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const TypeParam value{static_cast<uint16_t>(bits)};
    const uint16_t back = TypeParam::FromFloat(value.ToFloat()).bits;
    if (IsNanBits<TypeParam>(value.bits)) {
      EXPECT_TRUE(std::isnan(value.ToFloat())) << std::hex << bits;
      EXPECT_TRUE(IsNanBits<TypeParam>(back)) << std::hex << bits;
    } else {
      ASSERT_EQ(back, value.bits) << std::hex << "bits 0x" << bits;
    }
  }
}

// Between every pair of neighbouring finite values (subnormals included), the exact midpoint
// goes to the one with an even last bit, and the floats on either side of it go to the nearer.
TYPED_TEST(HalfFormatTest, EveryMidpointTiesToEvenAndItsNeighboursRoundToNearest) {
  for (uint16_t bits = 0; bits < Format<TypeParam>::kLargestFinite; ++bits) {
    const uint16_t next = bits + 1;
    const double low = TypeParam{bits}.ToFloat(), high = TypeParam{next}.ToFloat();
    const float midpoint = static_cast<float>((low + high) / 2);  // exact: fewer bits than float
    ASSERT_EQ(static_cast<double>(midpoint), (low + high) / 2);
    const uint16_t even = (bits & 1) == 0 ? bits : next;
    ASSERT_EQ(TypeParam::FromFloat(midpoint).bits, even) << std::hex << "between 0x" << bits;
    ASSERT_EQ(TypeParam::FromFloat(-midpoint).bits, even | 0x8000) << std::hex << bits;
    ASSERT_EQ(TypeParam::FromFloat(std::nextafter(midpoint, 0.0f)).bits, bits) << std::hex << bits;
    ASSERT_EQ(TypeParam::FromFloat(std::nextafter(midpoint, kInf)).bits, next) << std::hex << bits;
  }
}

TYPED_TEST(HalfFormatTest, RandomFloatsRoundLikeDoubleReference) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  // Exponents spanning both formats' subnormal, normal and overflow ranges.
  std::uniform_int_distribution<int> exponent(-140, 130);
  std::uniform_real_distribution<double> significand(1.0, 2.0);
  std::bernoulli_distribution negative(0.5);
  for (int i = 0; i < 100000; ++i) {
    const double magnitude = std::ldexp(significand(rng), exponent(rng));
    if (magnitude > std::numeric_limits<float>::max()) continue;
    const float value = static_cast<float>(negative(rng) ? -magnitude : magnitude);
    const double want = ReferenceRound<TypeParam>(value);
    const double got = TypeParam::FromFloat(value).ToFloat();
    ASSERT_TRUE(got == want && std::signbit(got) == std::signbit(want))
        << "value " << value << " (float bits 0x" << std::hex << std::bit_cast<uint32_t>(value)
        << std::dec << "): got " << got << ", want " << want;
  }
}

}  // namespace
}  // namespace gpukit::kernels
