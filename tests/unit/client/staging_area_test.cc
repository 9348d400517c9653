// StagingArea against a fake daemon: which transfers it takes, how its region grows, the
// pieces of transfers above the cap, when it falls back to gRPC for good, and that bytes land
// exactly, from several threads at once.
#include "client/cpp/staging_area.h"

#include <cerrno>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"
#include <sys/mman.h>

namespace gpukit::internal {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Arrays and regions in this process's memory; records every call.
class FakeDaemon : public HostMemoryCalls {
 public:
  void AddArray(const std::string& handle, int64_t bytes) {
    absl::MutexLock lock(&mu_);
    arrays_[handle].assign(static_cast<size_t>(bytes), '\0');
  }
  std::vector<char> array(const std::string& handle) {
    absl::MutexLock lock(&mu_);
    return arrays_[handle];
  }
  std::vector<std::string> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  void ClearCalls() {
    absl::MutexLock lock(&mu_);
    calls_.clear();
  }
  void FailRegistrations(absl::Status status) {
    absl::MutexLock lock(&mu_);
    register_error_ = std::move(status);
  }
  void FailCopies(absl::Status status) {
    absl::MutexLock lock(&mu_);
    copy_error_ = std::move(status);
  }
  // Like limits.maxArraySize: larger regions are INVALID_ARGUMENT.
  void LimitRegions(int64_t bytes) {
    absl::MutexLock lock(&mu_);
    max_region_bytes_ = bytes;
  }
  int regions() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(regions_.size());
  }
  // Where the client's mapping of a region was (registered now or earlier).
  const char* mapped_at(const std::string& region) {
    absl::MutexLock lock(&mu_);
    return mapped_at_[region];
  }

  absl::StatusOr<RegisteredRegion> RegisterRegion(int64_t bytes) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back(absl::StrCat("register ", bytes));
    if (!register_error_.ok()) return register_error_;
    if (bytes > max_region_bytes_) return absl::InvalidArgumentError("region too large");
    void* data = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) return absl::ResourceExhaustedError("mmap");
    const std::string handle = absl::StrCat("m-", next_region_++);
    regions_[handle] = {static_cast<char*>(data), bytes};
    mapped_at_[handle] = static_cast<char*>(data);
    return RegisteredRegion{handle, HostMapping(static_cast<char*>(data), bytes)};
  }

  absl::Status UnregisterRegion(const std::string& region) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back(absl::StrCat("unregister ", region));
    if (regions_.erase(region) == 0) return absl::NotFoundError(region);
    return absl::OkStatus();
  }

  absl::Status CopyRegion(bool to_array, const std::string& array, int64_t array_offset,
                          const std::string& region, int64_t region_offset,
                          int64_t bytes) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back(absl::StrCat(to_array ? "to " : "from ", array, " at ", array_offset, " ",
                                  bytes, " via ", region, "+", region_offset));
    if (!copy_error_.ok()) return copy_error_;
    auto r = regions_.find(region);
    auto a = arrays_.find(array);
    if (r == regions_.end() || a == arrays_.end()) return absl::NotFoundError("no such thing");
    if (region_offset + bytes > r->second.second ||
        array_offset + bytes > static_cast<int64_t>(a->second.size())) {
      return absl::OutOfRangeError("range");
    }
    char* host = r->second.first + region_offset;
    char* device = a->second.data() + array_offset;
    if (to_array) {
      std::memcpy(device, host, static_cast<size_t>(bytes));
    } else {
      std::memcpy(host, device, static_cast<size_t>(bytes));
    }
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::vector<char>> arrays_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::pair<char*, int64_t>> regions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, const char*> mapped_at_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  absl::Status register_error_ ABSL_GUARDED_BY(mu_);
  absl::Status copy_error_ ABSL_GUARDED_BY(mu_);
  int64_t max_region_bytes_ ABSL_GUARDED_BY(mu_) = int64_t{1} << 40;
  int next_region_ ABSL_GUARDED_BY(mu_) = 1;
};

std::vector<char> Bytes(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> bytes(static_cast<size_t>(count));
  for (char& b : bytes) b = static_cast<char>(rng());
  return bytes;
}

// Small sizes keep the buffers small: transfers from 16 bytes, regions up to 64 bytes.
StagingOptions SmallOptions() {
  StagingOptions options;
  options.min_bytes = 16;
  options.max_region_bytes = 64;
  return options;
}

struct RegionCase {
  const char* name;
  int64_t current_bytes;
  int64_t transfer_bytes;
  int64_t expected_bytes;
};

class StagingRegionBytesTest : public ::testing::TestWithParam<RegionCase> {};

TEST_P(StagingRegionBytesTest, KeepsWhatFitsElseRoundsUpToAPowerOfTwoUnderTheCap) {
  const RegionCase& c = GetParam();
  EXPECT_EQ(StagingRegionBytes(c.current_bytes, c.transfer_bytes, /*max_region_bytes=*/1024),
            c.expected_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Table, StagingRegionBytesTest,
    ::testing::Values(RegionCase{"FirstExactPowerOfTwo", 0, 64, 64},
                      RegionCase{"FirstRoundsUp", 0, 65, 128},
                      RegionCase{"FirstAboveTheCapIsTheCap", 0, 5000, 1024},
                      RegionCase{"FirstCapNotAPowerOfTwo", 0, 700, 1024},
                      RegionCase{"SmallerTransferKeepsTheRegion", 512, 100, 512},
                      RegionCase{"EqualTransferKeepsTheRegion", 128, 128, 128},
                      RegionCase{"LargerTransferGrowsIt", 128, 129, 256},
                      RegionCase{"AtTheCapStaysForAnything", 1024, 1 << 30, 1024}),
    [](const ::testing::TestParamInfo<RegionCase>& info) { return info.param.name; });

TEST(StagingRegionBytesTest, CapThatIsNoPowerOfTwoBoundsTheRoundedSize) {
  EXPECT_EQ(StagingRegionBytes(0, 700, /*max_region_bytes=*/1000), 1000);
  EXPECT_EQ(StagingRegionBytes(0, 400, /*max_region_bytes=*/1000), 512);
}

TEST(StagingAreaTest, LeavesSmallTransfersAndEveryTransferWhenDisabledToGrpc) {
  FakeDaemon daemon;
  daemon.AddArray("a", 100);
  const std::vector<char> data = Bytes(100, 1);
  StagingArea area(daemon, SmallOptions());
  EXPECT_EQ(area.Write("a", data.data(), 15), std::nullopt);
  EXPECT_EQ(area.Write("a", data.data(), 0), std::nullopt);
  StagingOptions off = SmallOptions();
  off.enabled = false;
  StagingArea disabled(daemon, off);
  EXPECT_EQ(disabled.Write("a", data.data(), 100), std::nullopt);
  std::vector<char> out(100);
  EXPECT_EQ(disabled.Read("a", out.data(), 100), std::nullopt);
  EXPECT_THAT(daemon.calls(), IsEmpty());
}

TEST(StagingAreaTest, RegistersOnFirstUseReusesTheRegionAndGrowsItByPowersOfTwo) {
  FakeDaemon daemon;
  daemon.AddArray("a", 40);
  daemon.AddArray("b", 20);
  StagingOptions options = SmallOptions();
  options.max_region_bytes = 1024;
  StagingArea area(daemon, options);
  const std::vector<char> a = Bytes(40, 2);
  const std::vector<char> b = Bytes(20, 3);

  ASSERT_THAT(area.Write("b", b.data(), 20), ::testing::Optional(IsOk()));
  ASSERT_THAT(area.Write("b", b.data(), 20), ::testing::Optional(IsOk()));
  EXPECT_THAT(daemon.calls(),
              ElementsAre("register 32", "to b at 0 20 via m-1+0", "to b at 0 20 via m-1+0"));
  daemon.ClearCalls();
  ASSERT_THAT(area.Write("a", a.data(), 40), ::testing::Optional(IsOk()));
  EXPECT_THAT(daemon.calls(),
              ElementsAre("unregister m-1", "register 64", "to a at 0 40 via m-2+0"));
  EXPECT_EQ(daemon.array("a"), a);
  EXPECT_EQ(daemon.array("b"), b);
  EXPECT_EQ(daemon.regions(), 1) << "the smaller region was unregistered";

  daemon.ClearCalls();
  std::vector<char> out(20);
  ASSERT_THAT(area.Read("b", out.data(), 20), ::testing::Optional(IsOk()));
  EXPECT_EQ(out, b);
  EXPECT_THAT(daemon.calls(), ElementsAre("from b at 0 20 via m-2+0")) << "a smaller read fits";
}

TEST(StagingAreaTest, TransfersAboveTheCapGoInRegionSizedPiecesAtIncreasingArrayOffsets) {
  FakeDaemon daemon;
  daemon.AddArray("a", 200);
  StagingArea area(daemon, SmallOptions());  // regions of at most 64 bytes
  const std::vector<char> data = Bytes(200, 4);
  ASSERT_THAT(area.Write("a", data.data(), 200), ::testing::Optional(IsOk()));
  EXPECT_THAT(daemon.calls(),
              ElementsAre("register 64", "to a at 0 64 via m-1+0", "to a at 64 64 via m-1+0",
                          "to a at 128 64 via m-1+0", "to a at 192 8 via m-1+0"));
  EXPECT_EQ(daemon.array("a"), data);

  daemon.ClearCalls();
  std::vector<char> out(200, 'x');
  ASSERT_THAT(area.Read("a", out.data(), 200), ::testing::Optional(IsOk()));
  EXPECT_EQ(out, data);
  EXPECT_THAT(daemon.calls(),
              ElementsAre("from a at 0 64 via m-1+0", "from a at 64 64 via m-1+0",
                          "from a at 128 64 via m-1+0", "from a at 192 8 via m-1+0"));
}

class NoDescriptorChannelTest : public ::testing::TestWithParam<absl::StatusCode> {};

TEST_P(NoDescriptorChannelTest, FallsBackToGrpcForGoodAfterOneAttempt) {
  FakeDaemon daemon;
  daemon.AddArray("a", 100);
  daemon.FailRegistrations(absl::Status(GetParam(), "no descriptor channel"));
  StagingArea area(daemon, SmallOptions());
  const std::vector<char> data = Bytes(100, 5);
  EXPECT_EQ(area.Write("a", data.data(), 100), std::nullopt);
  daemon.FailRegistrations(absl::OkStatus());  // even if it would work now
  std::vector<char> out(100);
  EXPECT_EQ(area.Read("a", out.data(), 100), std::nullopt);
  EXPECT_EQ(area.Write("a", data.data(), 100), std::nullopt);
  EXPECT_THAT(daemon.calls(), ElementsAre("register 64"));
}

INSTANTIATE_TEST_SUITE_P(Codes, NoDescriptorChannelTest,
                         ::testing::Values(absl::StatusCode::kUnavailable,
                                           absl::StatusCode::kFailedPrecondition,
                                           absl::StatusCode::kUnimplemented));

TEST(StagingAreaTest, OtherRegistrationErrorsAreReturnedAndTheNextTransferTriesAgain) {
  FakeDaemon daemon;
  daemon.AddArray("a", 32);
  daemon.FailRegistrations(absl::ResourceExhaustedError("64 regions"));
  StagingArea area(daemon, SmallOptions());
  const std::vector<char> data = Bytes(32, 6);
  EXPECT_THAT(area.Write("a", data.data(), 32),
              ::testing::Optional(StatusIs(absl::StatusCode::kResourceExhausted)));
  daemon.FailRegistrations(absl::OkStatus());
  EXPECT_THAT(area.Write("a", data.data(), 32), ::testing::Optional(IsOk()));
  EXPECT_EQ(daemon.array("a"), data);
}

TEST(StagingAreaTest, CopyErrorsAreReturnedAndTheRegionIsKept) {
  FakeDaemon daemon;
  daemon.AddArray("a", 32);
  StagingArea area(daemon, SmallOptions());
  const std::vector<char> data = Bytes(32, 7);
  daemon.FailCopies(absl::NotFoundError("array handle"));
  EXPECT_THAT(area.Write("a", data.data(), 32),
              ::testing::Optional(StatusIs(absl::StatusCode::kNotFound)));
  daemon.FailCopies(absl::OkStatus());
  EXPECT_THAT(area.Write("a", data.data(), 32), ::testing::Optional(IsOk()));
  EXPECT_THAT(daemon.calls(),
              ElementsAre("register 32", "to a at 0 32 via m-1+0", "to a at 0 32 via m-1+0"));
}

TEST(StagingAreaTest, ARoundedSizeAboveTheDaemonsLimitIsAskedAgainAsTheTransfersSize) {
  FakeDaemon daemon;
  daemon.AddArray("a", 40);
  daemon.LimitRegions(40);  // limits.maxArraySize below the next power of two
  StagingArea area(daemon, SmallOptions());
  const std::vector<char> data = Bytes(40, 8);
  EXPECT_THAT(area.Write("a", data.data(), 40), ::testing::Optional(IsOk()));
  EXPECT_THAT(daemon.calls(), ElementsAre("register 64", "register 40", "to a at 0 40 via m-1+0"));
  EXPECT_EQ(daemon.array("a"), data);
}

TEST(StagingAreaTest, ReleaseUnmapsTheRegionAndLaterTransfersGoToGrpc) {
  FakeDaemon daemon;
  daemon.AddArray("a", 64);
  StagingArea area(daemon, SmallOptions());
  const std::vector<char> data = Bytes(64, 9);
  ASSERT_THAT(area.Write("a", data.data(), 64), ::testing::Optional(IsOk()));
  daemon.ClearCalls();
  area.Release();
  EXPECT_EQ(area.Write("a", data.data(), 64), std::nullopt);
  EXPECT_THAT(daemon.calls(), IsEmpty()) << "the session's Close unregistered it already";
}

// Whether [data, data + bytes) is mapped in this process: msync fails with ENOMEM where not.
bool Mapped(const char* data, int64_t bytes) {
  return ::msync(const_cast<char*>(data), static_cast<size_t>(bytes), MS_ASYNC) == 0 ||
         errno != ENOMEM;
}

TEST(StagingAreaTest, ReleaseAndGrowingUnmapThisProcesssMappings) {
  FakeDaemon daemon;
  daemon.AddArray("a", 8192);
  StagingOptions options;
  options.min_bytes = 1;
  options.max_region_bytes = 8192;
  StagingArea area(daemon, options);
  const std::vector<char> data = Bytes(8192, 10);
  ASSERT_THAT(area.Write("a", data.data(), 4096), ::testing::Optional(IsOk()));
  const char* first = daemon.mapped_at("m-1");
  EXPECT_TRUE(Mapped(first, 4096));
  ASSERT_THAT(area.Write("a", data.data(), 8192), ::testing::Optional(IsOk()));
  const char* second = daemon.mapped_at("m-2");
  // The larger mapping may take the smaller one's addresses, which were free by then.
  const bool reused = first >= second && first < second + 8192;
  EXPECT_TRUE(reused || !Mapped(first, 4096)) << "the smaller region was unmapped when it grew";
  EXPECT_TRUE(Mapped(second, 8192));
  area.Release();
  EXPECT_FALSE(Mapped(second, 8192));
}

TEST(StagingAreaTest, ConcurrentTransfersFromFourThreadsLandExactly) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  FakeDaemon daemon;
  StagingArea area(daemon, SmallOptions());
  // Sizes below, at and above the threshold (16) and above the cap (64).
  const int64_t sizes[] = {15, 16, 17, 63, 64, 65, 200, 1000};
  constexpr int kThreads = 4;
  for (int t = 0; t < kThreads; ++t) {
    for (int64_t size : sizes) daemon.AddArray(absl::StrCat("t", t, "-", size), size);
  }
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::vector<int> mismatches(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (int64_t size : sizes) {
          const std::string array = absl::StrCat("t", t, "-", size);
          const std::vector<char> data = Bytes(size, seed + t * 1000 + round);
          std::optional<absl::Status> wrote = area.Write(array, data.data(), size);
          if (size < 16) {
            if (wrote.has_value()) ++mismatches[t];
            continue;
          }
          std::vector<char> out(static_cast<size_t>(size));
          std::optional<absl::Status> read = area.Read(array, out.data(), size);
          if (!wrote.has_value() || !wrote->ok() || !read.has_value() || !read->ok() ||
              out != data) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

}  // namespace
}  // namespace gpukit::internal
