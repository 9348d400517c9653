// Which arrays to spill under memory pressure (daemon/scheduler/reclaim.h).
#include "daemon/scheduler/reclaim.h"

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"

namespace gpukit {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr Requester kGuaranteedRequester{QosClass::kGuaranteed, true};
constexpr Requester kBurstableWithinRequest{QosClass::kBurstable, true};
constexpr Requester kBurstableAboveRequest{QosClass::kBurstable, false};
constexpr Requester kBestEffortRequester{QosClass::kBestEffort, false};

absl::Time At(int seconds) { return absl::UnixEpoch() + absl::Seconds(seconds); }

// An array of a BestEffort session (which has no request).
ReclaimCandidate BestEffort(uint64_t session, int64_t bytes, int last_used_s) {
  return {.session_key = session,
          .qos = QosClass::kBestEffort,
          .bytes = bytes,
          .last_used = At(last_used_s),
          .session_used_bytes = bytes,
          .session_request_bytes = 0};
}

// An array of a Burstable session holding `session_used` bytes against `request`.
ReclaimCandidate Burstable(uint64_t session, int64_t bytes, int last_used_s, int64_t session_used,
                           int64_t request) {
  return {.session_key = session,
          .qos = QosClass::kBurstable,
          .bytes = bytes,
          .last_used = At(last_used_s),
          .session_used_bytes = session_used,
          .session_request_bytes = request};
}

ReclaimCandidate Guaranteed(uint64_t session, int64_t bytes, int last_used_s) {
  return {.session_key = session,
          .qos = QosClass::kGuaranteed,
          .bytes = bytes,
          .last_used = At(last_used_s),
          .session_used_bytes = bytes,
          .session_request_bytes = bytes};
}

TEST(ChooseVictimsTest, TakesBestEffortFirstLeastRecentlyUsedFirst) {
  const std::vector<ReclaimCandidate> candidates = {
      BestEffort(1, 100, 30), BestEffort(2, 100, 10), BestEffort(3, 100, 20),
      Burstable(4, 100, 0, 1000, 0)};  // older, but Burstable
  EXPECT_THAT(ChooseVictims(candidates, 250, kGuaranteedRequester), ElementsAre(1, 2, 0));
}

TEST(ChooseVictimsTest, StopsOnceTheShortfallIsCovered) {
  const std::vector<ReclaimCandidate> candidates = {BestEffort(1, 100, 1), BestEffort(1, 100, 2),
                                                    BestEffort(1, 100, 3)};
  EXPECT_THAT(ChooseVictims(candidates, 150, kGuaranteedRequester), ElementsAre(0, 1));
  EXPECT_THAT(ChooseVictims(candidates, 100, kGuaranteedRequester), ElementsAre(0));
}

TEST(ChooseVictimsTest, ThenBurstableAboveRequestLeastRecentlyUsedFirst) {
  const std::vector<ReclaimCandidate> candidates = {
      Burstable(7, 100, 20, 1000, 0), BestEffort(1, 100, 50), Burstable(8, 100, 10, 1000, 0)};
  EXPECT_THAT(ChooseVictims(candidates, 300, kGuaranteedRequester), ElementsAre(1, 2, 0));
}

TEST(ChooseVictimsTest, NeverTakesGuaranteed) {
  const std::vector<ReclaimCandidate> only_guaranteed = {Guaranteed(1, 1000, 0)};
  EXPECT_THAT(ChooseVictims(only_guaranteed, 1, kGuaranteedRequester), IsEmpty());

  const std::vector<ReclaimCandidate> mixed = {Guaranteed(1, 1000, 0), BestEffort(2, 100, 5)};
  EXPECT_THAT(ChooseVictims(mixed, 100, kGuaranteedRequester), ElementsAre(1));
}

TEST(ChooseVictimsTest, BurstableRequesterWithinItsRequestTakesBurstableExcess) {
  const std::vector<ReclaimCandidate> candidates = {BestEffort(1, 100, 5),
                                                    Burstable(2, 100, 1, 500, 100)};
  EXPECT_THAT(ChooseVictims(candidates, 200, kBurstableWithinRequest), ElementsAre(0, 1));
}

TEST(ChooseVictimsTest, BurstableRequesterAboveItsRequestTakesOnlyBestEffort) {
  const std::vector<ReclaimCandidate> candidates = {BestEffort(1, 100, 5),
                                                    Burstable(2, 100, 1, 500, 100)};
  EXPECT_THAT(ChooseVictims(candidates, 100, kBurstableAboveRequest), ElementsAre(0));
  EXPECT_THAT(ChooseVictims(candidates, 200, kBurstableAboveRequest), IsEmpty());
}

TEST(ChooseVictimsTest, BestEffortRequesterReclaimsNothing) {
  const std::vector<ReclaimCandidate> candidates = {BestEffort(1, 100, 5),
                                                    Burstable(2, 100, 1, 500, 100)};
  EXPECT_THAT(ChooseVictims(candidates, 50, kBestEffortRequester), IsEmpty());
  // Not even when told its (absent) request still holds.
  EXPECT_THAT(ChooseVictims(candidates, 50, Requester{QosClass::kBestEffort, true}), IsEmpty());
}

TEST(ChooseVictimsTest, BurstableAtItsRequestIsNotAVictim) {
  const std::vector<ReclaimCandidate> candidates = {Burstable(1, 100, 1, 300, 300),
                                                    Burstable(2, 100, 2, 200, 300)};
  EXPECT_THAT(ChooseVictims(candidates, 1, kGuaranteedRequester), IsEmpty());
}

TEST(ChooseVictimsTest, SkipsAnArrayThatWouldTakeItsSessionBelowRequest) {
  // 100 bytes against a request of 60: 40 may go. The older 50-byte array would take the
  // session to 50, so it stays; the newer 30-byte one goes.
  const std::vector<ReclaimCandidate> candidates = {Burstable(1, 50, 1, 100, 60),
                                                    Burstable(1, 30, 2, 100, 60)};
  EXPECT_THAT(ChooseVictims(candidates, 30, kGuaranteedRequester), ElementsAre(1));
}

TEST(ChooseVictimsTest, CountsWhatASessionHasGivenUpAlready) {
  // 100 bytes against a request of 50: after the 30-byte array goes, another 30 would leave
  // 40, so it stays and the 20-byte one goes.
  const std::vector<ReclaimCandidate> candidates = {
      Burstable(1, 30, 1, 100, 50), Burstable(1, 30, 2, 100, 50), Burstable(1, 20, 3, 100, 50)};
  EXPECT_THAT(ChooseVictims(candidates, 50, kGuaranteedRequester), ElementsAre(0, 2));
  // All 50 bytes of excess are not enough for 51.
  EXPECT_THAT(ChooseVictims(candidates, 51, kGuaranteedRequester), IsEmpty());
}

TEST(ChooseVictimsTest, SessionsAreLimitedToTheirOwnExcess) {
  // Two sessions each 50 bytes above request; one's budget is not the other's.
  const std::vector<ReclaimCandidate> candidates = {
      Burstable(1, 50, 1, 150, 100), Burstable(1, 50, 2, 150, 100), Burstable(2, 50, 3, 150, 100)};
  EXPECT_THAT(ChooseVictims(candidates, 100, kGuaranteedRequester), ElementsAre(0, 2));
}

TEST(ChooseVictimsTest, ReturnsNothingWhenTheAllowedCandidatesCannotCoverTheShortfall) {
  const std::vector<ReclaimCandidate> candidates = {BestEffort(1, 100, 1), BestEffort(2, 100, 2),
                                                    Guaranteed(3, 10000, 0)};
  EXPECT_THAT(ChooseVictims(candidates, 201, kGuaranteedRequester), IsEmpty());
  EXPECT_THAT(ChooseVictims(candidates, 200, kGuaranteedRequester), ElementsAre(0, 1));
}

TEST(ChooseVictimsTest, NoShortfallNeedsNoVictims) {
  const std::vector<ReclaimCandidate> candidates = {BestEffort(1, 100, 1)};
  EXPECT_THAT(ChooseVictims(candidates, 0, kGuaranteedRequester), IsEmpty());
  EXPECT_THAT(ChooseVictims(candidates, -5, kGuaranteedRequester), IsEmpty());
  EXPECT_THAT(ChooseVictims({}, 1, kGuaranteedRequester), IsEmpty());
}

TEST(ChooseVictimsTest, EqualLastUseKeepsTheCandidatesOrder) {
  const std::vector<ReclaimCandidate> candidates = {
      BestEffort(3, 100, 7), BestEffort(1, 100, 7), BestEffort(2, 100, 7),
      Burstable(5, 100, 7, 1000, 0), Burstable(4, 100, 7, 1000, 0)};
  EXPECT_THAT(ChooseVictims(candidates, 500, kGuaranteedRequester), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(ChooseVictims(candidates, 200, kGuaranteedRequester), ElementsAre(0, 1));
}

// ---- Property: random candidate sets ----

TEST(ChooseVictimsPropertyTest, VictimsCoverTheShortfallAndRespectEveryClass) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  constexpr QosClass kClasses[] = {QosClass::kGuaranteed, QosClass::kBurstable,
                                   QosClass::kBestEffort};

  int rounds_with_victims = 0;
  for (int round = 0; round < 3000; ++round) {
    // A few sessions, each with a few spillable arrays and maybe some bytes in use besides.
    std::vector<ReclaimCandidate> candidates;
    const int sessions = static_cast<int>(uniform(0, 5));
    for (int key = 0; key < sessions; ++key) {
      const QosClass qos = kClasses[uniform(0, 2)];
      std::vector<int64_t> arrays(uniform(0, 4));
      int64_t used = uniform(0, 100);  // not spillable (in use)
      for (int64_t& bytes : arrays) {
        bytes = uniform(1, 100);
        used += bytes;
      }
      const int64_t request = qos == QosClass::kBestEffort   ? 0
                              : qos == QosClass::kGuaranteed ? used
                                                             : uniform(0, used + 50);
      for (int64_t bytes : arrays) {
        candidates.push_back({.session_key = static_cast<uint64_t>(key),
                              .qos = qos,
                              .bytes = bytes,
                              .last_used = At(static_cast<int>(uniform(0, 5))),
                              .session_used_bytes = used,
                              .session_request_bytes = request});
      }
    }
    int64_t total = 0;
    for (const ReclaimCandidate& c : candidates) total += c.bytes;
    const int64_t shortfall = uniform(-10, total + 20);
    const Requester requester{kClasses[uniform(0, 2)], uniform(0, 1) == 1};
    SCOPED_TRACE(::testing::Message()
                 << "round " << round << ", " << candidates.size() << " candidates, shortfall "
                 << shortfall << ", requester " << QosName(requester.qos)
                 << (requester.within_request ? " within" : " above") << " its request");

    const std::vector<size_t> victims = ChooseVictims(candidates, shortfall, requester);
    if (victims.empty()) continue;
    ++rounds_with_victims;

    ASSERT_GT(shortfall, 0);
    ASSERT_NE(requester.qos, QosClass::kBestEffort) << "a BestEffort allocation reclaims nothing";
    std::set<size_t> seen;
    std::map<uint64_t, int64_t> given_up;  // by session
    int64_t freed = 0;
    for (size_t i : victims) {
      ASSERT_LT(i, candidates.size());
      ASSERT_TRUE(seen.insert(i).second) << "victim " << i << " chosen twice";
      const ReclaimCandidate& c = candidates[i];
      EXPECT_NE(c.qos, QosClass::kGuaranteed) << "victim " << i;
      if (c.qos == QosClass::kBurstable) {
        EXPECT_TRUE(requester.qos == QosClass::kGuaranteed || requester.within_request)
            << "a Burstable allocation above its request took Burstable victim " << i;
        given_up[c.session_key] += c.bytes;
      }
      freed += c.bytes;
    }
    EXPECT_GE(freed, shortfall);
    for (const auto& [key, bytes] : given_up) {
      for (const ReclaimCandidate& c : candidates) {
        if (c.session_key != key) continue;
        EXPECT_GE(c.session_used_bytes - bytes, c.session_request_bytes)
            << "Burstable session " << key << " was taken below its request";
        break;
      }
    }
    if (HasFailure()) return;
  }
  EXPECT_GT(rounds_with_victims, 300) << "the random cases rarely reclaim: the test is too weak";
}

}  // namespace
}  // namespace gpukit
