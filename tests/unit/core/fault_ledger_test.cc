// FaultLedger: faults named per device, and the doubling hold on a tenant whose work faults
// again and again (daemon/core/fault_ledger.h), on a FakeClock.
#include "daemon/core/fault_ledger.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

WorkFault Fault(const std::string& tenant, const std::string& kind = "fault") {
  return {.device = 0, .kind = kind, .error = "CUDA_ERROR_ILLEGAL_ADDRESS",
          .session_id = "s-1", .tenant = tenant, .work = "kernel oob"};
}

TEST(FaultLedgerTest, TheFirstFaultHoldsNobodyBack) {
  FakeClock clock;
  FaultLedger ledger(clock);
  ledger.Record(Fault("team-a"));
  GPUKIT_EXPECT_OK(ledger.CheckLaunch("team-a"));
  EXPECT_THAT(ledger.HeldBack(), IsEmpty());
  ASSERT_TRUE(ledger.LastFault(0).has_value());
  EXPECT_EQ(ledger.LastFault(0)->tenant, "team-a");
  EXPECT_EQ(ledger.LastFault(0)->time, clock.Now());
  EXPECT_FALSE(ledger.LastFault(1).has_value());
}

TEST(FaultLedgerTest, TheHoldDoublesWithEachFaultAndEnds) {
  FakeClock clock;
  FaultLedger ledger(clock);
  ledger.Record(Fault("team-a"));
  ledger.Record(Fault("team-a"));  // second: 1 s
  EXPECT_THAT(ledger.CheckLaunch("team-a"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("team-a"), HasSubstr("2 times"), HasSubstr("1s more"))));
  GPUKIT_EXPECT_OK(ledger.CheckLaunch("team-b"));  // others are not held
  EXPECT_THAT(ledger.HeldBack(), ElementsAre(StartsWith("team-a: 2 faults")));
  clock.Advance(absl::Milliseconds(999));
  EXPECT_FALSE(ledger.CheckLaunch("team-a").ok());
  clock.Advance(absl::Milliseconds(1));
  GPUKIT_EXPECT_OK(ledger.CheckLaunch("team-a"));
  ledger.Record(Fault("team-a"));  // third: 2 s
  clock.Advance(absl::Milliseconds(1999));
  EXPECT_FALSE(ledger.CheckLaunch("team-a").ok());
  clock.Advance(absl::Milliseconds(1));
  GPUKIT_EXPECT_OK(ledger.CheckLaunch("team-a"));
  ledger.Record(Fault("team-a"));  // fourth: 4 s
  clock.Advance(absl::Milliseconds(3999));
  EXPECT_FALSE(ledger.CheckLaunch("team-a").ok());
  clock.Advance(absl::Milliseconds(1));
  GPUKIT_EXPECT_OK(ledger.CheckLaunch("team-a"));
}

TEST(FaultLedgerTest, TheHoldIsCappedAndOldFaultsAreForgotten) {
  FakeClock clock;
  FaultLedger ledger(clock, {.window = absl::Minutes(10),
                             .first_hold = absl::Seconds(1),
                             .max_hold = absl::Seconds(5)});
  for (int i = 0; i < 10; ++i) ledger.Record(Fault("team-a"));
  clock.Advance(absl::Seconds(5) - absl::Milliseconds(1));
  EXPECT_FALSE(ledger.CheckLaunch("team-a").ok());  // capped at 5 s, not 2^8 s
  clock.Advance(absl::Milliseconds(1));
  GPUKIT_EXPECT_OK(ledger.CheckLaunch("team-a"));
  // Ten minutes later the faults are out of the window: one more is a first again.
  clock.Advance(absl::Minutes(10));
  ledger.Record(Fault("team-a"));
  GPUKIT_EXPECT_OK(ledger.CheckLaunch("team-a"));
}

TEST(FaultLedgerTest, AnExecutorThatDiedIsNamedButHeldAgainstNobody) {
  FakeClock clock;
  FaultLedger ledger(clock);
  for (int i = 0; i < 3; ++i) ledger.Record(Fault("team-a", "exited"));
  GPUKIT_EXPECT_OK(ledger.CheckLaunch("team-a"));
  ASSERT_TRUE(ledger.LastFault(0).has_value());
  EXPECT_EQ(ledger.LastFault(0)->kind, "exited");
  EXPECT_EQ(ledger.LastFault(0)->work, "kernel oob");
}

TEST(FaultLedgerTest, HangsCountLikeFaults) {
  FakeClock clock;
  FaultLedger ledger(clock);
  ledger.Record(Fault("team-a", "hang"));
  ledger.Record(Fault("team-a", "fault"));
  EXPECT_THAT(ledger.CheckLaunch("team-a"), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace gpukit
