// Sessions and leases (daemon/session/session_manager.h). Time is a FakeClock; sessions are
// admitted by a real Scheduler; arrays are real DeviceArrays on a CPU device with
// reservations from a second scheduler, so freeing is checked in device memory and in the
// scheduler's accounting.
#include "daemon/session/session_manager.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/scheduler/admission.h"
#include "daemon/scheduler/clock.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/session/device_array.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr int64_t kDeviceBytes = 1 << 20;

OpenSessionParams Params(std::string tenant = "team-a") {
  OpenSessionParams params;
  params.tenant = std::move(tenant);
  params.client.name = "session_manager_test";
  params.client.pid = 4242;
  return params;
}

class SessionManagerTest : public ::testing::Test {
 protected:
  SessionManagerTest() {
    CpuDeviceOptions options;
    options.memory_bytes = kDeviceBytes;
    device_ = *CpuDevice::Create(options);
    limits_.max_sessions = 4;
    array_scheduler_ = MakeScheduler(AdmissionLimits{});
    array_ticket_ = array_scheduler_->AdmitSession("arrays", "default", {})->ticket;
  }

  std::unique_ptr<Scheduler> MakeScheduler(const AdmissionLimits& limits) {
    SchedulerOptions options;
    options.limits = limits;
    PartitionSpec all{.name = "default", .memory_quota_bytes = kDeviceBytes, .compute_share = 1};
    return *Scheduler::Create(clock_, {{0, kDeviceBytes}}, {all}, options);
  }

  // Made on first use, so a test can set limits_ first.
  SessionManager& manager() {
    if (manager_ == nullptr) {
      scheduler_ = MakeScheduler(limits_);
      manager_ = std::make_unique<SessionManager>(clock_, options_, *scheduler_);
    }
    return *manager_;
  }

  // Admits the session with the scheduler, then opens it, as the Core does.
  absl::StatusOr<std::shared_ptr<Session>> OpenVia(const OpenSessionParams& params) {
    SessionManager& sessions = manager();
    const std::string id = NewOpaqueId("s-");
    absl::StatusOr<SessionAdmission> admission =
        scheduler_->AdmitSession(id, params.partition, params.resources);
    if (!admission.ok()) return admission.status();
    return sessions.Open(id, params, *std::move(admission));
  }

  std::shared_ptr<Session> Open(std::string tenant = "team-a") {
    absl::StatusOr<std::shared_ptr<Session>> session = OpenVia(Params(std::move(tenant)));
    EXPECT_THAT(session, IsOk());
    return session.ok() ? *session : nullptr;
  }

  // A DeviceArray of `bytes` on the CPU device with a reservation from array_scheduler_.
  std::shared_ptr<DeviceArray> MakeArray(int64_t bytes) {
    absl::StatusOr<MemoryReservation> reservation =
        array_scheduler_->ReserveMemory(array_ticket_, bytes);
    EXPECT_THAT(reservation, IsOk());
    absl::StatusOr<BufferId> buffer = device_->Allocate(bytes);
    EXPECT_THAT(buffer, IsOk());
    if (!reservation.ok() || !buffer.ok()) return nullptr;
    return std::make_shared<DeviceArray>(NewOpaqueId("a-"), *device_, *buffer,
                                         TensorDesc{DType::kUInt8, {bytes}}, bytes,
                                         *std::move(reservation), clock_.Now());
  }

  int64_t DeviceUsedBytes() const { return device_->GetMemoryInfo().used_bytes; }
  int64_t ReservedBytes() const { return array_scheduler_->device_memory_used(0); }

  FakeClock clock_;
  SessionOptions options_;
  AdmissionLimits limits_;
  std::unique_ptr<CpuDevice> device_;  // outlives the manager and its arrays
  std::unique_ptr<Scheduler> array_scheduler_;
  SessionTicket array_ticket_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<SessionManager> manager_;
};

// ---- Opening: validation ----

struct TenantCase {
  std::string name;
  std::string tenant;
  bool valid;
};

class TenantValidationTest : public SessionManagerTest,
                             public ::testing::WithParamInterface<TenantCase> {};

TEST_P(TenantValidationTest, AcceptsOnlyShortNamesOfTheAllowedCharacters) {
  absl::StatusOr<std::shared_ptr<Session>> session = OpenVia(Params(GetParam().tenant));
  if (GetParam().valid) {
    ASSERT_THAT(session, IsOk());
    EXPECT_EQ((*session)->tenant(), GetParam().tenant);
  } else {
    EXPECT_THAT(session, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tenant")));
    EXPECT_EQ(manager().count(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, TenantValidationTest,
    ::testing::Values(TenantCase{"SingleLetter", "a", true},
                      TenantCase{"AllAllowedPunctuation", "Team-A.prod_01", true},
                      TenantCase{"Digits", "0123456789", true},
                      TenantCase{"SixtyThreeCharacters", std::string(63, 'x'), true},
                      TenantCase{"Empty", "", false},
                      TenantCase{"SixtyFourCharacters", std::string(64, 'x'), false},
                      TenantCase{"Space", "team a", false}, TenantCase{"Slash", "team/a", false},
                      TenantCase{"Colon", "team:a", false}, TenantCase{"At", "a@b", false},
                      TenantCase{"Newline", "team\n", false},
                      TenantCase{"NulByte", std::string("te\0am", 5), false},
                      TenantCase{"NonAscii", "t\xc3\xa9nant", false}),
    [](const ::testing::TestParamInfo<TenantCase>& info) { return info.param.name; });

TEST_F(SessionManagerTest, TenantErrorsSayWhatIsWrong) {
  EXPECT_THAT(OpenVia(Params("")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tenant is empty")));
  EXPECT_THAT(OpenVia(Params(std::string(64, 'x'))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tenant is 64 characters long; at most 63")));
  EXPECT_THAT(OpenVia(Params("a\nb")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tenant \"a\\nb\" may contain only letters, digits")));
}

TEST_F(SessionManagerTest, PartitionDefaultsToDefaultAndOthersDoNotExist) {
  OpenSessionParams params = Params();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Session> unnamed, OpenVia(params));
  EXPECT_EQ(unnamed->partition(), "default");
  params.partition = "default";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Session> named, OpenVia(params));
  EXPECT_EQ(named->partition(), "default");
  params.partition = "gpu-0";
  EXPECT_THAT(OpenVia(params), StatusIs(absl::StatusCode::kNotFound,
                                        HasSubstr("partition \"gpu-0\" does not exist")));
}

TEST_F(SessionManagerTest, RejectsOverlongClientFieldsNamingTheField) {
  const std::string long_text(254, 'h');
  OpenSessionParams params = Params();
  params.client.hostname = long_text;
  EXPECT_THAT(OpenVia(params),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("client.hostname is 254 characters long; at most 253")));
  params = Params();
  params.client.name = long_text;
  EXPECT_THAT(OpenVia(params),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client.name")));
  params = Params();
  params.client.library_version = long_text;
  EXPECT_THAT(OpenVia(params),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client.library_version")));
  params = Params();
  params.client.hostname = std::string(253, 'h');
  EXPECT_THAT(OpenVia(params), IsOk());
}

TEST_F(SessionManagerTest, RejectsNegativeLease) {
  OpenSessionParams params = Params();
  params.lease = absl::Milliseconds(-5);
  EXPECT_THAT(OpenVia(params), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("lease_ms = -5 must be >= 0")));
}

TEST_F(SessionManagerTest, SessionRecordsWhoOpenedItAndWhen) {
  OpenSessionParams params = Params("tenant-1");
  params.client.hostname = "worker-7";
  params.stream = StreamId{99};
  const absl::Time now = clock_.Now();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Session> s, OpenVia(params));
  EXPECT_EQ(s->tenant(), "tenant-1");
  EXPECT_EQ(s->client().hostname, "worker-7");
  EXPECT_EQ(s->client().pid, 4242);
  EXPECT_EQ(s->stream(), StreamId{99});
  EXPECT_EQ(s->opened_at(), now);
  EXPECT_EQ(s->lease_deadline(), now + s->lease());
  EXPECT_EQ(s->array_count(), 0);
  EXPECT_EQ(s->memory_bytes(), 0);
}

TEST_F(SessionManagerTest, SessionIdsAreOpaqueAndDistinct) {
  std::set<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    std::shared_ptr<Session> s = Open();
    ASSERT_NE(s, nullptr);
    EXPECT_THAT(s->id(), MatchesRegex("s-[0-9a-f]{32}"));
    ids.insert(s->id());
  }
  EXPECT_EQ(ids.size(), 4u);
}

TEST(NewOpaqueIdTest, IsThePrefixAnd32HexDigitsAndNeverRepeats) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = NewOpaqueId("a-");
    ASSERT_THAT(id, MatchesRegex("a-[0-9a-f]{32}"));
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_THAT(NewOpaqueId(""), MatchesRegex("[0-9a-f]{32}"));
}

// ---- Leases: defaults and clamping ----

struct LeaseCase {
  std::string name;
  absl::Duration requested;
  absl::Duration granted;
};

class LeaseClampTest : public SessionManagerTest,
                       public ::testing::WithParamInterface<LeaseCase> {};

TEST_P(LeaseClampTest, ZeroGivesTheDefaultOthersAreClampedToMinAndMax) {
  OpenSessionParams params = Params();
  params.lease = GetParam().requested;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Session> s, OpenVia(params));
  EXPECT_EQ(s->lease(), GetParam().granted);
  EXPECT_EQ(s->lease_deadline(), clock_.Now() + GetParam().granted);
}

INSTANTIATE_TEST_SUITE_P(
    Table, LeaseClampTest,
    ::testing::Values(LeaseCase{"ZeroMeansDefault", absl::ZeroDuration(), absl::Seconds(30)},
                      LeaseCase{"BelowMin", absl::Milliseconds(1), absl::Seconds(1)},
                      LeaseCase{"AtMin", absl::Seconds(1), absl::Seconds(1)},
                      LeaseCase{"InRange", absl::Seconds(45), absl::Seconds(45)},
                      LeaseCase{"AtMax", absl::Minutes(10), absl::Minutes(10)},
                      LeaseCase{"AboveMax", absl::Hours(5), absl::Minutes(10)},
                      LeaseCase{"Infinite", absl::InfiniteDuration(), absl::Minutes(10)}),
    [](const ::testing::TestParamInfo<LeaseCase>& info) { return info.param.name; });

TEST(SessionOptionsTest, DefaultsAreTheDocumentedOnes) {
  const SessionOptions options;
  EXPECT_EQ(options.default_lease, absl::Seconds(30));
  EXPECT_EQ(options.min_lease, absl::Seconds(1));
  EXPECT_EQ(options.max_lease, absl::Minutes(10));
}

TEST_F(SessionManagerTest, ConfiguredDefaultLeaseIsUsed) {
  options_.default_lease = absl::Seconds(7);
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->lease(), absl::Seconds(7));
}

// ---- Leases: expiry ----

TEST_F(SessionManagerTest, SessionIsLiveUpToItsDeadlineAndGoneJustAfter) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  clock_.Advance(absl::Seconds(30));  // exactly at the deadline: still live
  EXPECT_THAT(manager().Touch(s->id()), IsOk());
  EXPECT_TRUE(manager().ExpireLeases().empty());

  clock_.Advance(absl::Seconds(30) + absl::Nanoseconds(1));  // the Touch renewed it to +30s
  EXPECT_THAT(manager().Touch(s->id()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("closed, expired or never opened")));
}

TEST_F(SessionManagerTest, ExpiredButNotYetReapedSessionIsNotFound) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  clock_.Advance(absl::Seconds(31));
  EXPECT_EQ(manager().count(), 1);  // the reaper has not run
  EXPECT_THAT(manager().Touch(s->id()), StatusIs(absl::StatusCode::kNotFound));
  // A failed Touch must not revive it: it is still expired afterwards.
  EXPECT_THAT(manager().Touch(s->id()), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(manager().ExpireLeases().size(), 1u);
  EXPECT_EQ(manager().count(), 0);
}

TEST_F(SessionManagerTest, TouchRenewsTheLeaseFromNow) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  clock_.Advance(absl::Seconds(25));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Session> touched, manager().Touch(s->id()));
  EXPECT_EQ(touched, s);
  EXPECT_EQ(s->lease_deadline(), clock_.Now() + absl::Seconds(30));
  clock_.Advance(absl::Seconds(25));  // 50 s after opening, 25 s after the touch
  EXPECT_TRUE(manager().ExpireLeases().empty());
  EXPECT_THAT(manager().Touch(s->id()), IsOk());
  clock_.Advance(absl::Seconds(31));
  EXPECT_THAT(manager().Touch(s->id()), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SessionManagerTest, RecordsItsOwnerAndFindDoesNotRenewTheLease) {
  OpenSessionParams params = Params();
  params.owner = Principal::Local(1000, 1000, 4242);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Session> s, OpenVia(params));
  EXPECT_EQ(s->owner().Describe(), "uid=1000 gid=1000 pid=4242");
  clock_.Advance(absl::Seconds(25));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Session> found, manager().Find(s->id()));
  EXPECT_EQ(found.get(), s.get());
  EXPECT_EQ(found->owner().uid, 1000u);
  // Find looked without renewing: the lease still ends 30 s after opening. Lapsed but not
  // reaped, Find still finds it (Close may still close it); reaped, it is gone.
  clock_.Advance(absl::Seconds(6));
  EXPECT_THAT(manager().Touch(s->id()), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(manager().Find(s->id()), IsOk());
  EXPECT_EQ(manager().ExpireLeases().size(), 1u);
  EXPECT_THAT(manager().Find(s->id()), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SessionManagerTest, EveryMissingSessionGetsTheSameMessage) {
  // Unknown, closed and expired sessions answer word for word alike, in every call: the
  // services answer a caller who may not use a session with this same error.
  const std::string expected = SessionNotFoundError("s-nope").ToString();
  EXPECT_EQ(manager().Touch("s-nope").status().ToString(), expected);
  EXPECT_EQ(manager().Find("s-nope").status().ToString(), expected);
  EXPECT_EQ(manager().Close("s-nope").status().ToString(), expected);
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_THAT(manager().Close(s->id()), IsOk());
  const std::string closed = SessionNotFoundError(s->id()).ToString();
  EXPECT_EQ(manager().Touch(s->id()).status().ToString(), closed);
  EXPECT_EQ(manager().Find(s->id()).status().ToString(), closed);
  EXPECT_EQ(manager().Close(s->id()).status().ToString(), closed);
  EXPECT_THAT(closed, HasSubstr("not found (closed, expired or never opened)"));
}

TEST_F(SessionManagerTest, ExpireLeasesClosesOnlyExpiredSessions) {
  OpenSessionParams short_params = Params("short");
  short_params.lease = absl::Seconds(5);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<Session> short_lived, OpenVia(short_params));
  std::shared_ptr<Session> long_lived = Open("long");
  ASSERT_NE(long_lived, nullptr);
  clock_.Advance(absl::Seconds(6));
  const std::vector<CloseStats> closed = manager().ExpireLeases();
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].session_id, short_lived->id());
  EXPECT_EQ(closed[0].tenant, "short");
  EXPECT_EQ(manager().count(), 1);
  EXPECT_THAT(manager().Touch(long_lived->id()), IsOk());
  EXPECT_TRUE(manager().ExpireLeases().empty());  // nothing left to reap
}

TEST_F(SessionManagerTest, ExpireLeasesFreesEveryArrayOfTheExpiredSession) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  GPUKIT_ASSERT_OK(s->AddArray(MakeArray(1000)));
  GPUKIT_ASSERT_OK(s->AddArray(MakeArray(24)));
  EXPECT_EQ(DeviceUsedBytes(), 1024);
  EXPECT_EQ(ReservedBytes(), 1024);
  clock_.Advance(absl::Minutes(1));
  const std::vector<CloseStats> closed = manager().ExpireLeases();
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].arrays_freed, 2);
  EXPECT_EQ(closed[0].bytes_freed, 1024);
  EXPECT_EQ(DeviceUsedBytes(), 0);
  EXPECT_EQ(ReservedBytes(), 0);
  EXPECT_EQ(s->array_count(), 0);
  EXPECT_EQ(s->memory_bytes(), 0);
}

// An array whose memory another process may map through a legacy CUDA IPC handle keeps its
// memory (and its charge) after it is removed, until the session ends.
TEST_F(SessionManagerTest, ArraysKeptUntilTheSessionEndsOutliveTheirRemoval) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  std::shared_ptr<DeviceArray> kept = MakeArray(1000);
  ASSERT_NE(kept, nullptr);
  kept->MarkShared(/*until_session_end=*/true);
  const std::string handle = kept->handle();
  GPUKIT_ASSERT_OK(s->AddArray(std::move(kept)));
  GPUKIT_ASSERT_OK(s->AddArray(MakeArray(24)));
  GPUKIT_ASSERT_OK(s->RemoveArray(handle).status());
  EXPECT_THAT(s->FindArray(handle).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(DeviceUsedBytes(), 1024) << "the memory stays";
  EXPECT_EQ(ReservedBytes(), 1024) << "and so does its charge";
  EXPECT_THAT(s->CheckArrayRoom(2), StatusIs(absl::StatusCode::kResourceExhausted,
                                             HasSubstr("1 of them freed but kept")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(CloseStats stats, manager().Close(s->id()));
  EXPECT_EQ(stats.arrays_freed, 2);
  EXPECT_EQ(DeviceUsedBytes(), 0);
  EXPECT_EQ(ReservedBytes(), 0);
}

// ---- Close ----

TEST_F(SessionManagerTest, CloseFreesArraysAndReportsThem) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  GPUKIT_ASSERT_OK(s->AddArray(MakeArray(300)));
  GPUKIT_ASSERT_OK(s->AddArray(MakeArray(200)));
  GPUKIT_ASSERT_OK(s->AddArray(MakeArray(0)));
  EXPECT_EQ(s->array_count(), 3);
  EXPECT_EQ(s->memory_bytes(), 500);
  GPUKIT_ASSERT_OK_AND_ASSIGN(CloseStats stats, manager().Close(s->id()));
  EXPECT_EQ(stats.session_id, s->id());
  EXPECT_EQ(stats.tenant, "team-a");
  EXPECT_EQ(stats.arrays_freed, 3);
  EXPECT_EQ(stats.bytes_freed, 500);
  EXPECT_EQ(DeviceUsedBytes(), 0);
  EXPECT_EQ(ReservedBytes(), 0);
  EXPECT_EQ(manager().count(), 0);
}

TEST_F(SessionManagerTest, ClosedSessionIsNotFoundAnywhere) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  GPUKIT_ASSERT_OK(manager().Close(s->id()));
  EXPECT_THAT(manager().Touch(s->id()), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(manager().Close(s->id()), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(manager().Close("s-never-opened"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(manager().Touch(""), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SessionManagerTest, ArrayAddedToAClosedSessionIsDroppedAndFreed) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  GPUKIT_ASSERT_OK(manager().Close(s->id()));
  EXPECT_THAT(s->AddArray(MakeArray(128)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("was closed")));
  EXPECT_EQ(s->array_count(), 0);
  EXPECT_EQ(DeviceUsedBytes(), 0);
  EXPECT_EQ(ReservedBytes(), 0);
}

TEST_F(SessionManagerTest, ArrayBeyondMaxArraysIsRefusedWithTheReasonAndFreed) {
  std::shared_ptr<Session> s = Open();
  GPUKIT_ASSERT_OK(s->AddArray(MakeArray(100), /*max_arrays=*/2));
  GPUKIT_ASSERT_OK(s->AddArray(MakeArray(100), /*max_arrays=*/2));
  absl::Status refused = s->AddArray(MakeArray(50), /*max_arrays=*/2);
  EXPECT_THAT(refused,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_arrays_per_session")));
  EXPECT_EQ(ReasonOf(refused), RejectReason::kTooManyArrays);
  EXPECT_EQ(s->array_count(), 2);
  EXPECT_EQ(s->memory_bytes(), 200);
  EXPECT_EQ(DeviceUsedBytes(), 200);  // the refused array was dropped and freed
  EXPECT_EQ(ReservedBytes(), 200);
}

TEST_F(SessionManagerTest, ArrayHeldByWorkInFlightIsFreedWhenTheWorkLetsGo) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  std::shared_ptr<DeviceArray> array = MakeArray(256);
  ASSERT_NE(array, nullptr);
  GPUKIT_ASSERT_OK(s->AddArray(array));  // `array` plays the work in flight
  GPUKIT_ASSERT_OK(manager().Close(s->id()));
  EXPECT_EQ(DeviceUsedBytes(), 256);
  array.reset();
  EXPECT_EQ(DeviceUsedBytes(), 0);
  EXPECT_EQ(ReservedBytes(), 0);
}

// Destroying a closed session's arrays frees device memory, which may wait for the device
// (and for a device executor, for a round trip): it happens after the manager's lock is
// released, so other sessions' lookups go on meanwhile. Here the Free of the closing
// session's array blocks until another session has been touched, found and listed; were the
// array destroyed under the lock, Touch would wait for the Free and the Free for Touch.
TEST_F(SessionManagerTest, LookupsOfOtherSessionsGoOnWhileAClosedSessionsArraysAreFreed) {
  CpuDeviceOptions options;
  options.memory_bytes = kDeviceBytes;
  auto device = std::make_unique<::gpukit::testing::ForwardingDevice>(*CpuDevice::Create(options));
  absl::Notification free_entered;
  absl::Notification others_looked_up;
  bool looked_up_while_freeing = false;  // written by the closer thread, read after join
  device->before_free = [&](BufferId) {
    free_entered.Notify();
    // The bound only turns the old behaviour (a lookup waiting for this Free) into a failure
    // instead of a hung suite; it never passes when things work.
    looked_up_while_freeing = others_looked_up.WaitForNotificationWithTimeout(absl::Seconds(60));
  };
  std::shared_ptr<Session> closing = Open("team-a");
  std::shared_ptr<Session> bystander = Open("team-b");
  ASSERT_NE(closing, nullptr);
  ASSERT_NE(bystander, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(MemoryReservation reservation,
                              array_scheduler_->ReserveMemory(array_ticket_, 64));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device->Allocate(64));
  GPUKIT_ASSERT_OK(closing->AddArray(std::make_shared<DeviceArray>(
      NewOpaqueId("a-"), *device, buffer, TensorDesc{DType::kUInt8, {64}}, 64,
      std::move(reservation), clock_.Now())));

  absl::StatusOr<CloseStats> stats = absl::UnknownError("not closed");
  std::thread closer([&] { stats = manager().Close(closing->id()); });
  free_entered.WaitForNotification();
  const bool touched = manager().Touch(bystander->id()).ok();
  const bool found = manager().Find(bystander->id()).ok();
  const size_t listed = manager().List().size();
  const bool closed_is_gone = absl::IsNotFound(manager().Touch(closing->id()).status());
  others_looked_up.Notify();
  closer.join();

  EXPECT_TRUE(looked_up_while_freeing)
      << "the other session's lookups waited for the closing session's Free";
  EXPECT_TRUE(touched);
  EXPECT_TRUE(found);
  EXPECT_EQ(listed, 1u);
  EXPECT_TRUE(closed_is_gone);
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->arrays_freed, 1);
  EXPECT_EQ(stats->bytes_freed, 64);
  EXPECT_EQ(device->GetMemoryInfo().used_bytes, 0);
  EXPECT_EQ(ReservedBytes(), 0);
}

TEST_F(SessionManagerTest, CloseAllClosesEverySession) {
  for (const char* tenant : {"a", "b", "c"}) {
    std::shared_ptr<Session> s = Open(tenant);
    ASSERT_NE(s, nullptr);
    GPUKIT_ASSERT_OK(s->AddArray(MakeArray(10)));
  }
  EXPECT_EQ(manager().CloseAll().size(), 3u);
  EXPECT_EQ(manager().count(), 0);
  EXPECT_EQ(DeviceUsedBytes(), 0);
  EXPECT_EQ(ReservedBytes(), 0);
}

TEST_F(SessionManagerTest, DestroyingTheManagerFreesArraysOfOpenSessions) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  GPUKIT_ASSERT_OK(s->AddArray(MakeArray(64)));
  s.reset();
  manager_.reset();
  EXPECT_EQ(DeviceUsedBytes(), 0);
  EXPECT_EQ(ReservedBytes(), 0);
}

// A session's stream owner may wait for the device when the last reference to it drops, so
// the manager must never destroy a session while it holds its lock. The owner here asks the
// manager for its count from another thread and waits for the answer: under the manager's
// lock that answer would never come (it times out, and the test fails instead of hanging).
struct DropCase {
  std::string name;
  std::function<void(SessionManager&, FakeClock&, const std::string& id)> close;
};

class SessionDropTest : public SessionManagerTest,
                        public ::testing::WithParamInterface<DropCase> {};

TEST_P(SessionDropTest, SessionIsDestroyedAfterTheManagerReleasesItsLock) {
  SessionManager& sessions = manager();
  absl::Notification counted;
  std::thread asker;
  bool answered = false;
  int drops = 0;
  OpenSessionParams params = Params();
  params.stream_owner = std::shared_ptr<const void>(nullptr, [&](const void*) {
    ++drops;
    asker = std::thread([&] {
      sessions.count();
      counted.Notify();
    });
    answered = counted.WaitForNotificationWithTimeout(absl::Seconds(10));
  });
  std::string id;
  {
    absl::StatusOr<std::shared_ptr<Session>> session = OpenVia(params);
    ASSERT_THAT(session, IsOk());
    id = (*session)->id();
  }
  params.stream_owner.reset();  // the session holds the only reference now
  EXPECT_EQ(drops, 0);
  GetParam().close(sessions, clock_, id);
  if (asker.joinable()) asker.join();
  EXPECT_EQ(drops, 1) << "closing drops the session's stream owner";
  EXPECT_TRUE(answered) << "the session was destroyed under the manager's lock";
}

INSTANTIATE_TEST_SUITE_P(
    Paths, SessionDropTest,
    ::testing::Values(DropCase{"Close",
                               [](SessionManager& sessions, FakeClock&, const std::string& id) {
                                 EXPECT_THAT(sessions.Close(id), IsOk());
                               }},
                      DropCase{"ExpireLeases",
                               [](SessionManager& sessions, FakeClock& clock, const std::string&) {
                                 clock.Advance(absl::Hours(1));
                                 EXPECT_EQ(sessions.ExpireLeases().size(), 1u);
                               }},
                      DropCase{"CloseAll",
                               [](SessionManager& sessions, FakeClock&, const std::string&) {
                                 EXPECT_EQ(sessions.CloseAll().size(), 1u);
                               }}),
    [](const ::testing::TestParamInfo<DropCase>& info) { return info.param.name; });

// ---- Arrays of a session ----

TEST_F(SessionManagerTest, FindAndRemoveArraysOfTheSession) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  std::shared_ptr<DeviceArray> array = MakeArray(100);
  ASSERT_NE(array, nullptr);
  const std::string handle = array->handle();
  GPUKIT_ASSERT_OK(s->AddArray(std::move(array)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<DeviceArray> found, s->FindArray(handle));
  EXPECT_EQ(found->bytes(), 100);
  found.reset();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<DeviceArray> removed, s->RemoveArray(handle));
  EXPECT_EQ(s->array_count(), 0);
  EXPECT_EQ(s->memory_bytes(), 0);
  EXPECT_EQ(DeviceUsedBytes(), 100);  // the caller still holds it
  removed.reset();
  EXPECT_EQ(DeviceUsedBytes(), 0);
  EXPECT_THAT(s->FindArray(handle), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(s->RemoveArray(handle), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SessionManagerTest, ForeignHandlesAreNotFoundLikeUnknownOnes) {
  std::shared_ptr<Session> owner = Open("owner");
  std::shared_ptr<Session> other = Open("other");
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(other, nullptr);
  std::shared_ptr<DeviceArray> array = MakeArray(64);
  ASSERT_NE(array, nullptr);
  const std::string handle = array->handle();
  GPUKIT_ASSERT_OK(owner->AddArray(std::move(array)));

  const std::string expected = "array handle \"" + handle + "\" not found in this session";
  EXPECT_THAT(other->FindArray(handle), StatusIs(absl::StatusCode::kNotFound, expected));
  EXPECT_THAT(other->RemoveArray(handle), StatusIs(absl::StatusCode::kNotFound, expected));
  const std::string unknown = "a-00000000000000000000000000000000";
  EXPECT_THAT(other->FindArray(unknown),
              StatusIs(absl::StatusCode::kNotFound,
                       "array handle \"" + unknown + "\" not found in this session"));
  EXPECT_THAT(owner->FindArray(handle), IsOk());  // the owner's array is untouched
  EXPECT_EQ(owner->array_count(), 1);
}

TEST_F(SessionManagerTest, HandlesInMessagesAreEscapedAndTruncated) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  const std::string nasty = "\x01\n" + std::string(200, 'z');
  absl::StatusOr<std::shared_ptr<DeviceArray>> found = s->FindArray(nasty);
  ASSERT_THAT(found, StatusIs(absl::StatusCode::kNotFound, HasSubstr("\\x01\\n")));
  EXPECT_LT(found.status().message().size(), 150u);
}

// ---- Admission ----

TEST_F(SessionManagerTest, RefusesSessionsBeyondMaxSessionsWithTheReason) {
  limits_.max_sessions = 2;
  std::shared_ptr<Session> first = Open("a");
  std::shared_ptr<Session> second = Open("b");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  absl::StatusOr<std::shared_ptr<Session>> third = OpenVia(Params("c"));
  EXPECT_THAT(third, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_sessions")));
  EXPECT_EQ(ReasonOf(third.status()), RejectReason::kTooManySessions);
  EXPECT_EQ(manager().count(), 2);
  GPUKIT_ASSERT_OK(manager().Close(first->id()));
  EXPECT_THAT(OpenVia(Params("c")), IsOk());
}

TEST_F(SessionManagerTest, ReapingExpiredSessionsMakesRoomForNewOnes) {
  limits_.max_sessions = 1;
  ASSERT_NE(Open("a"), nullptr);
  clock_.Advance(absl::Seconds(31));
  manager().ExpireLeases();
  EXPECT_THAT(OpenVia(Params("b")), IsOk());
}

TEST_F(SessionManagerTest, ClosingASessionEndsItInTheSchedulerAndCancelsItsWaitingTasks) {
  std::shared_ptr<Session> s = Open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(scheduler_->session_count(), 1);
  GPUKIT_ASSERT_OK_AND_ASSIGN(TaskRef task, scheduler_->Submit(s->ticket(), {}));
  GPUKIT_ASSERT_OK(manager().Close(s->id()));
  EXPECT_EQ(scheduler_->session_count(), 0);
  EXPECT_EQ(scheduler_->StateOf(task), TaskState::kCancelled);
}

TEST_F(SessionManagerTest, ExpiryEndsTheSessionInTheScheduler) {
  ASSERT_NE(Open(), nullptr);
  clock_.Advance(absl::Seconds(31));
  manager().ExpireLeases();
  EXPECT_EQ(scheduler_->session_count(), 0);
}

TEST_F(SessionManagerTest, BadParamsReturnTheSchedulersAdmission) {
  OpenSessionParams params = Params("");
  EXPECT_THAT(OpenVia(params), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(scheduler_->session_count(), 0);
}

// ---- Listing ----

TEST_F(SessionManagerTest, ListIsOrderedByOpeningTime) {
  std::vector<std::string> ids;
  for (const char* tenant : {"first", "second", "third"}) {
    std::shared_ptr<Session> s = Open(tenant);
    ASSERT_NE(s, nullptr);
    ids.push_back(s->id());
    clock_.Advance(absl::Seconds(1));
  }
  std::vector<std::string> listed;
  for (const std::shared_ptr<Session>& s : manager().List()) listed.push_back(s->id());
  EXPECT_EQ(listed, ids);
  EXPECT_EQ(&manager().clock(), &clock_);
}

TEST_F(SessionManagerTest, ConcurrentOpenTouchAndCloseKeepCountsConsistent) {
  limits_.max_sessions = 64;
  SessionManager& sessions = manager();  // made before the threads share it
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, &sessions] {
      for (int i = 0; i < 50; ++i) {
        absl::StatusOr<std::shared_ptr<Session>> s = OpenVia(Params());
        ASSERT_TRUE(s.ok()) << s.status();
        EXPECT_TRUE(sessions.Touch((*s)->id()).ok());
        EXPECT_TRUE(sessions.Close((*s)->id()).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(manager().count(), 0);
}

}  // namespace
}  // namespace gpukit
