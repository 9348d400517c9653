// Pacing in device time (daemon/scheduler/token_bucket.h). Time is a FakeClock.
#include "daemon/scheduler/token_bucket.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/scheduler/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"

namespace gpukit {
namespace {

constexpr absl::Duration kBurst = absl::Milliseconds(50);

int64_t Ns(absl::Duration d) { return absl::ToInt64Nanoseconds(d); }

TEST(TokenBucketTest, StartsFull) {
  FakeClock clock;
  TokenBucket bucket(0.25, kBurst, clock.Now());
  EXPECT_TRUE(bucket.Ready(clock.Now()));
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), Ns(kBurst));
  EXPECT_EQ(bucket.ReadyAt(clock.Now()), clock.Now());
}

TEST(TokenBucketTest, ChargeWithinTheBalanceLeavesItReady) {
  FakeClock clock;
  TokenBucket bucket(0.25, kBurst, clock.Now());
  bucket.Charge(absl::Milliseconds(10));
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), Ns(absl::Milliseconds(40)));
  EXPECT_TRUE(bucket.Ready(clock.Now()));
}

TEST(TokenBucketTest, ChargeLargerThanBurstPutsItInDebt) {
  FakeClock clock;
  TokenBucket bucket(0.25, kBurst, clock.Now());
  bucket.Charge(absl::Milliseconds(80));
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), -Ns(absl::Milliseconds(30)));
  EXPECT_FALSE(bucket.Ready(clock.Now()));
  EXPECT_GT(bucket.ReadyAt(clock.Now()), clock.Now());
}

TEST(TokenBucketTest, LimitDebtForgivesOnlyDebtBeyondTheLimit) {
  FakeClock clock;
  TokenBucket bucket(0.25, kBurst, clock.Now());
  bucket.Charge(absl::Milliseconds(130));  // -80 ms
  bucket.LimitDebt(absl::Milliseconds(100));
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), -Ns(absl::Milliseconds(80))) << "within the limit";
  bucket.LimitDebt(absl::Milliseconds(30));
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), -Ns(absl::Milliseconds(30)));
  clock.Advance(absl::Milliseconds(200));  // repaid at 0.25: +50 ms
  bucket.LimitDebt(absl::Milliseconds(30));
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), Ns(absl::Milliseconds(20))) << "credit is untouched";
}

TEST(TokenBucketTest, AnEmptyBalanceIsNotReady) {
  // Work may start only while the balance is positive.
  FakeClock clock;
  TokenBucket bucket(0.25, kBurst, clock.Now());
  bucket.Charge(kBurst);
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), 0);
  EXPECT_FALSE(bucket.Ready(clock.Now()));
}

TEST(TokenBucketTest, AccruesAtItsRate) {
  FakeClock clock;
  TokenBucket bucket(0.25, kBurst, clock.Now());
  bucket.Charge(kBurst);
  clock.Advance(absl::Milliseconds(10));
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), Ns(absl::Microseconds(2500)));
}

TEST(TokenBucketTest, AccrualIsCappedAtBurst) {
  FakeClock clock;
  TokenBucket bucket(1.0, kBurst, clock.Now());
  clock.Advance(absl::Hours(1));
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), Ns(kBurst));

  bucket.Charge(absl::Milliseconds(10));
  clock.Advance(absl::Hours(1));
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), Ns(kBurst));
  // A long idle spell does not bank more than one burst.
  bucket.Charge(kBurst);
  EXPECT_FALSE(bucket.Ready(clock.Now()));
}

TEST(TokenBucketTest, SettleChargesWhatWasUsedBeyondTheEstimate) {
  FakeClock clock;
  TokenBucket bucket(0.25, kBurst, clock.Now());
  bucket.Charge(absl::Milliseconds(10));
  bucket.Settle(absl::Milliseconds(10), absl::Milliseconds(70));  // 50 - 70
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), -Ns(absl::Milliseconds(20)));
}

TEST(TokenBucketTest, SettleGivesBackWhatWasNotUsedUpToTheBurst) {
  FakeClock clock;
  TokenBucket bucket(0.25, kBurst, clock.Now());
  bucket.Charge(absl::Milliseconds(80));
  bucket.Settle(absl::Milliseconds(80), absl::Milliseconds(20));
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), Ns(absl::Milliseconds(30)));
  bucket.Charge(absl::Milliseconds(10));
  clock.Advance(absl::Milliseconds(200));  // refills to the burst meanwhile
  bucket.BalanceNs(clock.Now());
  bucket.Settle(absl::Milliseconds(10), absl::ZeroDuration());
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), Ns(kBurst)) << "a refund never banks past the burst";
}

TEST(TokenBucketTest, RateChangeAppliesFromNow) {
  FakeClock clock;
  TokenBucket bucket(0.5, kBurst, clock.Now());
  bucket.Charge(kBurst + absl::Milliseconds(10));  // 10 ms in debt
  clock.Advance(absl::Milliseconds(10));           // repays 5 ms at the old rate
  bucket.SetRate(0.25, clock.Now());
  EXPECT_EQ(bucket.rate(), 0.25);
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), -Ns(absl::Milliseconds(5)));
  clock.Advance(absl::Milliseconds(4));  // repays 1 ms at the new rate
  EXPECT_EQ(bucket.BalanceNs(clock.Now()), -Ns(absl::Milliseconds(4)));
  EXPECT_EQ(bucket.ReadyAt(clock.Now()),
            clock.Now() + absl::Milliseconds(16) + absl::Nanoseconds(1));
}

TEST(TokenBucketTest, RaisingTheRateShortensTheWait) {
  FakeClock clock;
  TokenBucket bucket(0.1, kBurst, clock.Now());
  bucket.Charge(kBurst + absl::Milliseconds(10));
  clock.Advance(absl::Milliseconds(10));  // repays 1 ms
  bucket.SetRate(1.0, clock.Now());
  EXPECT_EQ(bucket.ReadyAt(clock.Now()),
            clock.Now() + absl::Milliseconds(9) + absl::Nanoseconds(1));
}

// ---- ReadyAt is exact ----

struct ReadyAtCase {
  std::string name;
  double rate;
  absl::Duration debt;  // below zero, after draining the burst
};

class TokenBucketReadyAtTest : public ::testing::TestWithParam<ReadyAtCase> {};

TEST_P(TokenBucketReadyAtTest, IsTheFirstNanosecondTheBalanceIsPositive) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  TokenBucket bucket(GetParam().rate, kBurst, start);
  bucket.Charge(kBurst + GetParam().debt);
  const absl::Time ready_at = bucket.ReadyAt(start);
  ASSERT_GT(ready_at, start);
  // The wait is the debt repaid at the rate, to within the nanosecond that makes it positive.
  EXPECT_NEAR(absl::ToDoubleNanoseconds(ready_at - start),
              absl::ToDoubleNanoseconds(GetParam().debt) / GetParam().rate, 1.0);

  TokenBucket just_before = bucket;
  EXPECT_FALSE(just_before.Ready(ready_at - absl::Nanoseconds(1)))
      << "balance then " << just_before.BalanceNs(ready_at - absl::Nanoseconds(1));
  EXPECT_TRUE(bucket.Ready(ready_at)) << "balance then " << bucket.BalanceNs(ready_at);
  EXPECT_EQ(bucket.ReadyAt(ready_at), ready_at);
}

INSTANTIATE_TEST_SUITE_P(
    Table, TokenBucketReadyAtTest,
    ::testing::Values(ReadyAtCase{"ExactlyDrained", 0.5, absl::ZeroDuration()},
                      ReadyAtCase{"QuarterRateWholeNanoseconds", 0.25, absl::Milliseconds(1)},
                      ReadyAtCase{"ThreeTenthsRate", 0.3, absl::Milliseconds(1)},
                      ReadyAtCase{"OneThirdRate", 1.0 / 3, absl::Milliseconds(1)},
                      ReadyAtCase{"SevenTenthsRate", 0.7, absl::Milliseconds(1)},
                      ReadyAtCase{"OneTenthRateOddDebt", 0.1, absl::Nanoseconds(123457)},
                      ReadyAtCase{"FullRateOneNanosecond", 1.0, absl::Nanoseconds(1)},
                      ReadyAtCase{"SmallRateFewNanoseconds", 0.05, absl::Nanoseconds(7)},
                      ReadyAtCase{"LongDebt", 0.37, absl::Seconds(3)}),
    [](const ::testing::TestParamInfo<ReadyAtCase>& info) { return info.param.name; });

// ---- Property: device time over any window ----

TEST(TokenBucketPropertyTest, ChargesInAnyWindowStayWithinRateTimesWindowPlusBurstPlusOneTask) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };

  int waits = 0;  // steps at which the bucket held work back
  for (int round = 0; round < 20; ++round) {
    const double rate = std::uniform_real_distribution<double>(0.05, 1.0)(rng);
    const absl::Duration burst = absl::Microseconds(uniform(1, 50'000));
    const int64_t max_charge_ns = uniform(1, 30'000'000);
    SCOPED_TRACE(::testing::Message() << "round " << round << ": rate " << rate << ", burst "
                                      << burst << ", charges up to " << max_charge_ns << " ns");

    // A partition that starts a task whenever the bucket is ready and is charged for it at
    // once (the most it can take); sometimes several at one instant.
    FakeClock clock;
    const absl::Time start = clock.Now();
    TokenBucket bucket(rate, burst, start);
    std::vector<int64_t> at_ns;      // when each charge happened, since start
    std::vector<int64_t> charge_ns;  // how much it was
    int64_t largest_ns = 0;
    for (int step = 0; step < 1500; ++step) {
      if (uniform(0, 3) != 0) clock.Advance(absl::Nanoseconds(uniform(0, 5'000'000)));
      if (!bucket.Ready(clock.Now())) {
        ++waits;
        continue;
      }
      const int64_t charge = uniform(0, max_charge_ns);
      bucket.Charge(absl::Nanoseconds(charge));
      at_ns.push_back(absl::ToInt64Nanoseconds(clock.Now() - start));
      charge_ns.push_back(charge);
      largest_ns = std::max(largest_ns, charge);
    }
    ASSERT_FALSE(at_ns.empty());

    // The worst windows begin and end at charges: check all of them.
    std::vector<int64_t> prefix(charge_ns.size() + 1, 0);
    for (size_t i = 0; i < charge_ns.size(); ++i) prefix[i + 1] = prefix[i] + charge_ns[i];
    const double burst_ns = absl::ToDoubleNanoseconds(burst);
    for (size_t i = 0; i < at_ns.size(); ++i) {
      // Charges at the same instant as i's belong to any window that starts then.
      size_t first = i;
      while (first > 0 && at_ns[first - 1] == at_ns[i]) --first;
      for (size_t j = i; j < at_ns.size(); ++j) {
        const int64_t window_ns = at_ns[j] - at_ns[i];
        const int64_t charged_ns = prefix[j + 1] - prefix[first];
        const double bound_ns = rate * static_cast<double>(window_ns) + burst_ns +
                                static_cast<double>(largest_ns) + 1.0;
        ASSERT_LE(static_cast<double>(charged_ns), bound_ns)
            << "window [" << at_ns[i] << ", " << at_ns[j] << "] ns";
      }
    }
  }
  EXPECT_GT(waits, 0) << "the random cases never paced anything: the test is too weak";
}

}  // namespace
}  // namespace gpukit
