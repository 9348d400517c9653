// Several client processes against one daemon: workers (tests/integration/worker.cc) that
// compute at the same time, and one killed with SIGKILL in the middle of an upload. The
// test process never forks; it spawns the worker binary.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"
#include <sys/wait.h>

namespace gpukit::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kLeaseMs = 500;

class MultiProcessTest : public DaemonTest {
 protected:
  // Short leases, so that a dead client's session lapses within the test.
  std::string DaemonConfigJson() const override { return R"({"sessions": {"minLease": "200ms"}})"; }

  absl::StatusOr<Subprocess> SpawnWorker(const std::vector<std::string>& args,
                                         const std::string& name) {
    std::vector<std::string> argv = {kWorkerPath, "--addr", daemon().address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return Subprocess::Spawn({argv, absl::StrCat(temp_dir(), "/", name, ".out"), ""});
  }
};

TEST_F(MultiProcessTest, ConcurrentComputeWorkersAllSucceedAndLeaveNothingBehind) {
  constexpr int kWorkers = 6;
  std::vector<Subprocess> workers;
  for (int seed = 1; seed <= kWorkers; ++seed) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Subprocess worker,
                                SpawnWorker({"--mode", "compute", "--seed", absl::StrCat(seed)},
                                            absl::StrCat("compute-", seed)));
    workers.push_back(std::move(worker));
  }
  for (int i = 0; i < kWorkers; ++i) {
    SCOPED_TRACE(absl::StrCat("worker --seed ", i + 1));
    absl::StatusOr<int> code = workers[i].WaitForExitCode(absl::Seconds(30));
    EXPECT_THAT(code, IsOkAndHolds(0)) << "worker output:\n" << workers[i].Output();
  }
  // Each worker closed its session before exiting: nothing may be left, at once.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse sessions, api().ListSessions());
  EXPECT_THAT(sessions.sessions(), ::testing::IsEmpty());
  EXPECT_THAT(api().MemoryUsedBytes(), IsOkAndHolds(0));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::StatusResponse status, api().Status());
  EXPECT_EQ(status.arrays(), 0);
}

// Killed in the middle of an upload in gRPC messages, or of one through the session's staging
// region (host shared memory that the daemon maps too).
class KilledMidUploadTest : public MultiProcessTest, public ::testing::WithParamInterface<bool> {};

TEST_P(KilledMidUploadTest, ClientKilledMidUploadLeavesNothingBehindOnceItsLeaseLapses) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      Subprocess worker,
      SpawnWorker({"--mode", "upload-forever", "--lease-ms", absl::StrCat(kLeaseMs),
                   "--shared-memory", GetParam() ? "1" : "0"},
                  "upload-forever"));
  ASSERT_TRUE(PollUntil(
      [&] { return absl::StrContains(worker.Output(), "uploading") || !worker.Running(); },
      absl::Seconds(20)));
  ASSERT_TRUE(worker.Running()) << "worker output:\n" << worker.Output();
  // The uploads took the way asked for: the daemon mapped a 64 MiB staging region, or none.
  if (GetParam()) {
    EXPECT_THAT(daemon().Log(),
                ContainsRegex(absl::StrCat("host memory region mapped: region=m-[^ ]+ bytes=",
                                           int64_t{64} << 20)));
  } else {
    EXPECT_THAT(daemon().Log(), Not(HasSubstr("host memory region mapped")));
  }

  // The worker's session holds its 64 MiB array while the uploads go on.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse before, api().ListSessions());
  ASSERT_EQ(before.sessions_size(), 1);
  EXPECT_EQ(before.sessions(0).client_pid(), worker.pid());
  EXPECT_EQ(before.sessions(0).memory_bytes(), int64_t{64} << 20);
  EXPECT_THAT(api().MemoryUsedBytes(), IsOkAndHolds(int64_t{64} << 20));

  GPUKIT_ASSERT_OK(worker.Signal(SIGKILL));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int wait_status, worker.Wait(absl::Seconds(5)));
  ASSERT_TRUE(WIFSIGNALED(wait_status)) << DescribeWaitStatus(wait_status);

  // The lease lapses, and the reaper (once a second) frees the session's memory.
  const absl::Time killed_at = absl::Now();
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Milliseconds(kLeaseMs) + absl::Seconds(3)));
  // Not before the lease could have lapsed: the daemon must not drop live sessions early.
  EXPECT_GE(absl::Now() - killed_at, absl::Milliseconds(kLeaseMs) - absl::Milliseconds(100));
  ExpectDaemonServesAnotherClient();
}

INSTANTIATE_TEST_SUITE_P(Transfers, KilledMidUploadTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ThroughSharedMemory" : "InGrpcMessages";
                         });

}  // namespace
}  // namespace gpukit::testing
