// Leases, against the real daemon and its real clock: a session that goes silent lapses and
// its memory is freed; KeepAlive, any request that reaches the session, and libgpukit's
// background thread keep one alive past its lease.
#include <functional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kLeaseMs = 500;
constexpr absl::Duration kLease = absl::Milliseconds(kLeaseMs);
// The reaper runs once a second: a lapsed session is gone within lease + 1 s.
constexpr absl::Duration kReapSlack = absl::Seconds(3);

class LeaseTest : public DaemonTest {
 protected:
  std::string DaemonConfigJson() const override { return R"({"sessions": {"minLease": "200ms"}})"; }

  // Whether ListSessions shows `session_id` now.
  bool Listed(const std::string& session_id) {
    absl::StatusOr<v1::ListSessionsResponse> sessions = api().ListSessions();
    if (!sessions.ok()) return false;
    for (const v1::SessionInfo& s : sessions->sessions()) {
      if (s.session_id() == session_id) return true;
    }
    return false;
  }

  // For `duration` (a multiple of the lease), calls `renew` every 100 ms and checks each
  // time that the session is still listed. Not a wait for an event: the time passing is
  // what the test is about.
  void ExpectStaysAliveFor(const std::string& session_id, absl::Duration duration,
                           const std::function<void()>& renew) {
    const absl::Time end = absl::Now() + duration;
    while (absl::Now() < end) {
      renew();
      ASSERT_TRUE(Listed(session_id)) << "session lapsed although it was renewed";
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
};

TEST_F(LeaseTest, SilentSessionLapsesAndItsMemoryIsFreed) {
  v1::OpenSessionRequest request;
  request.set_tenant("silent");
  request.set_lease_ms(kLeaseMs);
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::OpenSessionResponse opened, api().Open(request));
  EXPECT_EQ(opened.lease_ms(), kLeaseMs);
  const std::string session = opened.session_id();
  GPUKIT_ASSERT_OK(api().CreateArray(session, {1024}, v1::DTYPE_UINT8));
  const absl::Time last_request = absl::Now();

  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse listed, api().ListSessions());
  ASSERT_EQ(listed.sessions_size(), 1);
  EXPECT_EQ(listed.sessions(0).memory_bytes(), 1024);
  EXPECT_GT(listed.sessions(0).lease_remaining_ms(), 0);
  EXPECT_LE(listed.sessions(0).lease_remaining_ms(), kLeaseMs);
  EXPECT_THAT(api().MemoryUsedBytes(), IsOkAndHolds(1024));

  // No keepalive thread, no requests: the lease lapses and the reaper frees everything.
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(kLease + kReapSlack));
  EXPECT_GE(absl::Now() - last_request, kLease - absl::Milliseconds(100));
  const auto gone =
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("session \"" + session + "\" not found"));
  EXPECT_THAT(api().KeepAlive(session), gone);
  EXPECT_THAT(api().CreateArray(session, {4}, v1::DTYPE_UINT8), gone);
}

TEST_F(LeaseTest, KeepAliveKeepsASessionAlivePastItsLease) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api().OpenSession("kept", kLeaseMs));
  GPUKIT_ASSERT_OK(api().CreateArray(session, {1024}, v1::DTYPE_UINT8));
  ASSERT_NO_FATAL_FAILURE(ExpectStaysAliveFor(session, 3 * kLease, [&] {
    EXPECT_THAT(api().KeepAlive(session),
                IsOkAndHolds(::testing::Property(&v1::KeepAliveResponse::lease_ms, kLeaseMs)));
  }));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::CloseSessionResponse closed, api().Close(session));
  EXPECT_EQ(closed.arrays_freed(), 1);
  EXPECT_EQ(closed.bytes_freed(), 1024);
  EXPECT_THAT(api().MemoryUsedBytes(), IsOkAndHolds(0));
}

TEST_F(LeaseTest, FailingRequestsThatNameTheSessionStillRenewIt) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api().OpenSession("busy", kLeaseMs));
  ASSERT_NO_FATAL_FAILURE(ExpectStaysAliveFor(session, 3 * kLease, [&] {
    EXPECT_THAT(api().Describe(session, "a-no-such-array"),
                StatusIs(absl::StatusCode::kNotFound, HasSubstr("a-no-such-array")));
  }));
}

TEST_F(LeaseTest, ClientLibraryRenewsItsLeaseWhileIdle) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect("idle", kLease));
  EXPECT_EQ(client->lease(), kLease);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array array, client->FromVector<int32_t>({7, 8, 9}, {3}));
  // The client makes no call here; only its background thread renews the lease.
  ASSERT_NO_FATAL_FAILURE(ExpectStaysAliveFor(client->session_id(), 3 * kLease, [] {}));
  EXPECT_THAT(array.ToVector<int32_t>(), IsOkAndHolds(::testing::ElementsAre(7, 8, 9)));
}

TEST_F(LeaseTest, RequestedLeasesAreClampedToTheConfiguredRange) {
  struct Case {
    int64_t requested_ms;
    int64_t granted_ms;
  };
  for (const Case& c : {Case{1, 200}, Case{kLeaseMs, kLeaseMs}, Case{100'000'000, 600'000},
                        Case{0, 30'000}}) {  // 0: the default lease
    SCOPED_TRACE(::testing::Message() << "lease_ms = " << c.requested_ms);
    v1::OpenSessionRequest request;
    request.set_tenant("clamped");
    request.set_lease_ms(c.requested_ms);
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::OpenSessionResponse opened, api().Open(request));
    EXPECT_EQ(opened.lease_ms(), c.granted_ms);
    EXPECT_EQ(opened.partition(), "default");
    GPUKIT_EXPECT_OK(api().Close(opened.session_id()));
  }
}

}  // namespace
}  // namespace gpukit::testing
