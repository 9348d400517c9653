// QoS classes derived from requests and limits, as Kubernetes derives a pod's
// (daemon/scheduler/qos.h).
#include "daemon/scheduler/qos.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

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

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename Case>
std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

// ---- DeriveQos ----

struct QosCase {
  std::string name;
  ResourceSpec spec;
  QosClass qos;
};

class DeriveQosTest : public ::testing::TestWithParam<QosCase> {};

TEST_P(DeriveQosTest, DerivesTheKubernetesClass) {
  EXPECT_EQ(DeriveQos(GetParam().spec), GetParam().qos)
      << "got " << QosName(DeriveQos(GetParam().spec)) << ", want " << QosName(GetParam().qos);
}

TEST_P(DeriveQosTest, DefaultingRequestsFirstDoesNotChangeTheClass) {
  EXPECT_EQ(DeriveQos(WithDefaultedRequests(GetParam().spec)), GetParam().qos);
}

INSTANTIATE_TEST_SUITE_P(
    Table, DeriveQosTest,
    ::testing::Values(
        QosCase{"NothingSetIsBestEffort", {}, QosClass::kBestEffort},
        QosCase{"LimitsOnlyForBothIsGuaranteedAsRequestsDefaultToLimits",
                {.memory_limit_bytes = kGiB, .compute_limit = 0.25},
                QosClass::kGuaranteed},
        QosCase{"RequestsEqualToLimitsForBothIsGuaranteed",
                {.memory_request_bytes = kGiB,
                 .memory_limit_bytes = kGiB,
                 .compute_request = 0.25,
                 .compute_limit = 0.25},
                QosClass::kGuaranteed},
        QosCase{"MemoryRequestEqualToLimitComputeLimitOnlyIsGuaranteed",
                {.memory_request_bytes = kGiB, .memory_limit_bytes = kGiB, .compute_limit = 1.0},
                QosClass::kGuaranteed},
        QosCase{"OnlyMemoryLimitIsBurstable", {.memory_limit_bytes = kGiB}, QosClass::kBurstable},
        QosCase{
            "OnlyMemoryRequestIsBurstable", {.memory_request_bytes = kGiB}, QosClass::kBurstable},
        QosCase{"OnlyComputeLimitIsBurstable", {.compute_limit = 0.5}, QosClass::kBurstable},
        QosCase{"OnlyComputeRequestIsBurstable", {.compute_request = 0.5}, QosClass::kBurstable},
        QosCase{"RequestsOnlyForBothIsBurstable",
                {.memory_request_bytes = kGiB, .compute_request = 0.5},
                QosClass::kBurstable},
        QosCase{"MemoryRequestBelowLimitIsBurstable",
                {.memory_request_bytes = kGiB / 2,
                 .memory_limit_bytes = kGiB,
                 .compute_request = 0.5,
                 .compute_limit = 0.5},
                QosClass::kBurstable},
        QosCase{"ComputeRequestBelowLimitIsBurstable",
                {.memory_request_bytes = kGiB,
                 .memory_limit_bytes = kGiB,
                 .compute_request = 0.25,
                 .compute_limit = 0.5},
                QosClass::kBurstable},
        QosCase{"ComputeGuaranteedButMemoryMissingIsBurstable",
                {.compute_request = 0.5, .compute_limit = 0.5},
                QosClass::kBurstable},
        QosCase{"MemoryGuaranteedButComputeMissingIsBurstable",
                {.memory_request_bytes = kGiB, .memory_limit_bytes = kGiB},
                QosClass::kBurstable},
        QosCase{"MemoryGuaranteedButComputeRequestWithoutLimitIsBurstable",
                {.memory_limit_bytes = kGiB, .compute_request = 0.5},
                QosClass::kBurstable},
        QosCase{"ComputeGuaranteedButMemoryRequestWithoutLimitIsBurstable",
                {.memory_request_bytes = kGiB, .compute_limit = 0.5},
                QosClass::kBurstable}),
    CaseName<QosCase>);

// ---- QosName ----

struct NameCase {
  std::string name;
  QosClass qos;
};

class QosNameTest : public ::testing::TestWithParam<NameCase> {};

TEST_P(QosNameTest, UsesTheKubernetesSpelling) {
  EXPECT_EQ(QosName(GetParam().qos), GetParam().name);
}

INSTANTIATE_TEST_SUITE_P(AllClasses, QosNameTest,
                         ::testing::Values(NameCase{"Guaranteed", QosClass::kGuaranteed},
                                           NameCase{"Burstable", QosClass::kBurstable},
                                           NameCase{"BestEffort", QosClass::kBestEffort}),
                         CaseName<NameCase>);

TEST(QosClassTest, IsOrderedFromMostToLeastProtected) {
  EXPECT_LT(QosClass::kGuaranteed, QosClass::kBurstable);
  EXPECT_LT(QosClass::kBurstable, QosClass::kBestEffort);
}

// ---- ValidateResourceSpec ----

struct InvalidCase {
  std::string name;
  ResourceSpec spec;
  std::string message;  // names the field and the value
};

class ValidateResourceSpecRejectsTest : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(ValidateResourceSpecRejectsTest, IsInvalidArgumentNamingTheField) {
  EXPECT_THAT(ValidateResourceSpec(GetParam().spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Table, ValidateResourceSpecRejectsTest,
    ::testing::Values(
        InvalidCase{"NegativeMemoryRequest", {.memory_request_bytes = -1}, "requests.memory = -1"},
        InvalidCase{"NegativeMemoryLimit", {.memory_limit_bytes = -4096}, "limits.memory = -4096"},
        InvalidCase{"NegativeComputeRequest", {.compute_request = -0.5}, "requests.compute = -0.5"},
        InvalidCase{"ComputeRequestAboveOne", {.compute_request = 1.5}, "requests.compute = 1.5"},
        InvalidCase{"ComputeLimitAboveOne", {.compute_limit = 1.25}, "limits.compute = 1.25"},
        InvalidCase{"NaNComputeRequest", {.compute_request = kNaN}, "requests.compute = nan"},
        InvalidCase{"NaNComputeLimit", {.compute_limit = kNaN}, "limits.compute = nan"},
        InvalidCase{"MemoryRequestAboveLimit",
                    {.memory_request_bytes = 2048, .memory_limit_bytes = 1024},
                    "requests.memory = 2048 bytes is above limits.memory = 1024 bytes"},
        InvalidCase{"ComputeRequestAboveLimit",
                    {.compute_request = 0.5, .compute_limit = 0.25},
                    "requests.compute = 0.5 is above limits.compute = 0.25"}),
    CaseName<InvalidCase>);

struct ValidCase {
  std::string name;
  ResourceSpec spec;
};

class ValidateResourceSpecAcceptsTest : public ::testing::TestWithParam<ValidCase> {};

TEST_P(ValidateResourceSpecAcceptsTest, IsOk) {
  EXPECT_THAT(ValidateResourceSpec(GetParam().spec), IsOk());
}

INSTANTIATE_TEST_SUITE_P(
    Table, ValidateResourceSpecAcceptsTest,
    ::testing::Values(ValidCase{"Empty", {}},
                      ValidCase{"ZeroBytesAndZeroShares",
                                {.memory_request_bytes = 0,
                                 .memory_limit_bytes = 0,
                                 .compute_request = 0.0,
                                 .compute_limit = 0.0}},
                      ValidCase{"WholeDevice", {.compute_request = 1.0, .compute_limit = 1.0}},
                      ValidCase{"RequestsEqualToLimits",
                                {.memory_request_bytes = kGiB,
                                 .memory_limit_bytes = kGiB,
                                 .compute_request = 0.3,
                                 .compute_limit = 0.3}},
                      ValidCase{"RequestsBelowLimits",
                                {.memory_request_bytes = 1,
                                 .memory_limit_bytes = kGiB,
                                 .compute_request = 0.1,
                                 .compute_limit = 0.9}},
                      ValidCase{"RequestsWithoutLimits",
                                {.memory_request_bytes = 8 * kGiB, .compute_request = 0.5}},
                      ValidCase{"LimitsWithoutRequests",
                                {.memory_limit_bytes = kGiB, .compute_limit = 0.5}}),
    CaseName<ValidCase>);

// ---- WithDefaultedRequests ----

TEST(WithDefaultedRequestsTest, LimitWithoutRequestBecomesTheRequest) {
  const ResourceSpec spec =
      WithDefaultedRequests({.memory_limit_bytes = kGiB, .compute_limit = 0.25});
  EXPECT_EQ(spec, (ResourceSpec{.memory_request_bytes = kGiB,
                                .memory_limit_bytes = kGiB,
                                .compute_request = 0.25,
                                .compute_limit = 0.25}));
}

TEST(WithDefaultedRequestsTest, GivenRequestsAreKept) {
  const ResourceSpec given{.memory_request_bytes = kGiB / 4,
                           .memory_limit_bytes = kGiB,
                           .compute_request = 0.1,
                           .compute_limit = 0.5};
  EXPECT_EQ(WithDefaultedRequests(given), given);
}

TEST(WithDefaultedRequestsTest, RequestWithoutLimitGetsNoLimit) {
  const ResourceSpec given{.memory_request_bytes = kGiB, .compute_request = 0.5};
  EXPECT_EQ(WithDefaultedRequests(given), given);
}

TEST(WithDefaultedRequestsTest, EachResourceIsDefaultedOnItsOwn) {
  EXPECT_EQ(WithDefaultedRequests({.memory_limit_bytes = kGiB, .compute_request = 0.5}),
            (ResourceSpec{
                .memory_request_bytes = kGiB, .memory_limit_bytes = kGiB, .compute_request = 0.5}));
  EXPECT_EQ(WithDefaultedRequests({.compute_limit = 0.5}),
            (ResourceSpec{.compute_request = 0.5, .compute_limit = 0.5}));
}

TEST(WithDefaultedRequestsTest, EmptyStaysEmpty) { EXPECT_TRUE(WithDefaultedRequests({}).empty()); }

}  // namespace
}  // namespace gpukit
