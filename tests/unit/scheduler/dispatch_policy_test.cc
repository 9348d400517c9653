// The dispatch policy (daemon/scheduler/dispatch_policy.h): literal snapshots of a device
// and the decision each must get, one row per rule and per ordering between two rules.
// Unless a row says otherwise the candidate is partitions[0], "a", a BestEffort head task,
// and every bucket is positive (a ready_at at or before `now`).
#include "daemon/scheduler/dispatch_policy.h"

#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace gpukit {

void PrintTo(DispatchReason reason, std::ostream* os) { *os << DispatchReasonName(reason); }

namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);
constexpr absl::Duration kUs = absl::Microseconds(1);
constexpr absl::Duration kMs = absl::Milliseconds(1);
constexpr absl::Time kNever = absl::InfiniteFuture();

constexpr QosClass kG = QosClass::kGuaranteed;
constexpr QosClass kBu = QosClass::kBurstable;
constexpr QosClass kBE = QosClass::kBestEffort;

struct Row {
  std::string name;
  DispatchSnapshot snapshot;
  bool admit;
  DispatchReason reason;
  absl::Time ready_at;
};

void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

// A snapshot at kNow with the default limits (BestEffort bound 1 ms, Burstable 4 ms,
// anticipation 250 us). in_flight and in_flight_estimate are {Guaranteed, Burstable,
// BestEffort}.
DispatchSnapshot Device(std::vector<DispatchPartition> partitions, QosClass qos = kBE,
                        std::array<int, kQosClassCount> in_flight = {},
                        std::array<absl::Duration, kQosClassCount> estimates = {},
                        size_t candidate = 0) {
  DispatchSnapshot s;
  s.now = kNow;
  s.in_flight = in_flight;
  s.in_flight_estimate = estimates;
  s.partitions = std::move(partitions);
  s.candidate = candidate;
  s.qos = qos;
  return s;
}

const std::vector<Row>& Rows() {
  static const auto* rows = new std::vector<Row>{
      // ---- Rule 5: nothing holds it.
      {"AdmitsOnAnIdleDevice", Device({{.name = "a", .max_running_tasks = 4}}), true,
       DispatchReason::kAdmit, kNever},

      // ---- Rule 1: slots.
      {"WaitsForASlotWhenThePartitionRunsItsMaximum",
       Device({{.name = "a", .running = 4, .max_running_tasks = 4}}, kBE, {0, 0, 4}), false,
       DispatchReason::kNoRunningSlot, kNever},
      {"AGuaranteedTaskWaitsForASlotToo",
       Device({{.name = "a", .running = 1, .max_running_tasks = 1}}, kG, {1, 0, 0}), false,
       DispatchReason::kNoRunningSlot, kNever},
      {"SlotComesBeforeTheInFlightBound",
       Device({{.name = "a", .running = 2, .max_running_tasks = 2}}, kBE, {1, 0, 2},
              {0 * kMs, 0 * kMs, 5 * kMs}),
       false, DispatchReason::kNoRunningSlot, kNever},
      {"SlotComesBeforeTheCap",
       Device({{.name = "a",
                .running = 1,
                .max_running_tasks = 1,
                .capped = true,
                .cap_ready_at = kNow + 5 * kMs}},
              kBE, {0, 0, 1}),
       false, DispatchReason::kNoRunningSlot, kNever},

      // ---- Rule 2: in-flight bounds.
      {"BestEffortAtItsBoundWaitsWhileGuaranteedRuns",
       Device({{.name = "a", .running = 1, .max_running_tasks = 4}}, kBE, {1, 0, 1},
              {0 * kMs, 0 * kMs, 1 * kMs}),
       false, DispatchReason::kInFlightBound, kNever},
      {"BestEffortBelowItsBoundGoes",
       Device({{.name = "a", .running = 1, .max_running_tasks = 4}}, kBE, {1, 0, 1},
              {0 * kMs, 0 * kMs, 999 * kUs}),
       true, DispatchReason::kAdmit, kNever},
      {"WithNoneOfItsClassInFlightOneAlwaysGoes",  // the count decides, not the sum
       Device({{.name = "a", .max_running_tasks = 4}}, kBE, {1, 0, 0}, {0 * kMs, 0 * kMs, 5 * kMs}),
       true, DispatchReason::kAdmit, kNever},
      {"WithoutGuaranteedWorkThereIsNoBound",
       Device({{.name = "a", .running = 3, .max_running_tasks = 4}}, kBE, {0, 0, 3},
              {0 * kMs, 0 * kMs, 50 * kMs}),
       true, DispatchReason::kAdmit, kNever},
      {"QueuedGuaranteedWorkActivatesTheBound",
       Device({{.name = "a", .running = 1, .max_running_tasks = 4},
               {.name = "g", .queued = 1, .guaranteed_queued = 1}},
              kBE, {0, 0, 1}, {0 * kMs, 0 * kMs, 2 * kMs}),
       false, DispatchReason::kInFlightBound, kNever},
      {"GuaranteedWorkHeldByItsOwnCapDoesNotActivateTheBound",
       Device({{.name = "a", .running = 1, .max_running_tasks = 4},
               {.name = "g",
                .queued = 1,
                .guaranteed_queued = 1,
                .capped = true,
                .cap_ready_at = kNow + 1 * kMs}},
              kBE, {0, 0, 1}, {0 * kMs, 0 * kMs, 2 * kMs}),
       true, DispatchReason::kAdmit, kNever},
      {"AGuaranteedTaskIsNeverBounded",
       Device({{.name = "a", .running = 6, .max_running_tasks = 8}}, kG, {1, 0, 5},
              {1 * kMs, 0 * kMs, 50 * kMs}),
       true, DispatchReason::kAdmit, kNever},
      {"BurstableBelowItsOwnLargerBoundGoes",
       Device({{.name = "a", .running = 2, .max_running_tasks = 4}}, kBu, {1, 2, 0},
              {0 * kMs, 2 * kMs, 0 * kMs}),
       true, DispatchReason::kAdmit, kNever},
      {"BurstableAtItsBoundWaits",
       Device({{.name = "a", .running = 2, .max_running_tasks = 4}}, kBu, {1, 2, 0},
              {0 * kMs, 4 * kMs, 0 * kMs}),
       false, DispatchReason::kInFlightBound, kNever},
      {"BurstableIsNotBoundedByBestEffortWork",
       Device({{.name = "a", .running = 5, .max_running_tasks = 8}}, kBu, {1, 0, 5},
              {0 * kMs, 0 * kMs, 10 * kMs}),
       true, DispatchReason::kAdmit, kNever},
      {"BoundComesBeforeTheCap",
       Device({{.name = "a",
                .running = 1,
                .max_running_tasks = 4,
                .capped = true,
                .cap_ready_at = kNow + 5 * kMs}},
              kBE, {1, 0, 1}, {0 * kMs, 0 * kMs, 1 * kMs}),
       false, DispatchReason::kInFlightBound, kNever},

      {"BoundComesBeforeTheShare",
       Device(
           {{.name = "a", .running = 1, .max_running_tasks = 4, .share_ready_at = kNow + 3 * kMs},
            {.name = "b", .running = 1}},
           kBE, {1, 0, 1}, {0 * kMs, 0 * kMs, 1 * kMs}),
       false, DispatchReason::kInFlightBound, kNever},

      // ---- Rule 3: the bandwidth cap.
      {"CapHoldsEvenOnAnIdleDevice",
       Device({{.name = "a", .capped = true, .cap_ready_at = kNow + 5 * kMs}}), false,
       DispatchReason::kBandwidthCap, kNow + 5 * kMs},
      {"CapReadyNowGoes", Device({{.name = "a", .capped = true, .cap_ready_at = kNow}}), true,
       DispatchReason::kAdmit, kNever},
      {"AnUncappedPartitionIgnoresItsCapBucket",
       Device({{.name = "a", .capped = false, .cap_ready_at = kNow + 5 * kMs}}), true,
       DispatchReason::kAdmit, kNever},
      {"CapComesBeforeTheShare",
       Device({{.name = "a",
                .capped = true,
                .cap_ready_at = kNow + 5 * kMs,
                .share_ready_at = kNow + 2 * kMs},
               {.name = "b", .running = 1}},
              kBE, {0, 0, 1}),
       false, DispatchReason::kBandwidthCap, kNow + 5 * kMs},

      // ---- Rule 4: the share.
      {"ShareDebtAloneOnTheDeviceGoes",  // work-conserving
       Device(
           {{.name = "a", .running = 1, .max_running_tasks = 4, .share_ready_at = kNow + 3 * kMs}},
           kBE, {0, 0, 1}),
       true, DispatchReason::kAdmit, kNever},
      {"ShareInCreditDoesNotYield",
       Device({{.name = "a"}, {.name = "b", .running = 1, .queued = 3}}, kBE, {0, 0, 1}), true,
       DispatchReason::kAdmit, kNever},
      {"ShareDebtYieldsToAnotherPartitionsWorkInFlight",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs}, {.name = "b", .running = 1}}, kBE,
              {0, 0, 1}),
       false, DispatchReason::kYieldsToInFlight, kNow + 3 * kMs},
      {"AGuaranteedTaskYieldsOnlyItsOwnPartitionsDebt",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs}, {.name = "b", .running = 1}}, kG,
              {0, 0, 1}),
       false, DispatchReason::kYieldsToInFlight, kNow + 3 * kMs},
      {"AnotherPartitionInDebtHoldsNothing",
       Device({{.name = "a"}, {.name = "b", .running = 1, .share_ready_at = kNow + 9 * kMs}}, kG,
              {0, 0, 1}),
       true, DispatchReason::kAdmit, kNever},
      {"WorkInFlightIsAClaimBeforeARecentFinish",  // one partition with both
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "b", .running = 1, .last_finish = kNow - 100 * kUs}},
              kBE, {0, 0, 1}),
       false, DispatchReason::kYieldsToInFlight, kNow + 3 * kMs},
      {"ShareDebtYieldsToARecentFinishUntilItLapses",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "b", .last_finish = kNow - 100 * kUs}}),
       false, DispatchReason::kYieldsToAnticipated, kNow + 150 * kUs},
      {"AnticipationWaitEndsWhenTheShareRefillsFirst",
       Device({{.name = "a", .share_ready_at = kNow + 100 * kUs},
               {.name = "b", .last_finish = kNow - 100 * kUs}}),
       false, DispatchReason::kYieldsToAnticipated, kNow + 100 * kUs},
      {"AnticipationHasLapsedAtItsEnd",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "b", .last_finish = kNow - 250 * kUs}}),
       true, DispatchReason::kAdmit, kNever},
      {"ARecentFinishWithWorkQueuedIsNotAnticipation",  // rule 4d decides: a is nearer
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "b",
                .queued = 1,
                .share_ready_at = kNow + 4 * kMs,
                .last_finish = kNow - 100 * kUs}}),
       true, DispatchReason::kAdmit, kNever},
      {"AnIdlePartitionHasNoClaim",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs}, {.name = "b"}}), true,
       DispatchReason::kAdmit, kNever},
      {"ShareDebtYieldsToQueuedWorkOnABusyDevice",  // however far b is from repaying
       Device(
           {{.name = "a", .running = 1, .max_running_tasks = 4, .share_ready_at = kNow + 3 * kMs},
            {.name = "b", .queued = 2, .share_ready_at = kNow + 10 * kMs}},
           kBE, {0, 0, 1}),
       false, DispatchReason::kYieldsToQueued, kNow + 3 * kMs},
      {"QueuedWorkHeldByItsOwnCapIsNoClaim",
       Device(
           {{.name = "a", .running = 1, .max_running_tasks = 4, .share_ready_at = kNow + 3 * kMs},
            {.name = "b", .queued = 2, .capped = true, .cap_ready_at = kNow + 1 * kMs}},
           kBE, {0, 0, 1}),
       true, DispatchReason::kAdmit, kNever},
      {"OnAnIdleDeviceThePartitionNearerToRepayingGoesFirst",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "b", .queued = 1, .share_ready_at = kNow + 1 * kMs}}),
       false, DispatchReason::kYieldsToNearer, kNow + 3 * kMs},
      {"OnAnIdleDeviceTheCandidateNearerToRepayingGoes",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "b", .queued = 1, .share_ready_at = kNow + 5 * kMs}}),
       true, DispatchReason::kAdmit, kNever},
      {"OnAnIdleDeviceAnotherInCreditIsNearer",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs}, {.name = "b", .queued = 1}}), false,
       DispatchReason::kYieldsToNearer, kNow + 3 * kMs},
      {"AnEqualRepaymentGoesToTheSmallerName",
       Device({{.name = "m", .share_ready_at = kNow + 3 * kMs},
               {.name = "k", .queued = 1, .share_ready_at = kNow + 3 * kMs}}),
       false, DispatchReason::kYieldsToNearer, kNow + 3 * kMs},
      {"AnEqualRepaymentLetsTheSmallerNameGo",
       Device({{.name = "k", .share_ready_at = kNow + 3 * kMs},
               {.name = "m", .queued = 1, .share_ready_at = kNow + 3 * kMs}}),
       true, DispatchReason::kAdmit, kNever},
      {"TheCandidateNeedNotComeFirst",
       Device({{.name = "b", .running = 1}, {.name = "a", .share_ready_at = kNow + 3 * kMs}}, kBE,
              {0, 0, 1}, {}, /*candidate=*/1),
       false, DispatchReason::kYieldsToInFlight, kNow + 3 * kMs},
      // Reserved SMs: a partition whose streams run on SMs of its own neither yields for
      // its share nor holds anyone back with its own work.
      {"AReservedDebtorGoesBesideOthersWorkInFlight",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs, .reserved_sms = true},
               {.name = "b", .running = 1, .queued = 2}},
              kBE, {0, 0, 1}),
       true, DispatchReason::kAdmit, kNever},
      {"AReservedPartitionsWorkInFlightIsNoClaim",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "b", .running = 1, .queued = 2, .reserved_sms = true}},
              kBE, {0, 0, 1}),
       true, DispatchReason::kAdmit, kNever},
      {"AReservedPartitionsRecentFinishIsNoClaim",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "b", .last_finish = kNow - 100 * kUs, .reserved_sms = true}}),
       true, DispatchReason::kAdmit, kNever},
      // b's queued work claims the shared SMs: they are idle (only reserved c runs), so the
      // partition nearer to repaying goes first, as on an idle device.
      {"WorkOnReservedSmsLeavesTheSharedOnesIdle",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "b", .queued = 1, .share_ready_at = kNow + 5 * kMs},
               {.name = "c", .running = 2, .reserved_sms = true}},
              kBE, {0, 0, 2}),
       true, DispatchReason::kAdmit, kNever},
      {"SharedPartitionsStillYieldToEachOtherBesideAReservedOne",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "c", .running = 2, .reserved_sms = true},
               {.name = "b", .running = 1}},
              kBE, {0, 0, 3}),
       false, DispatchReason::kYieldsToInFlight, kNow + 3 * kMs},

      // Which claim is reported is the first in the snapshot's order; the wait is the same.
      {"FirstClaimInOrderIsReportedAnticipationFirst",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "b", .last_finish = kNow - 100 * kUs},
               {.name = "c", .running = 1}},
              kBE, {0, 0, 1}),
       false, DispatchReason::kYieldsToAnticipated, kNow + 150 * kUs},
      {"FirstClaimInOrderIsReportedInFlightFirst",
       Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
               {.name = "c", .running = 1},
               {.name = "b", .last_finish = kNow - 100 * kUs}},
              kBE, {0, 0, 1}),
       false, DispatchReason::kYieldsToInFlight, kNow + 3 * kMs},
  };
  return *rows;
}

class DispatchPolicyTest : public ::testing::TestWithParam<Row> {};

TEST_P(DispatchPolicyTest, DecidesAsTheRowSays) {
  const Row& row = GetParam();
  const DispatchDecision d = DecideDispatch(row.snapshot);
  EXPECT_EQ(d.admit, row.admit);
  EXPECT_EQ(d.reason, row.reason);
  EXPECT_EQ(d.ready_at, row.ready_at) << "ready " << (d.ready_at - kNow) << " after now";
}

INSTANTIATE_TEST_SUITE_P(Rows, DispatchPolicyTest, ::testing::ValuesIn(Rows()),
                         [](const ::testing::TestParamInfo<Row>& info) { return info.param.name; });

// Rows name every reason, so every rule is covered.
TEST(DispatchPolicyRowsTest, CoverEveryReasonAsBothAnswers) {
  std::set<DispatchReason> seen;
  bool admitted = false;
  bool waited = false;
  for (const Row& row : Rows()) {
    seen.insert(row.reason);
    admitted = admitted || row.admit;
    waited = waited || !row.admit;
  }
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_TRUE(admitted);
  EXPECT_TRUE(waited);
}

TEST(DispatchDecisionTest, OnlyTheCapAndTheShareArePacing) {
  EXPECT_FALSE(DispatchDecision{}.paced());
  EXPECT_FALSE((DispatchDecision{false, DispatchReason::kNoRunningSlot}.paced()));
  EXPECT_FALSE((DispatchDecision{false, DispatchReason::kInFlightBound}.paced()));
  EXPECT_TRUE((DispatchDecision{false, DispatchReason::kBandwidthCap}.paced()));
  EXPECT_TRUE((DispatchDecision{false, DispatchReason::kYieldsToInFlight}.paced()));
  EXPECT_TRUE((DispatchDecision{false, DispatchReason::kYieldsToAnticipated}.paced()));
  EXPECT_TRUE((DispatchDecision{false, DispatchReason::kYieldsToQueued}.paced()));
  EXPECT_TRUE((DispatchDecision{false, DispatchReason::kYieldsToNearer}.paced()));
}

TEST(DispatchLimitsTest, DefaultsAreTheSchedulersAndBurstableHasItsOwnBound) {
  const DispatchLimits limits;
  EXPECT_EQ(limits.InFlightBound(kBE), absl::Milliseconds(1));
  EXPECT_EQ(limits.InFlightBound(kBu), absl::Milliseconds(4));
  EXPECT_EQ(limits.InFlightBound(kG), absl::Milliseconds(1));
  EXPECT_EQ(limits.pacing_anticipation, absl::Microseconds(250));
}

TEST(DispatchLimitsTest, LimitsComeFromTheSnapshot) {
  // The 1 ms BestEffort row, with the bound raised to 2 ms: now below it.
  DispatchSnapshot s = Device({{.name = "a", .running = 1, .max_running_tasks = 4}}, kBE, {1, 0, 1},
                              {0 * kMs, 0 * kMs, 1 * kMs});
  EXPECT_FALSE(DecideDispatch(s).admit);
  s.limits.best_effort_in_flight = 2 * kMs;
  EXPECT_TRUE(DecideDispatch(s).admit);
  // And a longer anticipation keeps a finish 300 us ago as a claim.
  DispatchSnapshot t = Device({{.name = "a", .share_ready_at = kNow + 3 * kMs},
                               {.name = "b", .last_finish = kNow - 300 * kUs}});
  EXPECT_TRUE(DecideDispatch(t).admit);
  t.limits.pacing_anticipation = 1 * kMs;
  const DispatchDecision d = DecideDispatch(t);
  EXPECT_EQ(d.reason, DispatchReason::kYieldsToAnticipated);
  EXPECT_EQ(d.ready_at, kNow + 700 * kUs);
}

TEST(DispatchReasonNameTest, NamesAreDistinct) {
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(DispatchReason::kYieldsToNearer); ++i) {
    names.insert(std::string(DispatchReasonName(static_cast<DispatchReason>(i))));
  }
  EXPECT_EQ(names.size(), 8u);
}

}  // namespace
}  // namespace gpukit
