// Admission policy and the memory ledger (daemon/scheduler/admission.h).
#include "daemon/scheduler/admission.h"

#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr RejectReason kAllReasons[] = {
    RejectReason::kNone, RejectReason::kDeviceMemoryExhausted, RejectReason::kArrayTooLarge,
    RejectReason::kTooManySessions, RejectReason::kTooManyArrays};

// ---- Reasons ----

TEST(RejectReasonTest, NamesMatchTheProtoEnum) {
  EXPECT_EQ(RejectReasonName(RejectReason::kNone), "REASON_UNSPECIFIED");
  EXPECT_EQ(RejectReasonName(RejectReason::kDeviceMemoryExhausted),
            "REASON_DEVICE_MEMORY_EXHAUSTED");
  EXPECT_EQ(RejectReasonName(RejectReason::kArrayTooLarge), "REASON_ARRAY_TOO_LARGE");
  EXPECT_EQ(RejectReasonName(RejectReason::kTooManySessions), "REASON_TOO_MANY_SESSIONS");
  EXPECT_EQ(RejectReasonName(RejectReason::kTooManyArrays), "REASON_TOO_MANY_ARRAYS");
}

class ReasonRoundTripTest : public ::testing::TestWithParam<RejectReason> {};

TEST_P(ReasonRoundTripTest, WithReasonIsReadBackByReasonOfKeepingCodeAndMessage) {
  const absl::Status status =
      WithReason(absl::ResourceExhaustedError("no room for 42 bytes"), GetParam());
  EXPECT_EQ(ReasonOf(status), GetParam());
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, "no room for 42 bytes"));
}

TEST_P(ReasonRoundTripTest, SurvivesCopyingTheStatus) {
  const absl::Status original = WithReason(absl::InternalError("x"), GetParam());
  absl::Status copy = original;
  const absl::Status moved = std::move(copy);
  EXPECT_EQ(ReasonOf(moved), GetParam());
}

INSTANTIATE_TEST_SUITE_P(AllReasons, ReasonRoundTripTest, ::testing::ValuesIn(kAllReasons),
                         [](const ::testing::TestParamInfo<RejectReason>& info) {
                           return std::string(RejectReasonName(info.param));
                         });

TEST(ReasonOfTest, StatusWithoutAReasonHasNone) {
  EXPECT_EQ(ReasonOf(absl::OkStatus()), RejectReason::kNone);
  EXPECT_EQ(ReasonOf(absl::ResourceExhaustedError("plain")), RejectReason::kNone);
}

TEST(ReasonOfTest, AReasonCannotBeAttachedToOk) {
  // absl drops payloads on OK: an OK status never carries a rejection.
  const absl::Status status = WithReason(absl::OkStatus(), RejectReason::kArrayTooLarge);
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(ReasonOf(status), RejectReason::kNone);
}

TEST(ReasonOfTest, TheLastReasonAttachedWins) {
  const absl::Status status =
      WithReason(WithReason(absl::ResourceExhaustedError("x"), RejectReason::kArrayTooLarge),
                 RejectReason::kTooManyArrays);
  EXPECT_EQ(ReasonOf(status), RejectReason::kTooManyArrays);
}

// ---- Decision ----

TEST(DecisionTest, AdmittedDecisionIsOk) {
  EXPECT_THAT(Decision{}.ToStatus(), IsOk());
  EXPECT_EQ(ReasonOf(Decision{}.ToStatus()), RejectReason::kNone);
}

TEST(DecisionTest, RefusalIsResourceExhaustedCarryingReasonAndMessage) {
  const Decision refused{false, RejectReason::kTooManyArrays, "session holds 3 arrays"};
  const absl::Status status = refused.ToStatus();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kResourceExhausted, "session holds 3 arrays"));
  EXPECT_EQ(ReasonOf(status), RejectReason::kTooManyArrays);
}

// ---- AdmitSession ----

struct SessionCase {
  std::string name;
  int max_sessions;
  int open_sessions;
  bool admitted;
};

class AdmitSessionTest : public ::testing::TestWithParam<SessionCase> {};

TEST_P(AdmitSessionTest, AdmitsWhileBelowMaxSessions) {
  AdmissionLimits limits;
  limits.max_sessions = GetParam().max_sessions;
  const Decision d = AdmitSession(limits, GetParam().open_sessions);
  EXPECT_EQ(d.admitted, GetParam().admitted);
  if (GetParam().admitted) {
    EXPECT_EQ(d.reason, RejectReason::kNone);
    EXPECT_THAT(d.message, IsEmpty());
  } else {
    EXPECT_EQ(d.reason, RejectReason::kTooManySessions);
    EXPECT_THAT(d.message, HasSubstr("max_sessions"));
    EXPECT_THAT(d.message, HasSubstr(std::to_string(GetParam().open_sessions)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, AdmitSessionTest,
    ::testing::Values(SessionCase{"NoneOpen", 2, 0, true}, SessionCase{"OneBelowMax", 2, 1, true},
                      SessionCase{"AtMax", 2, 2, false}, SessionCase{"AboveMax", 2, 5, false},
                      SessionCase{"MaxZeroAdmitsNobody", 0, 0, false},
                      SessionCase{"DefaultLimitAt1023", 1024, 1023, true},
                      SessionCase{"DefaultLimitAt1024", 1024, 1024, false}),
    [](const ::testing::TestParamInfo<SessionCase>& info) { return info.param.name; });

TEST(AdmissionLimitsTest, DefaultsAreTheDocumentedOnes) {
  const AdmissionLimits limits;
  EXPECT_EQ(limits.max_array_bytes, int64_t{2} << 30);
  EXPECT_EQ(limits.max_sessions, 1024);
  EXPECT_EQ(limits.max_arrays_per_session, 65536);
}

// ---- AdmitArray ----

struct ArrayCase {
  std::string name;
  int64_t bytes;
  int session_arrays;
  int64_t device_free_bytes;
  RejectReason expected;  // kNone: admitted
  std::string message;    // substring of the refusal
};

class AdmitArrayTest : public ::testing::TestWithParam<ArrayCase> {};

TEST_P(AdmitArrayTest, AppliesTheLimitsInOrder) {
  AdmissionLimits limits;
  limits.max_array_bytes = 1000;
  limits.max_arrays_per_session = 3;
  const ArrayCase& c = GetParam();
  const Decision d = AdmitArray(limits, c.bytes, c.session_arrays, c.device_free_bytes);
  EXPECT_EQ(d.admitted, c.expected == RejectReason::kNone);
  EXPECT_EQ(d.reason, c.expected) << RejectReasonName(d.reason);
  EXPECT_THAT(d.message, HasSubstr(c.message));
}

INSTANTIATE_TEST_SUITE_P(
    Table, AdmitArrayTest,
    ::testing::Values(ArrayCase{"FitsEverywhere", 100, 0, 5000, RejectReason::kNone, ""},
                      ArrayCase{"ExactlyMaxArrayBytes", 1000, 0, 5000, RejectReason::kNone, ""},
                      ArrayCase{"ExactlyTheFreeBytes", 500, 0, 500, RejectReason::kNone, ""},
                      ArrayCase{"EmptyArrayOnAFullDevice", 0, 0, 0, RejectReason::kNone, ""},
                      ArrayCase{"OneBelowMaxArrays", 1, 2, 5000, RejectReason::kNone, ""},
                      ArrayCase{"OneByteAboveMaxArrayBytes", 1001, 0, 5000,
                                RejectReason::kArrayTooLarge,
                                "array of 1001 bytes exceeds limits.maxArraySize = 1000"},
                      ArrayCase{"AtMaxArraysPerSession", 1, 3, 5000, RejectReason::kTooManyArrays,
                                "session holds 3 arrays"},
                      ArrayCase{"OneByteMoreThanIsFree", 501, 0, 500,
                                RejectReason::kDeviceMemoryExhausted,
                                "array of 501 bytes does not fit in the device's 500 free bytes"},
                      ArrayCase{"TooLargeIsReportedBeforeTooMany", 2000, 3, 0,
                                RejectReason::kArrayTooLarge, "limits.maxArraySize"},
                      ArrayCase{"TooManyIsReportedBeforeDeviceMemory", 10, 3, 0,
                                RejectReason::kTooManyArrays, "max_arrays_per_session"}),
    [](const ::testing::TestParamInfo<ArrayCase>& info) { return info.param.name; });

// ---- MemoryLedger and MemoryReservation ----

AdmissionLimits BigLimits() {
  AdmissionLimits limits;
  limits.max_array_bytes = int64_t{1} << 40;
  return limits;
}

TEST(MemoryLedgerTest, StartsEmpty) {
  const MemoryLedger ledger(4096);
  EXPECT_EQ(ledger.capacity_bytes(), 4096);
  EXPECT_EQ(ledger.reserved_bytes(), 0);
}

TEST(MemoryLedgerTest, ReservationsCountUntilDestroyed) {
  MemoryLedger ledger(4096);
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation a, ledger.Reserve(1000, BigLimits(), 0));
    EXPECT_EQ(a.bytes(), 1000);
    EXPECT_EQ(ledger.reserved_bytes(), 1000);
    GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation b, ledger.Reserve(3096, BigLimits(), 1));
    EXPECT_EQ(ledger.reserved_bytes(), 4096);
  }
  EXPECT_EQ(ledger.reserved_bytes(), 0);
}

TEST(MemoryLedgerTest, RefusesBeyondCapacityWithDeviceMemoryExhausted) {
  MemoryLedger ledger(4096);
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation a, ledger.Reserve(4000, BigLimits(), 0));
  absl::StatusOr<MemoryReservation> b = ledger.Reserve(97, BigLimits(), 1);
  EXPECT_THAT(b, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("96 free bytes")));
  EXPECT_EQ(ReasonOf(b.status()), RejectReason::kDeviceMemoryExhausted);
  EXPECT_EQ(ledger.reserved_bytes(), 4000);  // a refusal reserves nothing
  GPUKIT_EXPECT_OK(ledger.Reserve(96, BigLimits(), 1));
}

TEST(MemoryLedgerTest, AppliesTheArrayLimitsWithTheirReasons) {
  MemoryLedger ledger(1 << 20);
  AdmissionLimits limits;
  limits.max_array_bytes = 100;
  limits.max_arrays_per_session = 2;
  absl::StatusOr<MemoryReservation> too_large = ledger.Reserve(101, limits, 0);
  EXPECT_THAT(too_large, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(too_large.status()), RejectReason::kArrayTooLarge);
  absl::StatusOr<MemoryReservation> too_many = ledger.Reserve(1, limits, 2);
  EXPECT_THAT(too_many, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(ReasonOf(too_many.status()), RejectReason::kTooManyArrays);
  EXPECT_EQ(ledger.reserved_bytes(), 0);
}

TEST(MemoryReservationTest, ReleaseReturnsTheBytesOnce) {
  MemoryLedger ledger(4096);
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation r, ledger.Reserve(100, BigLimits(), 0));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation other, ledger.Reserve(50, BigLimits(), 0));
  r.Release();
  EXPECT_EQ(r.bytes(), 0);
  EXPECT_EQ(ledger.reserved_bytes(), 50);
  r.Release();  // later calls do nothing: the other reservation's bytes stay
  EXPECT_EQ(ledger.reserved_bytes(), 50);
}

TEST(MemoryReservationTest, DefaultConstructedHoldsNothing) {
  MemoryReservation r;
  EXPECT_EQ(r.bytes(), 0);
  r.Release();
}

TEST(MemoryReservationTest, MoveConstructionTransfersOwnership) {
  MemoryLedger ledger(4096);
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation source, ledger.Reserve(300, BigLimits(), 0));
  {
    MemoryReservation target(std::move(source));
    EXPECT_EQ(target.bytes(), 300);
    EXPECT_EQ(source.bytes(), 0);  // NOLINT(bugprone-use-after-move): moved-from is empty
    source.Release();              // must not return the bytes a second time
    EXPECT_EQ(ledger.reserved_bytes(), 300);
  }
  EXPECT_EQ(ledger.reserved_bytes(), 0);
}

TEST(MemoryReservationTest, MoveAssignmentReleasesWhatTheTargetHeld) {
  MemoryLedger ledger(4096);
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation a, ledger.Reserve(100, BigLimits(), 0));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation b, ledger.Reserve(200, BigLimits(), 0));
  EXPECT_EQ(ledger.reserved_bytes(), 300);
  a = std::move(b);
  EXPECT_EQ(a.bytes(), 200);
  EXPECT_EQ(ledger.reserved_bytes(), 200);  // a's 100 went back
  b.Release();                              // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(ledger.reserved_bytes(), 200);
  a.Release();
  EXPECT_EQ(ledger.reserved_bytes(), 0);
}

TEST(MemoryReservationTest, SelfMoveAssignmentKeepsTheReservation) {
  MemoryLedger ledger(4096);
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation a, ledger.Reserve(100, BigLimits(), 0));
  MemoryReservation& alias = a;  // through a reference: a direct self-move draws a warning
  a = std::move(alias);
  EXPECT_EQ(a.bytes(), 100);
  EXPECT_EQ(ledger.reserved_bytes(), 100);
}

TEST(MemoryReservationTest, MoveAssignmentBetweenLedgersReturnsEachToItsOwn) {
  MemoryLedger first(4096), second(4096);
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation a, first.Reserve(10, BigLimits(), 0));
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation b, second.Reserve(20, BigLimits(), 0));
  a = std::move(b);
  EXPECT_EQ(first.reserved_bytes(), 0);
  EXPECT_EQ(second.reserved_bytes(), 20);
  a.Release();
  EXPECT_EQ(second.reserved_bytes(), 0);
}

TEST(MemoryLedgerTest, RandomReserveMoveReleaseSequencesReturnToZero) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (replay with GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  MemoryLedger ledger(10000);
  std::vector<MemoryReservation> live;
  int64_t expected = 0;
  for (int step = 0; step < 2000; ++step) {
    switch (rng() % 4) {
      case 0:
      case 1: {
        const int64_t bytes = rng() % 1500;
        absl::StatusOr<MemoryReservation> r = ledger.Reserve(bytes, BigLimits(), 0);
        if (expected + bytes <= 10000) {
          ASSERT_THAT(r, IsOk()) << "step " << step;
          expected += bytes;
          live.push_back(*std::move(r));
        } else {
          ASSERT_EQ(ReasonOf(r.status()), RejectReason::kDeviceMemoryExhausted) << "step " << step;
        }
        break;
      }
      case 2:
        if (!live.empty()) {
          const size_t i = rng() % live.size();
          expected -= live[i].bytes();
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 3:
        if (live.size() >= 2) {
          const size_t i = rng() % live.size(), j = rng() % live.size();
          if (i != j) expected -= live[i].bytes();
          live[i] = std::move(live[j]);  // j is left empty (or i == j keeps it)
        }
        break;
    }
    ASSERT_EQ(ledger.reserved_bytes(), expected) << "step " << step;
    ASSERT_LE(expected, ledger.capacity_bytes());
  }
  live.clear();
  EXPECT_EQ(ledger.reserved_bytes(), 0);
}

TEST(MemoryLedgerTest, ConcurrentReserveAndReleaseReturnToZero) {
  MemoryLedger ledger(1 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&ledger] {
      for (int i = 0; i < 2000; ++i) {
        absl::StatusOr<MemoryReservation> r = ledger.Reserve(64 + i % 7, BigLimits(), 0);
        EXPECT_TRUE(r.ok());
        if (i % 3 == 0) {
          MemoryReservation moved = *std::move(r);  // released at once by its new owner
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(ledger.reserved_bytes(), 0);
}

}  // namespace
}  // namespace gpukit
