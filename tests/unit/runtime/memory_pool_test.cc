// MemoryPool's policy on a fake segment source: size classes, slabs, exact large segments,
// reuse, the cache cap, trimming under pressure, bad frees, and random use from several
// threads. The CUDA source under it is tested on the GPU (tests/gpu/cuda_device_test.cc).
#include "runtime/memory_pool.h"

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;

// What the fake source has mapped; outlives the pool so tests can look after it is gone.
struct FakeDevice {
  absl::Mutex mu;
  int64_t capacity_bytes = 1024 * kMiB;
  int64_t mapped_bytes ABSL_GUARDED_BY(mu) = 0;
  std::map<uint64_t, int64_t> mapped ABSL_GUARDED_BY(mu);  // address -> bytes
  uint64_t next_address ABSL_GUARDED_BY(mu) = uint64_t{1} << 40;
  int bad_unmaps ABSL_GUARDED_BY(mu) = 0;

  int64_t MappedBytes() {
    absl::MutexLock lock(&mu);
    return mapped_bytes;
  }
  size_t Segments() {
    absl::MutexLock lock(&mu);
    return mapped.size();
  }
  int BadUnmaps() {
    absl::MutexLock lock(&mu);
    return bad_unmaps;
  }
};

class FakeSource : public SegmentSource {
 public:
  FakeSource(std::shared_ptr<FakeDevice> device, int64_t granularity_bytes)
      : device_(std::move(device)), granularity_bytes_(granularity_bytes) {}
  int64_t granularity_bytes() const override { return granularity_bytes_; }
  absl::StatusOr<Segment> Map(int64_t bytes) override {
    EXPECT_EQ(bytes % granularity_bytes_, 0) << bytes;
    absl::MutexLock lock(&device_->mu);
    if (device_->mapped_bytes + bytes > device_->capacity_bytes) {
      return absl::ResourceExhaustedError("fake device out of memory");
    }
    Segment segment{device_->next_address, bytes, device_->next_address + 7};
    device_->next_address += static_cast<uint64_t>(bytes + granularity_bytes_);  // a gap
    device_->mapped.emplace(segment.address, bytes);
    device_->mapped_bytes += bytes;
    return segment;
  }
  void Unmap(const Segment& segment) override {
    absl::MutexLock lock(&device_->mu);
    auto it = device_->mapped.find(segment.address);
    if (it == device_->mapped.end() || it->second != segment.bytes ||
        segment.handle != segment.address + 7) {
      ++device_->bad_unmaps;
      return;
    }
    device_->mapped_bytes -= it->second;
    device_->mapped.erase(it);
  }

 private:
  const std::shared_ptr<FakeDevice> device_;
  const int64_t granularity_bytes_;
};

class MemoryPoolTest : public ::testing::Test {
 protected:
  std::unique_ptr<MemoryPool> MakePool(MemoryPoolOptions options = {},
                                       int64_t granularity_bytes = 2 * kMiB) {
    auto pool =
        MemoryPool::Create(std::make_unique<FakeSource>(device_, granularity_bytes), options);
    EXPECT_THAT(pool.status(), IsOk());
    return pool.ok() ? *std::move(pool) : nullptr;
  }

  std::shared_ptr<FakeDevice> device_ = std::make_shared<FakeDevice>();
};

class RoundedBytesTest : public MemoryPoolTest,
                         public ::testing::WithParamInterface<std::pair<int64_t, int64_t>> {};

TEST_P(RoundedBytesTest, RoundsToQuarterStepClassesOrTheGranularity) {
  auto pool = MakePool();
  const auto [request, rounded] = GetParam();
  EXPECT_EQ(pool->RoundedBytes(request), rounded) << "request " << request;
}

INSTANTIATE_TEST_SUITE_P(Classes, RoundedBytesTest,
                         ::testing::Values(std::pair{1, 256}, std::pair{256, 256},
                                           std::pair{257, 512}, std::pair{1000, 1024},
                                           std::pair{1024, 1024}, std::pair{1025, 1280},
                                           std::pair{1537, 1792}, std::pair{600 * kKiB, 640 * kKiB},
                                           std::pair{kMiB, kMiB}, std::pair{kMiB + 1, 2 * kMiB},
                                           std::pair{5 * kMiB, 6 * kMiB},
                                           std::pair{6 * kMiB, 6 * kMiB}));

TEST_F(MemoryPoolTest, SmallBlocksShareOneSlabWithoutOverlapping) {
  auto pool = MakePool();
  std::vector<PoolBlock> blocks;
  for (int i = 0; i < 100; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock block, pool->Allocate(1000));
    EXPECT_EQ(block.bytes, 1024);
    EXPECT_EQ(block.address % 256, 0u);
    EXPECT_TRUE(block.shares_segment);
    blocks.push_back(block);
  }
  EXPECT_EQ(pool->stats().maps, 1);
  EXPECT_EQ(device_->Segments(), 1u);
  std::set<uint64_t> addresses;
  for (const PoolBlock& block : blocks) {
    EXPECT_TRUE(addresses.insert(block.address).second) << "address handed out twice";
    EXPECT_GE(block.address, block.segment.address);
    EXPECT_LE(block.address + block.bytes, block.segment.address + block.segment.bytes);
  }
  EXPECT_EQ(pool->stats().in_use_bytes, 100 * 1024);
}

TEST_F(MemoryPoolTest, FreedBlockIsHandedOutAgainWithoutMapping) {
  auto pool = MakePool();
  for (int64_t bytes : {int64_t{64}, 3 * kMiB}) {
    SCOPED_TRACE(bytes);
    GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock first, pool->Allocate(bytes));
    ASSERT_THAT(pool->Free(first.address), IsOk());
    const int64_t maps = pool->stats().maps;
    GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock second, pool->Allocate(bytes));
    EXPECT_EQ(second.address, first.address);
    EXPECT_EQ(pool->stats().maps, maps);
    ASSERT_THAT(pool->Free(second.address), IsOk());
  }
  EXPECT_EQ(pool->stats().reused, 2);
  EXPECT_EQ(pool->stats().in_use_bytes, 0);
}

TEST_F(MemoryPoolTest, LargeRequestGetsASegmentOfItsOwn) {
  auto pool = MakePool();
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock a, pool->Allocate(3 * kMiB));
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock b, pool->Allocate(3 * kMiB));
  for (const PoolBlock& block : {a, b}) {
    EXPECT_FALSE(block.shares_segment);
    EXPECT_EQ(block.bytes, 4 * kMiB);
    EXPECT_EQ(block.address, block.segment.address);
    EXPECT_EQ(block.segment.bytes, 4 * kMiB);
    EXPECT_EQ(block.segment.handle, block.segment.address + 7) << "the source's handle is kept";
  }
  EXPECT_NE(a.segment.address, b.segment.address);
  EXPECT_EQ(device_->Segments(), 2u);
}

TEST_F(MemoryPoolTest, CachedLargeSegmentServesOnlyRequestsOfAboutItsSize) {
  auto pool = MakePool();
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock big, pool->Allocate(16 * kMiB));
  ASSERT_THAT(pool->Free(big.address), IsOk());
  // 2 MiB would waste 14 MiB of the cached segment: a new one is mapped.
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock small, pool->Allocate(2 * kMiB));
  EXPECT_NE(small.address, big.address);
  // 15 MiB + 1 rounds to 16 MiB: the cached segment.
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock again, pool->Allocate(15 * kMiB + 1));
  EXPECT_EQ(again.address, big.address);
}

TEST_F(MemoryPoolTest, KeepsAtMostTheCacheCapOfFreeMemory) {
  MemoryPoolOptions options;
  options.max_cached_bytes = 4 * kMiB;
  auto pool = MakePool(options);
  std::vector<PoolBlock> blocks;
  for (int i = 0; i < 3; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock block, pool->Allocate(4 * kMiB));
    blocks.push_back(block);
  }
  for (const PoolBlock& block : blocks) ASSERT_THAT(pool->Free(block.address), IsOk());
  EXPECT_EQ(device_->MappedBytes(), 4 * kMiB);
  EXPECT_EQ(pool->stats().mapped_bytes, 4 * kMiB);
  EXPECT_EQ(pool->stats().unmaps, 2);
}

TEST_F(MemoryPoolTest, TrimsAndRetriesWhenTheSourceIsOutOfMemory) {
  device_->capacity_bytes = 8 * kMiB;
  auto pool = MakePool();
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock cached, pool->Allocate(6 * kMiB));
  ASSERT_THAT(pool->Free(cached.address), IsOk());
  ASSERT_EQ(device_->MappedBytes(), 6 * kMiB) << "the freed segment stays cached";
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock whole, pool->Allocate(8 * kMiB));
  EXPECT_EQ(whole.bytes, 8 * kMiB);
  EXPECT_EQ(pool->stats().trims, 1);
  EXPECT_EQ(device_->MappedBytes(), 8 * kMiB);
}

TEST_F(MemoryPoolTest, OutOfMemoryAfterTrimmingIsResourceExhaustedAndThePoolGoesOn) {
  device_->capacity_bytes = 4 * kMiB;
  auto pool = MakePool();
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock held, pool->Allocate(4 * kMiB));
  EXPECT_THAT(pool->Allocate(2 * kMiB).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("holds 4194304 bytes in use of 4194304 mapped")));
  ASSERT_THAT(pool->Free(held.address), IsOk());
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock after, pool->Allocate(2 * kMiB));
  EXPECT_EQ(after.bytes, 2 * kMiB);
}

TEST_F(MemoryPoolTest, BadFreesAreNotFoundAndChangeNothing) {
  auto pool = MakePool();
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock small, pool->Allocate(512));
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock large, pool->Allocate(3 * kMiB));
  const MemoryPoolStats before = pool->stats();
  for (uint64_t address : {uint64_t{0}, small.address + 512 /* not handed out */,
                           small.address + 16 /* inside a block */, large.address + 4096,
                           large.address + static_cast<uint64_t>(large.bytes) /* past it */}) {
    SCOPED_TRACE(address);
    EXPECT_THAT(pool->Free(address), StatusIs(absl::StatusCode::kNotFound));
  }
  EXPECT_EQ(pool->stats().in_use_bytes, before.in_use_bytes);
  ASSERT_THAT(pool->Free(small.address), IsOk());
  EXPECT_THAT(pool->Free(small.address), StatusIs(absl::StatusCode::kNotFound, HasSubstr("freed")));
  ASSERT_THAT(pool->Free(large.address), IsOk());
  EXPECT_THAT(pool->Free(large.address), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(pool->stats().in_use_bytes, 0);
}

TEST_F(MemoryPoolTest, TrimReturnsOnlyWhollyFreeSegments) {
  auto pool = MakePool();
  // Two slabs of 512 KiB blocks (8 blocks = 4 MiB each), one of them emptied again.
  std::vector<PoolBlock> blocks;
  for (int i = 0; i < 9; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock block, pool->Allocate(512 * kKiB));
    blocks.push_back(block);
  }
  ASSERT_EQ(device_->Segments(), 2u);
  for (int i = 0; i < 8; ++i) ASSERT_THAT(pool->Free(blocks[i].address), IsOk());
  EXPECT_EQ(pool->Trim(), 4 * kMiB);
  EXPECT_EQ(device_->Segments(), 1u);
  EXPECT_EQ(pool->Trim(), 0) << "the slab with a live block stays";
  EXPECT_THAT(pool->Free(blocks[8].address), IsOk());
  EXPECT_EQ(pool->Trim(), 4 * kMiB);
  EXPECT_EQ(device_->MappedBytes(), 0);
}

TEST_F(MemoryPoolTest, DestroyingThePoolReturnsEverySegment) {
  {
    auto pool = MakePool();
    ASSERT_THAT(pool->Allocate(100).status(), IsOk());
    ASSERT_THAT(pool->Allocate(5 * kMiB).status(), IsOk());
    GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock freed, pool->Allocate(7 * kMiB));
    ASSERT_THAT(pool->Free(freed.address), IsOk());
    EXPECT_EQ(device_->Segments(), 3u);
  }
  EXPECT_EQ(device_->Segments(), 0u);
  EXPECT_EQ(device_->BadUnmaps(), 0);
}

TEST_F(MemoryPoolTest, OwnSegmentBlocksShareNothingAndLookupFindsLiveBlocks) {
  auto pool = MakePool();
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock slab_block, pool->Allocate(100));
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock own, pool->AllocateOwnSegment(100));
  EXPECT_FALSE(own.shares_segment);
  EXPECT_EQ(own.bytes, 2 * kMiB);
  EXPECT_EQ(own.address, own.segment.address);
  EXPECT_NE(own.segment.address, slab_block.segment.address);
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock found, pool->Lookup(slab_block.address));
  EXPECT_TRUE(found.shares_segment);
  EXPECT_EQ(found.bytes, 256);
  EXPECT_EQ(found.segment.address, slab_block.segment.address);
  EXPECT_THAT(pool->Lookup(slab_block.address + 256).status(),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(pool->Free(own.address), IsOk());
  EXPECT_THAT(pool->Lookup(own.address).status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(MemoryPoolTest, SharedSegmentsGoBackToTheSourceOnFreeAndAreNeverReused) {
  auto pool = MakePool();
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock slab_block, pool->Allocate(100));
  EXPECT_THAT(pool->MarkShared(slab_block.address), StatusIs(absl::StatusCode::kNotFound))
      << "a slab block cannot be shared: its segment holds other blocks";
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock exported, pool->Allocate(4 * kMiB));
  GPUKIT_ASSERT_OK(pool->MarkShared(exported.address));
  const int64_t mapped = device_->MappedBytes();
  ASSERT_THAT(pool->Free(exported.address), IsOk());
  EXPECT_EQ(device_->MappedBytes(), mapped - 4 * kMiB) << "unmapped at once, not cached";
  GPUKIT_ASSERT_OK_AND_ASSIGN(PoolBlock next, pool->Allocate(4 * kMiB));
  EXPECT_NE(next.segment.address, exported.segment.address);
  EXPECT_EQ(pool->stats().in_use_bytes, 256 + 4 * kMiB);
}

TEST_F(MemoryPoolTest, RejectsBadOptionsAndSizes) {
  EXPECT_THAT(MemoryPool::Create(std::make_unique<FakeSource>(device_, 3 * kMiB), {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("power of two")));
  MemoryPoolOptions negative;
  negative.max_cached_bytes = -1;
  EXPECT_THAT(
      MemoryPool::Create(std::make_unique<FakeSource>(device_, 2 * kMiB), negative).status(),
      StatusIs(absl::StatusCode::kInvalidArgument));
  auto pool = MakePool();
  EXPECT_THAT(pool->Allocate(0).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(pool->Allocate(-5).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(pool->Allocate(INT64_MAX).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(pool->Allocate(2048 * kMiB).status(), StatusIs(absl::StatusCode::kResourceExhausted));
}

// Random allocations and frees from several threads: live blocks never overlap, the pool's
// counters match what was handed out, and everything returns to the source at the end.
TEST_F(MemoryPoolTest, RandomUseFromSeveralThreadsKeepsBlocksDisjointAndCountsExact) {
  const uint32_t seed = ::gpukit::testing::TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  device_->capacity_bytes = 256 * kMiB;
  MemoryPoolOptions options;
  options.max_cached_bytes = 32 * kMiB;
  auto pool = MakePool(options);

  absl::Mutex mu;
  std::map<uint64_t, int64_t> live;  // address -> block bytes, of every thread
  int overlaps = 0;
  int failures = 0;
  auto worker = [&](uint32_t thread_seed) {
    std::mt19937 rng(thread_seed);
    std::vector<uint64_t> mine;
    for (int step = 0; step < 3000; ++step) {
      if (mine.empty() || rng() % 3 != 0) {
        // Mostly small sizes, some large ones.
        const int64_t bytes = rng() % 10 == 0 ? 1 + static_cast<int64_t>(rng() % (9 * kMiB))
                                              : 1 + static_cast<int64_t>(rng() % (64 * kKiB));
        absl::StatusOr<PoolBlock> block = pool->Allocate(bytes);
        if (!block.ok()) {
          absl::MutexLock lock(&mu);
          if (!absl::IsResourceExhausted(block.status())) ++failures;
          continue;
        }
        absl::MutexLock lock(&mu);
        if (block->bytes < bytes) ++failures;
        auto next = live.lower_bound(block->address);
        if (next != live.end() && next->first < block->address + block->bytes) ++overlaps;
        if (next != live.begin() &&
            std::prev(next)->first + std::prev(next)->second > block->address) {
          ++overlaps;
        }
        live.emplace(block->address, block->bytes);
        mine.push_back(block->address);
      } else {
        const size_t index = rng() % mine.size();
        const uint64_t address = mine[index];
        mine[index] = mine.back();
        mine.pop_back();
        {
          absl::MutexLock lock(&mu);
          live.erase(address);
        }
        if (!pool->Free(address).ok()) {
          absl::MutexLock lock(&mu);
          ++failures;
        }
      }
    }
    for (uint64_t address : mine) {
      {
        absl::MutexLock lock(&mu);
        live.erase(address);
      }
      if (!pool->Free(address).ok()) {
        absl::MutexLock lock(&mu);
        ++failures;
      }
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) threads.emplace_back(worker, seed + t);
  for (std::thread& thread : threads) thread.join();

  EXPECT_EQ(overlaps, 0);
  EXPECT_EQ(failures, 0);
  const MemoryPoolStats stats = pool->stats();
  EXPECT_EQ(stats.in_use_bytes, 0);
  EXPECT_EQ(stats.mapped_bytes, device_->MappedBytes());
  EXPECT_LE(stats.mapped_bytes, options.max_cached_bytes) << "free memory beyond the cap returns";
  EXPECT_GT(stats.reused, 0);
  pool->Trim();
  EXPECT_EQ(device_->MappedBytes(), 0);
  EXPECT_EQ(device_->BadUnmaps(), 0);
}

}  // namespace
}  // namespace gpukit
