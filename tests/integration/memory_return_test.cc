// Memory that returns: rounds of concurrent sessions that upload large arrays through gRPC
// messages and close leave gpukitd's resident memory where the first round left it. Before the
// fix, glibc kept what those rounds had freed (its mmap threshold rises with every large free,
// and each thread's arena keeps its own free memory): idle RSS grew by about 200-350 MiB a
// round, up to 1.5 GiB after six rounds with nothing held.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

constexpr int kRounds = 6;
constexpr int kSessions = 8;
constexpr int kArraysPerSession = 4;
constexpr int64_t kArrayBytes = int64_t{16} << 20;
constexpr int64_t kMiB = int64_t{1} << 20;
// How far the idle RSS after the last round may be above the first round's.
constexpr int64_t kAllowedGrowthBytes = 64 * kMiB;

// VmRSS of process `pid` in bytes, from /proc/<pid>/status.
absl::StatusOr<int64_t> ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  if (!status) return absl::NotFoundError(absl::StrCat("no /proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmRSS:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    int64_t kib = 0;
    if (!absl::ConsumeSuffix(&rest, " kB") || !absl::SimpleAtoi(rest, &kib)) {
      return absl::InternalError(absl::StrCat("cannot read \"", line, "\""));
    }
    return kib * 1024;
  }
  return absl::NotFoundError(absl::StrCat("/proc/", pid, "/status has no VmRSS"));
}

// gpukitd's resident bytes, read every 100 ms until they are at most `limit` or `patience` has
// passed: jemalloc returns freed pages to the system within about a second of their free
// (runtime/base/allocator_settings.h), so a reading right after the work may still count them.
// Returns the last reading.
absl::StatusOr<int64_t> SettledResidentBytes(pid_t pid, int64_t limit, absl::Duration patience) {
  const absl::Time deadline = absl::Now() + patience;
  for (;;) {
    GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ResidentBytes(pid));
    if (bytes <= limit || absl::Now() >= deadline) return bytes;
    absl::SleepFor(absl::Milliseconds(100));
  }
}

// How long the idle daemon's resident memory may take to come back down.
constexpr absl::Duration kSettleTime = absl::Seconds(10);

// One client of a round: opens a session, uploads `kArraysPerSession` arrays through gRPC
// messages (RawApi: no shared memory) and closes it.
absl::Status UploadAndClose(const std::string& address, const std::string& data) {
  GPUKIT_ASSIGN_OR_RETURN(RawApi api, RawApi::Connect(address));
  GPUKIT_ASSIGN_OR_RETURN(std::string session, api.OpenSession("rss"));
  for (int i = 0; i < kArraysPerSession; ++i) {
    GPUKIT_ASSIGN_OR_RETURN(v1::ArrayInfo array,
                            api.CreateArray(session, {kArrayBytes}, v1::DTYPE_UINT8));
    GPUKIT_ASSIGN_OR_RETURN(v1::UploadResponse upload,
                            api.UploadBytes(session, array.handle(), data));
    if (upload.bytes_written() != kArrayBytes) {
      return absl::InternalError(absl::StrCat("wrote ", upload.bytes_written(), " bytes"));
    }
  }
  return api.Close(session).status();
}

class MemoryReturnTest : public DaemonTest {};

TEST_F(MemoryReturnTest, IdleResidentMemoryStaysNearTheFirstRoundsAfterUploadRounds) {
  const std::string data(kArrayBytes, '\x5a');
  std::vector<int64_t> idle_rss;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<absl::Status> results(kSessions);
    std::vector<std::thread> clients;
    for (int i = 0; i < kSessions; ++i) {
      clients.emplace_back([&, i] { results[i] = UploadAndClose(daemon().address(), data); });
    }
    for (std::thread& client : clients) client.join();
    for (const absl::Status& result : results) GPUKIT_ASSERT_OK(result) << "round " << round;
    ASSERT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(10))) << "round " << round;
    GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t rss, ResidentBytes(daemon().pid()));
    idle_rss.push_back(rss);
  }
  // The last round's, once freed pages had their time to go back.
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      idle_rss.back(),
      SettledResidentBytes(daemon().pid(), idle_rss.front() + kAllowedGrowthBytes, kSettleTime));
  const std::string rounds = absl::StrJoin(idle_rss, " -> ", [](std::string* out, int64_t bytes) {
    absl::StrAppend(out, bytes / kMiB);
  });
  std::cout << "gpukitd idle RSS after each round (MiB): " << rounds << "\n";
  EXPECT_LE(idle_rss.back() - idle_rss.front(), kAllowedGrowthBytes)
      << "idle RSS after each round (MiB): " << rounds;
  ExpectDaemonServesAnotherClient();
}

// One 256 MiB array at a time, uploaded and freed three times: the daemon's idle RSS comes
// back to where it was. Also prints the uploads' throughput (the cost of the allocator
// settings on the transfer path is read from this line; nothing asserts on time).
TEST_F(MemoryReturnTest, LargeUploadsLeaveIdleResidentMemoryWhereItWas) {
  constexpr int64_t kLargeBytes = 256 * kMiB;
  constexpr int kUploads = 3;
  const std::string data(kLargeBytes, '\x5a');
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api().OpenSession("rss"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t rss_before, ResidentBytes(daemon().pid()));
  std::vector<double> mib_per_s;
  for (int i = 0; i < kUploads; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo array,
                                api().CreateArray(session, {kLargeBytes}, v1::DTYPE_UINT8));
    const absl::Time start = absl::Now();
    GPUKIT_ASSERT_OK_AND_ASSIGN(v1::UploadResponse upload,
                                api().UploadBytes(session, array.handle(), data));
    mib_per_s.push_back(256 / absl::ToDoubleSeconds(absl::Now() - start));
    EXPECT_EQ(upload.bytes_written(), kLargeBytes);
    GPUKIT_ASSERT_OK(api().Free(session, array.handle()).status());
  }
  GPUKIT_ASSERT_OK(api().Close(session).status());
  ASSERT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(10)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      int64_t rss_after,
      SettledResidentBytes(daemon().pid(), rss_before + kAllowedGrowthBytes, kSettleTime));
  std::sort(mib_per_s.begin(), mib_per_s.end());
  std::cout << "256 MiB upload through gRPC messages: median " << mib_per_s[kUploads / 2]
            << " MiB/s (of " << absl::StrJoin(mib_per_s, ", ") << "); idle RSS "
            << rss_before / kMiB << " -> " << rss_after / kMiB << " MiB\n";
  EXPECT_LE(rss_after - rss_before, kAllowedGrowthBytes)
      << "idle RSS " << rss_before / kMiB << " -> " << rss_after / kMiB << " MiB";
}

}  // namespace
}  // namespace gpukit::testing
