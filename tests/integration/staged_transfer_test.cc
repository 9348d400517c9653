// Plain transfers (Array::Write/Read of bytes, Client::FromBytes) through the session's staging
// region, against the real gpukitd: which transfers take it, that the bytes travel through it
// (they are in this process's mapping of it, which gRPC messages would never touch), how it
// grows, that data round-trips exactly from several threads for sizes around the threshold
// and above the cap, and that the option off, a TCP connection and a missing descriptor
// channel all leave the bytes in gRPC messages.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cpp/staging_area.h"
#include "gmock/gmock.h"
#include "gpukit/client.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr int64_t kThreshold = ::gpukit::internal::kStagingMinBytes;
constexpr int64_t kCap = ::gpukit::internal::kStagingMaxRegionBytes;

// A mapping of this process's memory: [data, data + bytes).
struct Mapping {
  const char* data;
  int64_t bytes;
};

// This process's mappings of staging regions: the memfds the client names "gpukit-staging"
// (/proc/self/maps lists them as "/memfd:gpukit-staging (deleted)").
std::vector<Mapping> StagingMappings() {
  std::vector<Mapping> mappings;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:gpukit-staging") == std::string::npos) continue;
    const std::vector<std::string> range = absl::StrSplit(line.substr(0, line.find(' ')), '-');
    uint64_t begin = 0, end = 0;
    if (range.size() != 2 || !absl::SimpleHexAtoi(range[0], &begin) ||
        !absl::SimpleHexAtoi(range[1], &end)) {
      ADD_FAILURE() << "cannot parse " << line;
      continue;
    }
    // An address of this process, as /proc lists it.
    mappings.push_back({reinterpret_cast<const char*>(begin),  // NOLINT(performance-no-int-to-ptr)
                        static_cast<int64_t>(end - begin)});
  }
  return mappings;
}

std::vector<int64_t> MappingSizes(const std::vector<Mapping>& mappings) {
  std::vector<int64_t> sizes;
  sizes.reserve(mappings.size());
  for (const Mapping& m : mappings) sizes.push_back(m.bytes);
  return sizes;
}

// The sizes of the host memory regions the daemon mapped, in order, from its debug log.
std::vector<int64_t> RegionsMapped(const std::string& log) {
  std::vector<int64_t> sizes;
  constexpr absl::string_view kLine = "host memory region mapped: region=";
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (line.find(kLine) == absl::string_view::npos) continue;
    const size_t at = line.find(" bytes=");
    int64_t bytes = 0;
    if (at == absl::string_view::npos || !absl::SimpleAtoi(line.substr(at + 7), &bytes)) {
      ADD_FAILURE() << "cannot parse " << line;
      continue;
    }
    sizes.push_back(bytes);
  }
  return sizes;
}

// `bytes` pseudo-random bytes from `seed` (xorshift: fast enough for hundreds of MiB).
std::vector<char> PatternBytes(int64_t bytes, uint64_t seed) {
  std::vector<char> data(static_cast<size_t>(bytes));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(data.data() + i, &x, static_cast<size_t>(std::min<int64_t>(8, bytes - i)));
  }
  return data;
}

// Index of the first byte where a and b differ, -1 if none, for a readable failure.
int64_t FirstDifference(const std::vector<char>& a, const std::vector<char>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

class StagedTransferTest : public DaemonTest {
 protected:
  // Writes fresh bytes into a new uint8 array of `bytes` and reads them back; returns the
  // first difference (-1: none).
  static int64_t RoundTrip(Client& client, int64_t bytes, uint64_t seed) {
    const std::vector<char> data = PatternBytes(bytes, seed);
    absl::StatusOr<Array> array = client.FromBytes(data.data(), bytes, {bytes}, DType::kUInt8);
    if (!array.ok()) {
      ADD_FAILURE() << "FromBytes of " << bytes << ": " << array.status();
      return 0;
    }
    std::vector<char> out(static_cast<size_t>(bytes));
    if (absl::Status read = array->Read(out.data(), bytes); !read.ok()) {
      ADD_FAILURE() << "Read of " << bytes << ": " << read;
      return 0;
    }
    return FirstDifference(data, out);
  }
};

TEST_F(StagedTransferTest, TransfersFromTheThresholdUpTravelThroughTheStagingRegion) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  // Just below the threshold: gRPC messages, and no region anywhere.
  EXPECT_EQ(RoundTrip(*client, kThreshold - 1, 1), -1);
  EXPECT_THAT(RegionsMapped(daemon().Log()), IsEmpty());
  EXPECT_THAT(StagingMappings(), IsEmpty());

  // At the threshold: a region of just that size, mapped here and by the daemon, and the bytes
  // written are in it (the client copied them there for the daemon).
  constexpr int64_t kCount = kThreshold / sizeof(float);
  std::vector<float> values(kCount);
  for (int64_t i = 0; i < kCount; ++i) values[i] = static_cast<float>(i % 1000) - 250.5f;
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array array, client->FromVector<float>(values, {kCount}));
  EXPECT_THAT(RegionsMapped(daemon().Log()), ElementsAre(kThreshold));
  std::vector<Mapping> mappings = StagingMappings();
  ASSERT_THAT(MappingSizes(mappings), ElementsAre(kThreshold));
  EXPECT_EQ(std::memcmp(mappings[0].data, reinterpret_cast<const char*>(values.data()), kThreshold),
            0);

  // A result the daemon computed comes back through the region: it is there after the Read,
  // put by the daemon's CopyToHostMemory (gRPC messages would have left the region alone).
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array doubled, client->Add(array, array));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> out, doubled.ToVector<float>());
  for (int64_t i = 0; i < kCount; ++i) ASSERT_EQ(out[i], values[i] + values[i]) << i;
  EXPECT_EQ(std::memcmp(mappings[0].data, reinterpret_cast<const char*>(out.data()), kThreshold),
            0);

  // A larger transfer, no power of two: the region is re-registered at the next power of two,
  // and the smaller one is gone from this process.
  const int64_t larger = 3 * (int64_t{1} << 20) + 5;
  EXPECT_EQ(RoundTrip(*client, larger, 2), -1);
  EXPECT_THAT(RegionsMapped(daemon().Log()), ElementsAre(kThreshold, int64_t{4} << 20));
  mappings = StagingMappings();
  ASSERT_THAT(MappingSizes(mappings), ElementsAre(int64_t{4} << 20));

  // Smaller transfers reuse it.
  EXPECT_EQ(RoundTrip(*client, kThreshold + 1, 3), -1);
  EXPECT_THAT(RegionsMapped(daemon().Log()), SizeIs(2));

  // Closing the session unmaps it here; the daemon dropped its side with the session.
  GPUKIT_ASSERT_OK(client->Close());
  EXPECT_THAT(StagingMappings(), IsEmpty());
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(5)));
}

TEST_F(StagedTransferTest, ConcurrentTransfersAroundTheThresholdAndAboveTheCapRoundTripExactly) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  // Below, at and above the threshold, a size that is no power of two, and one above the cap,
  // which goes in cap-sized pieces (the last one short).
  const std::vector<int64_t> sizes = {kThreshold - 7, kThreshold, kThreshold + 4099,
                                      (int64_t{5} << 20) + 3, kCap + (int64_t{1} << 20) + 11};
  constexpr int kThreads = 4;
  std::vector<std::vector<int64_t>> differences(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < sizes.size(); ++i) {
        // Each thread goes through the sizes in its own order, so different sizes overlap.
        const int64_t bytes = sizes[(i + t) % sizes.size()];
        differences[t].push_back(RoundTrip(*client, bytes, seed + t * 100 + i));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_THAT(differences[t], ElementsAre(-1, -1, -1, -1, -1)) << "thread " << t;
  }
  // The region grew up to the cap and never past it.
  const std::vector<int64_t> regions = RegionsMapped(daemon().Log());
  ASSERT_THAT(regions, ::testing::Not(IsEmpty()));
  EXPECT_EQ(regions.back(), kCap);
  for (int64_t bytes : regions) EXPECT_LE(bytes, kCap);
  EXPECT_THAT(MappingSizes(StagingMappings()), ElementsAre(kCap));
}

TEST_F(StagedTransferTest, WithTheOptionOffTransfersStayInGrpcMessages) {
  ClientOptions options = ClientOptionsFor("no-shm");
  options.use_shared_memory = false;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  EXPECT_EQ(RoundTrip(*client, (int64_t{9} << 20) + 1, 4), -1);
  EXPECT_THAT(RegionsMapped(daemon().Log()), IsEmpty());
  EXPECT_THAT(StagingMappings(), IsEmpty());
  // Explicit host memory still works in such a session.
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostMemory memory, client->RegisterHostMemory(4096));
  EXPECT_THAT(RegionsMapped(daemon().Log()), ElementsAre(4096));
}

TEST_F(StagedTransferTest, WithoutADescriptorChannelTheSessionFallsBackToGrpcForGood) {
  // The descriptor channel's socket out of reach, as for a client in a container that was
  // given the gRPC socket alone.
  const std::string channel = daemon().socket_path() + ".fd";
  const std::string away = channel + ".away";
  ASSERT_EQ(std::rename(channel.c_str(), away.c_str()), 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  EXPECT_EQ(RoundTrip(*client, int64_t{2} << 20, 5), -1);
  EXPECT_THAT(StagingMappings(), IsEmpty()) << "nothing left mapped after the failed attempt";

  // Back in reach: this session stays with gRPC messages, a new one shares memory.
  ASSERT_EQ(std::rename(away.c_str(), channel.c_str()), 0);
  EXPECT_EQ(RoundTrip(*client, int64_t{2} << 20, 6), -1);
  EXPECT_THAT(RegionsMapped(daemon().Log()), IsEmpty());
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> fresh, Connect("fresh"));
  EXPECT_EQ(RoundTrip(*fresh, int64_t{2} << 20, 7), -1);
  EXPECT_THAT(RegionsMapped(daemon().Log()), ElementsAre(int64_t{2} << 20));
}

// The daemon also listens on TCP (a port of its choosing, loopback without TLS), where the
// token "staged-transfer-token" (its SHA-256 below) is tenant "tcp".
class StagedTransferTcpTest : public StagedTransferTest {
 protected:
  std::string DaemonConfigJson() const override {
    return R"({"sessions": {"minLease": "200ms"}, "access": {"tokens": [{"sha256":
      "3bde5113829e34543e2bd2760ddb16a9269c8301c29cf12398dffec881c21cee", "tenant": "tcp"}]}})";
  }
  void ConfigureDaemon(DaemonOptions& options) const override {
    options.extra_args = {"--listen", "127.0.0.1:0", "--insecure-tcp"};
  }
};

TEST_F(StagedTransferTcpTest, OverTcpTransfersStayInGrpcMessages) {
  // The port it bound, from its log (AdminService.Status lists "127.0.0.1:0" as configured).
  const std::string listening = "listening on 127.0.0.1:";
  ASSERT_TRUE(
      PollUntil([&] { return absl::StrContains(daemon().Log(), listening); }, absl::Seconds(5)));
  const std::string log = daemon().Log();
  const size_t at = log.find(listening) + listening.size();
  const std::string tcp = absl::StrCat("127.0.0.1:", log.substr(at, log.find('\n', at) - at));
  ClientOptions options = ClientOptionsFor("tcp");
  options.address = tcp;
  options.token = "staged-transfer-token";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  EXPECT_EQ(RoundTrip(*client, (int64_t{6} << 20) + 3, 8), -1);
  EXPECT_THAT(RegionsMapped(daemon().Log()), IsEmpty());
  EXPECT_THAT(StagingMappings(), IsEmpty());
  // The same daemon over its unix socket: shared memory.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> local, Connect("local"));
  EXPECT_EQ(RoundTrip(*local, (int64_t{6} << 20) + 3, 9), -1);
  EXPECT_THAT(RegionsMapped(daemon().Log()), ElementsAre(int64_t{8} << 20));
}

}  // namespace
}  // namespace gpukit::testing
