// Rejection reasons and their status payload (daemon/scheduler/reason.h).
#include "daemon/scheduler/reason.h"

#include <iterator>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::StartsWith;

struct NameCase {
  RejectReason reason;
  absl::string_view name;  // as the proto enum gpukit.v1.Reason spells it
};

// Every value, in the order of the enum; its size is checked against kRejectReasonCount.
constexpr NameCase kNames[] = {
    {RejectReason::kNone, "REASON_UNSPECIFIED"},
    {RejectReason::kDeviceMemoryExhausted, "REASON_DEVICE_MEMORY_EXHAUSTED"},
    {RejectReason::kArrayTooLarge, "REASON_ARRAY_TOO_LARGE"},
    {RejectReason::kTooManySessions, "REASON_TOO_MANY_SESSIONS"},
    {RejectReason::kTooManyArrays, "REASON_TOO_MANY_ARRAYS"},
    {RejectReason::kPartitionQuotaExceeded, "REASON_PARTITION_QUOTA_EXCEEDED"},
    {RejectReason::kSessionLimitExceeded, "REASON_SESSION_LIMIT_EXCEEDED"},
    {RejectReason::kQueueFull, "REASON_QUEUE_FULL"},
    {RejectReason::kDeadlineExceeded, "REASON_DEADLINE_EXCEEDED"},
    {RejectReason::kDeviceOvercommitted, "REASON_DEVICE_OVERCOMMITTED"},
    {RejectReason::kPartitionBusy, "REASON_PARTITION_BUSY"},
    {RejectReason::kCancelled, "REASON_CANCELLED"},
};
static_assert(std::size(kNames) == kRejectReasonCount, "a RejectReason is missing from kNames");

std::string CaseName(const ::testing::TestParamInfo<NameCase>& info) {
  return std::string(info.param.name);
}

class RejectReasonTest : public ::testing::TestWithParam<NameCase> {};

TEST_P(RejectReasonTest, NameIsTheProtoEnumValueName) {
  EXPECT_EQ(RejectReasonName(GetParam().reason), GetParam().name);
}

TEST_P(RejectReasonTest, WithReasonIsReadBackByReasonOfKeepingCodeAndMessage) {
  const absl::Status status =
      WithReason(absl::ResourceExhaustedError("no room for 42 bytes"), GetParam().reason);
  EXPECT_EQ(ReasonOf(status), GetParam().reason);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, "no room for 42 bytes"));
}

TEST_P(RejectReasonTest, ReasonSurvivesCopyingAndMovingTheStatus) {
  const absl::Status original = WithReason(absl::InternalError("x"), GetParam().reason);
  absl::Status copy = original;
  const absl::Status moved = std::move(copy);
  EXPECT_EQ(ReasonOf(original), GetParam().reason);
  EXPECT_EQ(ReasonOf(moved), GetParam().reason);
}

INSTANTIATE_TEST_SUITE_P(AllReasons, RejectReasonTest, ::testing::ValuesIn(kNames), CaseName);

TEST(RejectReasonNameTest, ValuesAreTheProtoEnumNumbers) {
  for (int i = 0; i < kRejectReasonCount; ++i) {
    EXPECT_EQ(static_cast<int>(kNames[i].reason), i) << kNames[i].name;
  }
}

TEST(RejectReasonNameTest, NamesAreDistinctAndPrefixedLikeTheProto) {
  std::set<absl::string_view> names;
  for (int i = 0; i < kRejectReasonCount; ++i) {
    const absl::string_view name = RejectReasonName(static_cast<RejectReason>(i));
    EXPECT_THAT(std::string(name), StartsWith("REASON_"));
    names.insert(name);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kRejectReasonCount));
}

class ReasonOfPlainStatusTest : public ::testing::TestWithParam<absl::Status> {};

TEST_P(ReasonOfPlainStatusTest, StatusWithoutAReasonHasNone) {
  EXPECT_EQ(ReasonOf(GetParam()), RejectReason::kNone);
}

INSTANTIATE_TEST_SUITE_P(Statuses, ReasonOfPlainStatusTest,
                         ::testing::Values(absl::OkStatus(), absl::ResourceExhaustedError("plain"),
                                           absl::InvalidArgumentError("bad"),
                                           absl::CancelledError("")));

TEST(ReasonOfTest, OkStatusCannotCarryAReason) {
  // absl drops payloads on OK, so an OK status never reads as a rejection.
  const absl::Status status = WithReason(absl::OkStatus(), RejectReason::kArrayTooLarge);
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(ReasonOf(status), RejectReason::kNone);
}

TEST(ReasonOfTest, UnrelatedPayloadsAreNotAReason) {
  absl::Status status = absl::ResourceExhaustedError("x");
  status.SetPayload("type.example.com/other", absl::Cord("REASON_QUEUE_FULL"));
  EXPECT_EQ(ReasonOf(status), RejectReason::kNone);
}

TEST(ReasonOfTest, TheLastReasonAttachedWins) {
  const absl::Status status =
      WithReason(WithReason(absl::ResourceExhaustedError("x"), RejectReason::kArrayTooLarge),
                 RejectReason::kQueueFull);
  EXPECT_EQ(ReasonOf(status), RejectReason::kQueueFull);
}

TEST(ReasonOfTest, AttachingNoneClearsAnEarlierReason) {
  const absl::Status status = WithReason(
      WithReason(absl::ResourceExhaustedError("x"), RejectReason::kQueueFull), RejectReason::kNone);
  EXPECT_EQ(ReasonOf(status), RejectReason::kNone);
}

}  // namespace
}  // namespace gpukit
