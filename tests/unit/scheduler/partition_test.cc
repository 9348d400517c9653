// Partition specs and whether they fit on their device (daemon/scheduler/partition.h).
#include "daemon/scheduler/partition.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename Case>
std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

// A valid spec that each row changes in one way.
PartitionSpec Valid() {
  return {.name = "inference", .device_index = 0, .memory_quota_bytes = kGiB, .compute_share = 0.5};
}

struct SpecCase {
  std::string name;
  std::function<void(PartitionSpec&)> change;
  std::string message;  // for refusals: names the field and the value
};

// ---- ValidatePartitionSpec ----

class ValidatePartitionSpecRejectsTest : public ::testing::TestWithParam<SpecCase> {};

TEST_P(ValidatePartitionSpecRejectsTest, IsInvalidArgumentNamingTheField) {
  PartitionSpec spec = Valid();
  GetParam().change(spec);
  EXPECT_THAT(ValidatePartitionSpec(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Table, ValidatePartitionSpecRejectsTest,
    ::testing::Values(
        SpecCase{"EmptyName", [](PartitionSpec& s) { s.name = ""; }, "partition name \"\""},
        SpecCase{"NameOf64Characters", [](PartitionSpec& s) { s.name = std::string(64, 'a'); },
                 "must be 1 to 63 characters"},
        SpecCase{"NameWithASpace", [](PartitionSpec& s) { s.name = "my partition"; },
                 "partition name \"my partition\""},
        SpecCase{"NameWithASlash", [](PartitionSpec& s) { s.name = "a/b"; },
                 "partition name \"a/b\""},
        SpecCase{"NameWithAColon", [](PartitionSpec& s) { s.name = "team:a"; },
                 "partition name \"team:a\""},
        SpecCase{"NameWithNonAscii", [](PartitionSpec& s) { s.name = "caf\xc3\xa9"; },
                 "partition name \"caf\\xc3\\xa9\""},
        SpecCase{"NameWithANewline", [](PartitionSpec& s) { s.name = "a\nb"; },
                 "partition name \"a\\nb\""},
        SpecCase{"NegativeDevice", [](PartitionSpec& s) { s.device_index = -1; }, "device = -1"},
        SpecCase{"ZeroQuota", [](PartitionSpec& s) { s.memory_quota_bytes = 0; },
                 "memory quota = 0 bytes"},
        SpecCase{"NegativeQuota", [](PartitionSpec& s) { s.memory_quota_bytes = -1; },
                 "memory quota = -1 bytes"},
        SpecCase{"ZeroShare", [](PartitionSpec& s) { s.compute_share = 0; },
                 "compute share = 0 must be in (0, 1]"},
        SpecCase{"NegativeShare", [](PartitionSpec& s) { s.compute_share = -0.5; },
                 "compute share = -0.5"},
        SpecCase{"ShareAboveOne", [](PartitionSpec& s) { s.compute_share = 1.5; },
                 "compute share = 1.5"},
        SpecCase{"NaNShare", [](PartitionSpec& s) { s.compute_share = kNaN; },
                 "compute share = nan"},
        SpecCase{"BandwidthCapBelowShare", [](PartitionSpec& s) { s.bandwidth_cap = 0.25; },
                 "bandwidth cap = 0.25 must be 0 (none) or in [compute share = 0.5, 1]"},
        SpecCase{"BandwidthCapAboveOne", [](PartitionSpec& s) { s.bandwidth_cap = 1.5; },
                 "bandwidth cap = 1.5"},
        SpecCase{"NegativeBandwidthCap", [](PartitionSpec& s) { s.bandwidth_cap = -1; },
                 "bandwidth cap = -1"},
        SpecCase{"NaNBandwidthCap", [](PartitionSpec& s) { s.bandwidth_cap = kNaN; },
                 "bandwidth cap = nan"},
        SpecCase{"ZeroMaxQueuedTasks", [](PartitionSpec& s) { s.max_queued_tasks = 0; },
                 "max queued tasks = 0 must be >= 1"},
        SpecCase{"ZeroMaxRunningTasks", [](PartitionSpec& s) { s.max_running_tasks = 0; },
                 "max running tasks = 0 must be >= 1"},
        SpecCase{"NegativeMaxSessions", [](PartitionSpec& s) { s.max_sessions = -1; },
                 "max sessions = -1"},
        SpecCase{"NegativeSessionDefaultMemory",
                 [](PartitionSpec& s) { s.session_defaults.memory_limit_bytes = -5; },
                 "session defaults: limits.memory = -5"},
        SpecCase{"SessionDefaultRequestAboveLimit",
                 [](PartitionSpec& s) {
                   s.session_defaults.compute_request = 0.5;
                   s.session_defaults.compute_limit = 0.25;
                 },
                 "session defaults: requests.compute = 0.5 is above limits.compute = 0.25"}),
    CaseName<SpecCase>);

class ValidatePartitionSpecAcceptsTest : public ::testing::TestWithParam<SpecCase> {};

TEST_P(ValidatePartitionSpecAcceptsTest, IsOk) {
  PartitionSpec spec = Valid();
  GetParam().change(spec);
  EXPECT_THAT(ValidatePartitionSpec(spec), IsOk());
}

INSTANTIATE_TEST_SUITE_P(
    Table, ValidatePartitionSpecAcceptsTest,
    ::testing::Values(
        SpecCase{"TheBaseSpec", [](PartitionSpec&) {}},
        SpecCase{"DefaultPartitionName",
                 [](PartitionSpec& s) { s.name = std::string(kDefaultPartition); }},
        SpecCase{"NameOf63Characters", [](PartitionSpec& s) { s.name = std::string(63, 'a'); }},
        SpecCase{"NameOfOneCharacter", [](PartitionSpec& s) { s.name = "x"; }},
        SpecCase{"NameOfEveryAllowedKind", [](PartitionSpec& s) { s.name = "Team-A_v1.2"; }},
        SpecCase{"OtherDevice", [](PartitionSpec& s) { s.device_index = 3; }},
        SpecCase{"OneByteQuota", [](PartitionSpec& s) { s.memory_quota_bytes = 1; }},
        SpecCase{"WholeDeviceShare", [](PartitionSpec& s) { s.compute_share = 1; }},
        SpecCase{"TinyShare", [](PartitionSpec& s) { s.compute_share = 0.001; }},
        SpecCase{"NoBandwidthCap", [](PartitionSpec& s) { s.bandwidth_cap = 0; }},
        SpecCase{"BandwidthCapEqualToShare", [](PartitionSpec& s) { s.bandwidth_cap = 0.5; }},
        SpecCase{"BandwidthCapOfTheWholeDevice", [](PartitionSpec& s) { s.bandwidth_cap = 1; }},
        SpecCase{"OneQueuedAndOneRunningTask",
                 [](PartitionSpec& s) {
                   s.max_queued_tasks = 1;
                   s.max_running_tasks = 1;
                 }},
        SpecCase{"MaxSessionsZeroMeansNoLimit", [](PartitionSpec& s) { s.max_sessions = 0; }},
        SpecCase{"SessionDefaults",
                 [](PartitionSpec& s) {
                   s.session_defaults = {.memory_limit_bytes = kGiB, .compute_limit = 0.25};
                 }}),
    CaseName<SpecCase>);

// ---- AdmitPartition ----

constexpr int64_t kDeviceBytes = 1000;

PartitionSpec On(int device_index, std::string name, int64_t quota_bytes, double share) {
  return {.name = std::move(name),
          .device_index = device_index,
          .memory_quota_bytes = quota_bytes,
          .compute_share = share};
}

TEST(AdmitPartitionTest, FirstPartitionMayTakeTheWholeDevice) {
  const Decision d = AdmitPartition(On(0, "all", kDeviceBytes, 1.0), {}, kDeviceBytes);
  EXPECT_TRUE(d.admitted) << d.message;
  EXPECT_EQ(d.reason, RejectReason::kNone);
  EXPECT_THAT(d.message, IsEmpty());
}

TEST(AdmitPartitionTest, AdmitsAQuotaThatFitsExactlyBesideTheOthers) {
  const std::vector<PartitionSpec> others = {On(0, "a", 600, 0.25), On(0, "b", 300, 0.25)};
  const Decision d = AdmitPartition(On(0, "c", 100, 0.5), others, kDeviceBytes);
  EXPECT_TRUE(d.admitted) << d.message;
}

TEST(AdmitPartitionTest, RefusesAQuotaOneByteOverNamingWhatIsLeft) {
  const std::vector<PartitionSpec> others = {On(0, "a", 600, 0.25), On(0, "b", 300, 0.25)};
  const Decision d = AdmitPartition(On(0, "c", 101, 0.1), others, kDeviceBytes);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.reason, RejectReason::kDeviceOvercommitted);
  EXPECT_THAT(d.message, AllOf(HasSubstr("partition \"c\""), HasSubstr("memory quota of 101 B"),
                               HasSubstr("device 0 has 100 B not promised")));
}

TEST(AdmitPartitionTest, RefusesSharesSummingOverOneNamingWhatIsLeft) {
  const std::vector<PartitionSpec> others = {On(0, "a", 100, 0.6)};
  const Decision d = AdmitPartition(On(0, "b", 100, 0.5), others, kDeviceBytes);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.reason, RejectReason::kDeviceOvercommitted);
  EXPECT_THAT(d.message,
              AllOf(HasSubstr("compute share of 0.5"), HasSubstr("has 0.4 not promised")));
}

TEST(AdmitPartitionTest, AdmitsSharesSummingExactlyToOneDespiteRounding) {
  // 0.1 + 0.2 + 0.7 is 1.0000000000000002 in floating point.
  const std::vector<PartitionSpec> others = {On(0, "a", 100, 0.1), On(0, "b", 100, 0.2)};
  const Decision d = AdmitPartition(On(0, "c", 100, 0.7), others, kDeviceBytes);
  EXPECT_TRUE(d.admitted) << d.message;
}

TEST(AdmitPartitionTest, RefusesASliverOfShareAboveOne) {
  const std::vector<PartitionSpec> others = {On(0, "a", 100, 0.1), On(0, "b", 100, 0.2)};
  const Decision d = AdmitPartition(On(0, "c", 100, 0.701), others, kDeviceBytes);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.reason, RejectReason::kDeviceOvercommitted);
}

TEST(AdmitPartitionTest, IgnoresPartitionsOfOtherDevices) {
  const std::vector<PartitionSpec> others = {On(1, "gpu1", kDeviceBytes, 1.0),
                                             On(2, "gpu2", kDeviceBytes, 1.0)};
  const Decision d = AdmitPartition(On(0, "gpu0", kDeviceBytes, 1.0), others, kDeviceBytes);
  EXPECT_TRUE(d.admitted) << d.message;
}

TEST(AdmitPartitionTest, CountsOnlyPartitionsOfItsOwnDevice) {
  const std::vector<PartitionSpec> others = {On(0, "a", 500, 0.5), On(1, "b", 900, 0.9)};
  EXPECT_TRUE(AdmitPartition(On(1, "c", 100, 0.1), others, kDeviceBytes).admitted);
  EXPECT_FALSE(AdmitPartition(On(1, "c", 101, 0.1), others, kDeviceBytes).admitted);
}

TEST(AdmitPartitionTest, OthersAlreadyOverTheDeviceLeaveNothing) {
  const std::vector<PartitionSpec> others = {On(0, "a", 1500, 0.5)};
  const Decision d = AdmitPartition(On(0, "b", 1, 0.1), others, kDeviceBytes);
  EXPECT_FALSE(d.admitted);
  EXPECT_THAT(d.message, HasSubstr("has 0 B not promised"));
}

TEST(AdmitPartitionTest, RefusalBecomesResourceExhaustedCarryingTheReason) {
  const Decision d = AdmitPartition(On(0, "big", kDeviceBytes + 1, 0.5), {}, kDeviceBytes);
  const absl::Status status = d.ToStatus();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("\"big\"")));
  EXPECT_EQ(ReasonOf(status), RejectReason::kDeviceOvercommitted);
}

// --- PartitionFieldMask -----------------------------------------------------------------

// A spec whose every field differs from Valid()'s.
PartitionSpec Other() {
  return {.name = "training",
          .device_index = 1,
          .memory_quota_bytes = 2 * kGiB,
          .compute_share = 0.25,
          .bandwidth_cap = 0.5,
          .max_queued_tasks = 7,
          .max_running_tasks = 3,
          .max_sessions = 2,
          .spill = true,
          .reserve_sms = true,
          .session_defaults = {.memory_request_bytes = 1 << 20}};
}

struct MaskCase {
  std::string name;
  std::function<void(PartitionFieldMask&)> set;     // one field's bit
  std::function<bool(const PartitionSpec&)> taken;  // whether that field came from Other()
};

class PartitionFieldMaskTest : public ::testing::TestWithParam<MaskCase> {};

TEST_P(PartitionFieldMaskTest, ApplyTakesExactlyTheNamedFieldAndChangedFindsIt) {
  PartitionFieldMask mask;
  GetParam().set(mask);
  const PartitionSpec merged = ApplyPartitionFields(Valid(), mask, Other());
  EXPECT_TRUE(GetParam().taken(merged));
  // Every other field stays, and so do the name and device.
  EXPECT_EQ(ChangedPartitionFields(Valid(), merged), mask);
  EXPECT_EQ(merged.name, "inference");
  EXPECT_EQ(merged.device_index, 0);
  // Applying that field back restores Valid() exactly.
  EXPECT_TRUE(ChangedPartitionFields(Valid(), ApplyPartitionFields(merged, mask, Valid())).empty());
}

INSTANTIATE_TEST_SUITE_P(
    EachField, PartitionFieldMaskTest,
    ::testing::Values(MaskCase{"memory_quota_bytes", [](auto& m) { m.memory_quota_bytes = true; },
                               [](const auto& s) { return s.memory_quota_bytes == 2 * kGiB; }},
                      MaskCase{"compute_share", [](auto& m) { m.compute_share = true; },
                               [](const auto& s) { return s.compute_share == 0.25; }},
                      MaskCase{"bandwidth_cap", [](auto& m) { m.bandwidth_cap = true; },
                               [](const auto& s) { return s.bandwidth_cap == 0.5; }},
                      MaskCase{"max_queued_tasks", [](auto& m) { m.max_queued_tasks = true; },
                               [](const auto& s) { return s.max_queued_tasks == 7; }},
                      MaskCase{"max_running_tasks", [](auto& m) { m.max_running_tasks = true; },
                               [](const auto& s) { return s.max_running_tasks == 3; }},
                      MaskCase{"max_sessions", [](auto& m) { m.max_sessions = true; },
                               [](const auto& s) { return s.max_sessions == 2; }},
                      MaskCase{"spill", [](auto& m) { m.spill = true; },
                               [](const auto& s) { return s.spill; }},
                      MaskCase{"reserve_sms", [](auto& m) { m.reserve_sms = true; },
                               [](const auto& s) { return s.reserve_sms; }},
                      MaskCase{"session_defaults", [](auto& m) { m.session_defaults = true; },
                               [](const auto& s) {
                                 return s.session_defaults.memory_request_bytes == int64_t{1} << 20;
                               }}),
    CaseName<MaskCase>);

TEST(PartitionFieldMaskAllTest, TakesEveryFieldButNameAndDevice) {
  const PartitionSpec merged = ApplyPartitionFields(Valid(), PartitionFieldMask::All(), Other());
  EXPECT_EQ(ChangedPartitionFields(Valid(), merged), PartitionFieldMask::All());
  EXPECT_EQ(merged.name, "inference");
  EXPECT_EQ(merged.device_index, 0);
  EXPECT_TRUE(PartitionFieldMask{}.empty());
  EXPECT_FALSE(PartitionFieldMask::All().empty());
  EXPECT_TRUE(ChangedPartitionFields(Valid(), ApplyPartitionFields(Valid(), {}, Other())).empty());
}

// --- ImpliedDefaultPartition ------------------------------------------------------------

PartitionSpec On(int device_index, int64_t bytes, double share) {
  return {.name = "p",
          .device_index = device_index,
          .memory_quota_bytes = bytes,
          .compute_share = share};
}

struct ImpliedCase {
  std::string name;
  std::vector<PartitionSpec> others;
  int64_t device0_bytes;
  std::optional<std::pair<int64_t, double>> expected;  // bytes and share; nullopt: none
};

class ImpliedDefaultPartitionTest : public ::testing::TestWithParam<ImpliedCase> {};

TEST_P(ImpliedDefaultPartitionTest, TakesWhatTheOthersOnDeviceZeroLeave) {
  const ImpliedCase& c = GetParam();
  const std::optional<PartitionSpec> d = ImpliedDefaultPartition(c.others, c.device0_bytes);
  ASSERT_EQ(d.has_value(), c.expected.has_value());
  if (!d.has_value()) return;
  EXPECT_EQ(d->name, kDefaultPartition);
  EXPECT_EQ(d->device_index, 0);
  EXPECT_EQ(d->memory_quota_bytes, c.expected->first);
  EXPECT_NEAR(d->compute_share, c.expected->second, 1e-12);
  EXPECT_THAT(ValidatePartitionSpec(*d), IsOk()) << "the implied partition is a valid one";
}

INSTANTIATE_TEST_SUITE_P(
    Rows, ImpliedDefaultPartitionTest,
    ::testing::Values(
        ImpliedCase{"AloneItTakesTheWholeDevice", {}, 8 * kGiB, {{8 * kGiB, 1.0}}},
        ImpliedCase{"ItTakesWhatTheOthersLeave",
                    {On(0, 3 * kGiB, 0.25), On(0, kGiB, 0.25)},
                    8 * kGiB,
                    {{4 * kGiB, 0.5}}},
        ImpliedCase{"PartitionsOfOtherDevicesDoNotCount",
                    {On(1, 8 * kGiB, 1.0), On(0, kGiB, 0.5)},
                    8 * kGiB,
                    {{7 * kGiB, 0.5}}},
        ImpliedCase{"NoMemoryLeftMeansNone", {On(0, 8 * kGiB, 0.5)}, 8 * kGiB, std::nullopt},
        ImpliedCase{"OvercommittedMemoryMeansNone", {On(0, 9 * kGiB, 0.1)}, 8 * kGiB, std::nullopt},
        ImpliedCase{
            "NoTimeLeftMeansNone", {On(0, kGiB, 0.5), On(0, kGiB, 0.5)}, 8 * kGiB, std::nullopt},
        ImpliedCase{"ASliverOfTimeMeansNone", {On(0, kGiB, 1.0 - 1e-7)}, 8 * kGiB, std::nullopt},
        ImpliedCase{
            "AThousandthOfTheTimeIsKept", {On(0, kGiB, 0.999)}, 8 * kGiB, {{7 * kGiB, 0.001}}},
        ImpliedCase{"OneByteLeftIsKept", {On(0, 8 * kGiB - 1, 0.5)}, 8 * kGiB, {{1, 0.5}}},
        ImpliedCase{"ADeviceWithoutMemoryMeansNone", {}, 0, std::nullopt}),
    CaseName<ImpliedCase>);

}  // namespace
}  // namespace gpukit
