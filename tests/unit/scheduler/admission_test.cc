// Admission rules for sessions, allocations and tasks (daemon/scheduler/admission.h).
#include "daemon/scheduler/admission.h"

#include <cstdint>
#include <optional>
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
using ::testing::IsEmpty;

template <typename Case>
std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

TEST(AdmissionLimitsTest, DefaultsAreTheDocumentedOnes) {
  const AdmissionLimits limits;
  EXPECT_EQ(limits.max_array_bytes, int64_t{2} << 30);
  EXPECT_EQ(limits.max_sessions, 1024);
  EXPECT_EQ(limits.max_arrays_per_session, 65536);
}

// ---- Decision ----

TEST(DecisionTest, AdmittedDecisionIsOkWithoutAReason) {
  const Decision admitted;
  EXPECT_TRUE(admitted.admitted);
  EXPECT_THAT(admitted.ToStatus(), IsOk());
  EXPECT_EQ(ReasonOf(admitted.ToStatus()), RejectReason::kNone);
}

TEST(DecisionTest, RefusalIsResourceExhaustedCarryingReasonAndMessage) {
  const Decision refused{false, RejectReason::kTooManyArrays, "session holds 3 arrays"};
  const absl::Status status = refused.ToStatus();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, "session holds 3 arrays"));
  EXPECT_EQ(ReasonOf(status), RejectReason::kTooManyArrays);
}

// ---- AdmitSession ----

// A partition of 1000 bytes and compute share 0.5 in a daemon of at most 10 sessions, with
// nothing open yet.
SessionSnapshot RoomySession() {
  SessionSnapshot s;
  s.daemon_sessions = 0;
  s.max_sessions = 10;
  s.partition_sessions = 0;
  s.partition_max_sessions = 0;
  s.partition_memory_quota_bytes = 1000;
  s.partition_compute_share = 0.5;
  return s;
}

struct SessionCountCase {
  std::string name;
  int daemon_sessions;
  int max_sessions;
  int partition_sessions;
  int partition_max_sessions;
  bool admitted;
};

class AdmitSessionCountTest : public ::testing::TestWithParam<SessionCountCase> {};

TEST_P(AdmitSessionCountTest, AdmitsWhileBelowDaemonAndPartitionMaxSessions) {
  SessionSnapshot s = RoomySession();
  s.daemon_sessions = GetParam().daemon_sessions;
  s.max_sessions = GetParam().max_sessions;
  s.partition_sessions = GetParam().partition_sessions;
  s.partition_max_sessions = GetParam().partition_max_sessions;
  const Decision d = AdmitSession(s);
  EXPECT_EQ(d.admitted, GetParam().admitted);
  EXPECT_EQ(d.reason, GetParam().admitted ? RejectReason::kNone : RejectReason::kTooManySessions);
}

INSTANTIATE_TEST_SUITE_P(
    Table, AdmitSessionCountTest,
    ::testing::Values(SessionCountCase{"NoneOpen", 0, 2, 0, 0, true},
                      SessionCountCase{"OneBelowDaemonMax", 1, 2, 1, 0, true},
                      SessionCountCase{"AtDaemonMax", 2, 2, 0, 0, false},
                      SessionCountCase{"AboveDaemonMax", 5, 2, 0, 0, false},
                      SessionCountCase{"DaemonMaxZeroAdmitsNobody", 0, 0, 0, 0, false},
                      SessionCountCase{"PartitionMaxZeroMeansNoPartitionLimit", 9, 10, 9, 0, true},
                      SessionCountCase{"OneBelowPartitionMax", 1, 10, 1, 2, true},
                      SessionCountCase{"AtPartitionMax", 2, 10, 2, 2, false},
                      SessionCountCase{"AbovePartitionMax", 3, 10, 3, 2, false},
                      SessionCountCase{"DaemonMaxAppliesBesidePartitionMax", 10, 10, 1, 5, false}),
    CaseName<SessionCountCase>);

TEST(AdmitSessionTest, DaemonRefusalNamesTheCountAndMaxSessions) {
  SessionSnapshot s = RoomySession();
  s.daemon_sessions = 7;
  s.max_sessions = 7;
  const Decision d = AdmitSession(s);
  EXPECT_FALSE(d.admitted);
  EXPECT_THAT(d.message, AllOf(HasSubstr("7 open sessions"), HasSubstr("max_sessions")));
}

TEST(AdmitSessionTest, PartitionRefusalNamesTheCount) {
  SessionSnapshot s = RoomySession();
  s.partition_sessions = 3;
  s.partition_max_sessions = 3;
  const Decision d = AdmitSession(s);
  EXPECT_FALSE(d.admitted);
  EXPECT_THAT(d.message, AllOf(HasSubstr("partition"), HasSubstr("3 open sessions")));
}

struct SessionRequestCase {
  std::string name;
  ResourceSpec resources;
  int64_t memory_requested_bytes;  // by the partition's other sessions, of 1000
  double compute_requested;        // by the partition's other sessions, of 0.3
  bool admitted;
};

class AdmitSessionRequestTest : public ::testing::TestWithParam<SessionRequestCase> {};

TEST_P(AdmitSessionRequestTest, AdmitsWhileRequestsFitTheUnrequestedPartOfTheQuota) {
  SessionSnapshot s = RoomySession();
  s.resources = GetParam().resources;
  s.partition_memory_quota_bytes = 1000;
  s.partition_memory_requested_bytes = GetParam().memory_requested_bytes;
  s.partition_compute_share = 0.3;
  s.partition_compute_requested = GetParam().compute_requested;
  const Decision d = AdmitSession(s);
  EXPECT_EQ(d.admitted, GetParam().admitted) << d.message;
  EXPECT_EQ(d.reason,
            GetParam().admitted ? RejectReason::kNone : RejectReason::kPartitionQuotaExceeded);
}

INSTANTIATE_TEST_SUITE_P(
    Table, AdmitSessionRequestTest,
    ::testing::Values(
        SessionRequestCase{"NoRequestsFitAFullyRequestedPartition", {}, 1000, 0.3, true},
        SessionRequestCase{"MemoryRequestFitsExactly", {.memory_request_bytes = 400}, 600, 0, true},
        SessionRequestCase{
            "MemoryRequestOneByteOver", {.memory_request_bytes = 401}, 600, 0, false},
        SessionRequestCase{
            "MemoryRequestOfTheWholeQuota", {.memory_request_bytes = 1000}, 0, 0, true},
        SessionRequestCase{
            "MemoryLimitAloneDoesNotCount", {.memory_limit_bytes = 5000}, 600, 0, true},
        SessionRequestCase{"ComputeRequestFitsExactly", {.compute_request = 0.1}, 0, 0.2, true},
        SessionRequestCase{
            "PointOnePlusPointTwoOfPointThreeFits", {.compute_request = 0.2}, 0, 0.1, true},
        SessionRequestCase{"ComputeRequestOver", {.compute_request = 0.2}, 0, 0.2, false},
        SessionRequestCase{
            "ComputeRequestOverByOneThousandth", {.compute_request = 0.101}, 0, 0.2, false},
        SessionRequestCase{
            "OtherSessionsAlreadyOverTheQuota", {.memory_request_bytes = 1}, 1200, 0, false},
        SessionRequestCase{"MemoryFitsButComputeDoesNot",
                           {.memory_request_bytes = 100, .compute_request = 0.5},
                           0,
                           0,
                           false}),
    CaseName<SessionRequestCase>);

TEST(AdmitSessionTest, MemoryRefusalNamesTheRequestAndWhatIsLeft) {
  SessionSnapshot s = RoomySession();
  s.resources.memory_request_bytes = 401;
  s.partition_memory_quota_bytes = 1000;
  s.partition_memory_requested_bytes = 600;
  const Decision d = AdmitSession(s);
  EXPECT_FALSE(d.admitted);
  EXPECT_THAT(d.message, AllOf(HasSubstr("requests.memory = 401 B"), HasSubstr("1000 B"),
                               HasSubstr("has 400 B not requested")));
}

TEST(AdmitSessionTest, ComputeRefusalNamesTheRequestAndWhatIsLeft) {
  SessionSnapshot s = RoomySession();
  s.resources.compute_request = 0.5;
  s.partition_compute_share = 0.5;
  s.partition_compute_requested = 0.25;
  const Decision d = AdmitSession(s);
  EXPECT_FALSE(d.admitted);
  EXPECT_THAT(d.message, AllOf(HasSubstr("requests.compute = 0.5"),
                               HasSubstr("compute share of 0.5 has 0.25 not requested")));
}

// ---- AdmitAllocation ----

struct AllocationCase {
  std::string name;
  AllocationSnapshot snapshot;
  RejectReason reason;  // kNone: admitted
  int64_t shortfall_bytes = 0;
  bool shortfall_is_device_wide = false;
};

class AdmitAllocationTest : public ::testing::TestWithParam<AllocationCase> {};

TEST_P(AdmitAllocationTest, DecidesWithReasonAndShortfall) {
  const AllocationDecision d = AdmitAllocation(GetParam().snapshot);
  EXPECT_EQ(d.decision.admitted, GetParam().reason == RejectReason::kNone) << d.decision.message;
  EXPECT_EQ(d.decision.reason, GetParam().reason) << d.decision.message;
  EXPECT_EQ(d.shortfall_bytes, GetParam().shortfall_bytes);
  EXPECT_EQ(d.shortfall_is_device_wide, GetParam().shortfall_is_device_wide);
  if (d.decision.admitted) {
    EXPECT_THAT(d.decision.message, IsEmpty());
  }
}

// Every row starts from room everywhere (a 100-byte array; limits of 1000 bytes for the array,
// the session, the partition and the device) and changes what it is about.
AllocationSnapshot Roomy() {
  return {.bytes = 100,
          .max_array_bytes = 1000,
          .session_used_bytes = 0,
          .session_limit_bytes = 1000,
          .partition_used_bytes = 0,
          .partition_quota_bytes = 1000,
          .device_used_bytes = 0,
          .device_capacity_bytes = 1000};
}

template <typename Change>
AllocationSnapshot RoomyWith(Change change) {
  AllocationSnapshot s = Roomy();
  change(s);
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Table, AdmitAllocationTest,
    ::testing::Values(
        AllocationCase{"FitsEverywhere", Roomy(), RejectReason::kNone},
        AllocationCase{"FitsExactlyEverywhere", RoomyWith([](AllocationSnapshot& s) {
                         s.bytes = 400;
                         s.max_array_bytes = 400;
                         s.session_used_bytes = 600;
                         s.partition_used_bytes = 600;
                         s.device_used_bytes = 600;
                       }),
                       RejectReason::kNone},
        AllocationCase{"WithoutASessionLimitOnlyPartitionAndDeviceCount",
                       RoomyWith([](AllocationSnapshot& s) {
                         s.session_used_bytes = int64_t{1} << 40;
                         s.session_limit_bytes = std::nullopt;
                       }),
                       RejectReason::kNone},
        AllocationCase{"ArrayOneByteAboveMax",
                       RoomyWith([](AllocationSnapshot& s) { s.bytes = s.max_array_bytes + 1; }),
                       RejectReason::kArrayTooLarge},
        AllocationCase{"ArrayTooLargeBeatsEverything", RoomyWith([](AllocationSnapshot& s) {
                         s.bytes = 2000;
                         s.session_used_bytes = 1000;
                         s.partition_used_bytes = 1000;
                         s.device_used_bytes = 1000;
                       }),
                       RejectReason::kArrayTooLarge},
        AllocationCase{"SessionLimitOneByteOverHasNoShortfall",
                       RoomyWith([](AllocationSnapshot& s) { s.session_used_bytes = 901; }),
                       RejectReason::kSessionLimitExceeded},
        AllocationCase{"SessionLimitBeatsPartitionAndDevice", RoomyWith([](AllocationSnapshot& s) {
                         s.session_used_bytes = 1000;
                         s.partition_used_bytes = 1000;
                         s.device_used_bytes = 1000;
                       }),
                       RejectReason::kSessionLimitExceeded},
        AllocationCase{"PartitionQuotaOneByteOver",
                       RoomyWith([](AllocationSnapshot& s) { s.partition_used_bytes = 901; }),
                       RejectReason::kPartitionQuotaExceeded, 1, false},
        AllocationCase{"PartitionShortfallIsUsedPlusBytesMinusQuota",
                       RoomyWith([](AllocationSnapshot& s) {
                         s.bytes = 300;
                         s.partition_used_bytes = 900;
                       }),
                       RejectReason::kPartitionQuotaExceeded, 200, false},
        AllocationCase{"DeviceOneByteOver",
                       RoomyWith([](AllocationSnapshot& s) { s.device_used_bytes = 901; }),
                       RejectReason::kDeviceMemoryExhausted, 1, true},
        AllocationCase{"DeviceShortfallIsUsedPlusBytesMinusCapacity",
                       RoomyWith([](AllocationSnapshot& s) {
                         s.bytes = 300;
                         s.device_used_bytes = 950;
                       }),
                       RejectReason::kDeviceMemoryExhausted, 250, true},
        // The header's order: the device before the partition, so a daemon with one
        // partition over the whole device reports DEVICE_MEMORY_EXHAUSTED when full; the
        // shortfall is the partition's, so it reclaims its own memory first.
        AllocationCase{"DeviceBeatsPartitionWhenBothAreFull", RoomyWith([](AllocationSnapshot& s) {
                         s.partition_used_bytes = 1000;
                         s.device_used_bytes = 950;
                       }),
                       RejectReason::kDeviceMemoryExhausted, 100, false}),
    CaseName<AllocationCase>);

TEST(AdmitAllocationTest, ArrayTooLargeNamesTheSizeAndTheLimit) {
  const AllocationDecision d =
      AdmitAllocation(RoomyWith([](AllocationSnapshot& s) { s.bytes = 1001; }));
  EXPECT_THAT(d.decision.message,
              AllOf(HasSubstr("1001 bytes"), HasSubstr("limits.maxArraySize = 1000")));
}

TEST(AdmitAllocationTest, SessionLimitNamesTheLimit) {
  const AllocationDecision d = AdmitAllocation(RoomyWith([](AllocationSnapshot& s) {
    s.session_used_bytes = 450;
    s.session_limit_bytes = 500;
  }));
  EXPECT_THAT(d.decision.message,
              AllOf(HasSubstr("to 550 B"), HasSubstr("above its limits.memory = 500 B")));
}

TEST(AdmitAllocationTest, PartitionQuotaNamesUseAndQuota) {
  const AllocationDecision d =
      AdmitAllocation(RoomyWith([](AllocationSnapshot& s) { s.partition_used_bytes = 950; }));
  EXPECT_THAT(d.decision.message,
              AllOf(HasSubstr("partition"), HasSubstr("950 B of its quota of 1000 B")));
}

TEST(AdmitAllocationTest, DeviceExhaustedNamesUseAndCapacity) {
  const AllocationDecision d =
      AdmitAllocation(RoomyWith([](AllocationSnapshot& s) { s.device_used_bytes = 950; }));
  EXPECT_THAT(d.decision.message, AllOf(HasSubstr("device"), HasSubstr("950 B of 1000 B")));
}

TEST(AdmitAllocationTest, RefusalBecomesResourceExhaustedCarryingTheReason) {
  const AllocationDecision d =
      AdmitAllocation(RoomyWith([](AllocationSnapshot& s) { s.device_used_bytes = 950; }));
  const absl::Status status = d.decision.ToStatus();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, d.decision.message));
  EXPECT_EQ(ReasonOf(status), RejectReason::kDeviceMemoryExhausted);
}

// ---- AdmitTask ----

struct TaskCase {
  std::string name;
  int queued;
  int max_queued;
  bool admitted;
};

class AdmitTaskTest : public ::testing::TestWithParam<TaskCase> {};

TEST_P(AdmitTaskTest, AdmitsWhileTheQueueIsBelowMaxQueued) {
  const Decision d = AdmitTask(GetParam().queued, GetParam().max_queued, "inference");
  EXPECT_EQ(d.admitted, GetParam().admitted);
  EXPECT_EQ(d.reason, GetParam().admitted ? RejectReason::kNone : RejectReason::kQueueFull);
}

INSTANTIATE_TEST_SUITE_P(Table, AdmitTaskTest,
                         ::testing::Values(TaskCase{"EmptyQueue", 0, 1, true},
                                           TaskCase{"OneBelowMax", 1023, 1024, true},
                                           TaskCase{"AtMax", 1024, 1024, false},
                                           TaskCase{"AboveMax", 2000, 1024, false},
                                           TaskCase{"SingleSlotTaken", 1, 1, false}),
                         CaseName<TaskCase>);

TEST(AdmitTaskTest, QueueFullNamesThePartitionAndTheCount) {
  const Decision d = AdmitTask(16, 16, "inference");
  EXPECT_THAT(d.message, AllOf(HasSubstr("partition \"inference\""), HasSubstr("16 tasks queued")));
  const absl::Status status = d.ToStatus();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("16 tasks")));
  EXPECT_EQ(ReasonOf(status), RejectReason::kQueueFull);
}

}  // namespace
}  // namespace gpukit
