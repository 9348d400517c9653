// Byte sizes as people write them (runtime/base/units.h).
#include "runtime/base/units.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = kKiB * 1024;
constexpr int64_t kGiB = kMiB * 1024;
constexpr int64_t kTiB = kGiB * 1024;

struct ParseCase {
  std::string text;
  int64_t bytes;
};

class ParseBytesTest : public ::testing::TestWithParam<ParseCase> {};

TEST_P(ParseBytesTest, GivesTheNumberOfBytes) {
  EXPECT_THAT(ParseBytes(GetParam().text), IsOkAndHolds(GetParam().bytes))
      << "\"" << GetParam().text << "\"";
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseBytesTest,
    ::testing::Values(ParseCase{"0", 0}, ParseCase{"4096", 4096}, ParseCase{"1B", 1},
                      ParseCase{"17 B", 17}, ParseCase{"1KiB", kKiB},
                      ParseCase{"512MiB", 512 * kMiB}, ParseCase{"8GiB", 8 * kGiB},
                      ParseCase{"2TiB", 2 * kTiB}, ParseCase{"1KB", 1000},
                      ParseCase{"3MB", 3000000}, ParseCase{"1.5GB", 1500000000},
                      ParseCase{"2TB", 2000000000000}, ParseCase{"1.5GiB", 3 * kGiB / 2},
                      ParseCase{"0.5KiB", 512}, ParseCase{"8gib", 8 * kGiB},
                      ParseCase{"8GIB", 8 * kGiB}, ParseCase{"64 mib", 64 * kMiB},
                      ParseCase{"  4 KiB  ", 4 * kKiB}, ParseCase{"1048576TiB", int64_t{1} << 60}));

class BadBytesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BadBytesTest, IsInvalidArgumentQuotingTheText) {
  EXPECT_THAT(ParseBytes(GetParam()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"" + GetParam() + "\"")));
}

INSTANTIATE_TEST_SUITE_P(Table, BadBytesTest,
                         ::testing::Values("", "   ", "MiB", "abc", "-1", "-1MiB", "+5", "1.2.3",
                                           ".", "1e3", "12 parsecs", "1 KiB B", "1EiB", "0x10",
                                           "1,024"));

TEST(ParseBytesTest, UnknownUnitMessageListsTheUnits) {
  EXPECT_THAT(ParseBytes("5 XB"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown unit; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB")));
}

TEST(ParseBytesTest, RejectsSizesThatOverflowInt64) {
  for (const char* text : {"9300000TB", "9223372036854775808", "8388608TiB", "99999999999TB"}) {
    EXPECT_THAT(ParseBytes(text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large")))
        << text;
  }
}

struct FormatCase {
  int64_t bytes;
  std::string text;
};

class FormatBytesTest : public ::testing::TestWithParam<FormatCase> {};

TEST_P(FormatBytesTest, UsesTheLargestBinaryUnitWithAtMostOneDecimal) {
  EXPECT_EQ(FormatBytes(GetParam().bytes), GetParam().text);
}

INSTANTIATE_TEST_SUITE_P(
    Table, FormatBytesTest,
    ::testing::Values(FormatCase{0, "0 B"}, FormatCase{1, "1 B"}, FormatCase{512, "512 B"},
                      FormatCase{1023, "1023 B"}, FormatCase{1024, "1 KiB"},
                      FormatCase{1536, "1.5 KiB"}, FormatCase{512 * kMiB, "512 MiB"},
                      FormatCase{3 * kGiB / 2, "1.5 GiB"}, FormatCase{4 * kGiB, "4 GiB"},
                      FormatCase{kTiB, "1 TiB"}, FormatCase{1024 * kTiB, "1 PiB"},
                      FormatCase{int64_t{1} << 62, "4096 PiB"},
                      FormatCase{kMiB + 100 * kKiB, "1.1 MiB"},
                      // Rounding to one decimal decides the unit and the decimal.
                      FormatCase{kMiB - 1, "1 MiB"}, FormatCase{kGiB - kKiB, "1 GiB"},
                      FormatCase{1025, "1 KiB"}, FormatCase{kKiB + 51, "1 KiB"},
                      FormatCase{kKiB + 52, "1.1 KiB"}, FormatCase{10 * kMiB - 1, "10 MiB"}));

TEST(FormatBytesTest, NeverShowsATrailingZeroDecimalOr1024OfAUnitBelowPiB) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (replay with GPUKIT_TEST_SEED)");
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 20000; ++i) {
    // Spread over every unit: a random number of bits, then random bits below it.
    const int bits = static_cast<int>(rng() % 62);
    const int64_t bytes = static_cast<int64_t>(rng() >> (64 - bits - 1));
    const std::string text = FormatBytes(bytes);
    ASSERT_THAT(text, ::testing::Not(HasSubstr(".0 "))) << bytes;
    if (text.find("PiB") == std::string::npos) {
      ASSERT_THAT(text, ::testing::Not(::testing::StartsWith("1024 "))) << bytes;
    }
  }
}

TEST(FormatBytesTest, ParsesBackToTheSameBytesForWholeUnits) {
  for (int64_t bytes :
       {int64_t{0}, int64_t{7}, kKiB, 3 * kKiB / 2, 512 * kMiB, 8 * kGiB, 5 * kGiB / 2, 3 * kTiB}) {
    EXPECT_THAT(ParseBytes(FormatBytes(bytes)), IsOkAndHolds(bytes)) << FormatBytes(bytes);
  }
}

}  // namespace
}  // namespace gpukit
