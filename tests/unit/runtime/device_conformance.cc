// The Device conformance tests (see device_conformance.h). Link this file into a backend's
// test binary and instantiate DeviceConformanceTest there.
#include "tests/unit/runtime/device_conformance.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatEq;
using ::testing::HasSubstr;
using ::testing::Pointwise;

constexpr absl::StatusCode kNotFound = absl::StatusCode::kNotFound;
constexpr absl::StatusCode kOutOfRange = absl::StatusCode::kOutOfRange;

std::vector<uint8_t> Pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(seed + i * 7);
  return data;
}

// ---- Properties and memory ----

TEST_P(DeviceConformanceTest, ReportsPropertiesConsistentWithMemoryInfo) {
  const DeviceProperties& props = device().properties();
  EXPECT_FALSE(props.name.empty());
  EXPECT_GT(props.memory_total_bytes, 0);
  const MemoryInfo info = device().GetMemoryInfo();
  EXPECT_EQ(info.total_bytes, props.memory_total_bytes);
  EXPECT_GE(info.used_bytes, 0);
  EXPECT_LE(info.used_bytes, info.total_bytes);
}

TEST_P(DeviceConformanceTest, AllocationCountsAgainstUsedBytesUntilFreed) {
  const int64_t before = device().GetMemoryInfo().used_bytes;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, device().Allocate(4096));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, device().Allocate(1000));
  EXPECT_GE(device().GetMemoryInfo().used_bytes, before + 5096);
  GPUKIT_EXPECT_OK(device().Free(a));
  GPUKIT_EXPECT_OK(device().Free(b));
  EXPECT_EQ(device().GetMemoryInfo().used_bytes, before);
}

TEST_P(DeviceConformanceTest, AllocateGivesDistinctNonZeroIds) {
  std::set<uint64_t> ids;
  for (int i = 0; i < 16; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Allocate(64));
    EXPECT_NE(buffer.value, 0u);
    ids.insert(buffer.value);
  }
  EXPECT_EQ(ids.size(), 16u);
}

TEST_P(DeviceConformanceTest, IdsOfFreedBuffersAreNotReused) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId first, device().Allocate(64));
  GPUKIT_ASSERT_OK(device().Free(first));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId second, Allocate(64));
  EXPECT_NE(second.value, first.value);
  EXPECT_THAT(device().Free(first), StatusIs(kNotFound));
}

TEST_P(DeviceConformanceTest, ZeroByteAllocationIsAValidBuffer) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device().Allocate(0));
  EXPECT_NE(buffer.value, 0u);
  EXPECT_THAT(device().BufferBytes(buffer), IsOkAndHolds(0));
  // An empty copy may name no host memory at all (an empty vector's data() is null).
  GPUKIT_EXPECT_OK(device().CopyHostToDevice(buffer, 0, nullptr, 0, stream()));
  GPUKIT_EXPECT_OK(device().CopyDeviceToHost(nullptr, buffer, 0, 0, stream()));
  GPUKIT_EXPECT_OK(Sync());
  GPUKIT_EXPECT_OK(device().Free(buffer));
}

TEST_P(DeviceConformanceTest, NegativeAllocationIsInvalidArgument) {
  EXPECT_THAT(device().Allocate(-1), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(DeviceConformanceTest, AllocationBeyondTheDeviceIsResourceExhausted) {
  const int64_t total = device().properties().memory_total_bytes;
  EXPECT_THAT(device().Allocate(total + 1), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(device().Allocate(std::numeric_limits<int64_t>::max()),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_P(DeviceConformanceTest, FreeOfUnknownOrFreedBufferIsNotFound) {
  EXPECT_THAT(device().Free(BufferId{0}), StatusIs(kNotFound));
  EXPECT_THAT(device().Free(BufferId{~uint64_t{0}}), StatusIs(kNotFound));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device().Allocate(64));
  GPUKIT_ASSERT_OK(device().Free(buffer));
  EXPECT_THAT(device().Free(buffer), StatusIs(kNotFound));
}

TEST_P(DeviceConformanceTest, BufferBytesIsTheRequestedSizeWhileTheBufferLives) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device().Allocate(1001));
  EXPECT_THAT(device().BufferBytes(buffer), IsOkAndHolds(1001));
  GPUKIT_ASSERT_OK(device().Free(buffer));
  EXPECT_THAT(device().BufferBytes(buffer), StatusIs(kNotFound));
}

// ---- Copies ----

TEST_P(DeviceConformanceTest, CopiesRoundTripEveryByte) {
  const std::vector<uint8_t> data = Pattern(4096, 3);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Allocate(4096));
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(buffer, 0, data.data(), 4096, stream()));
  std::vector<uint8_t> back(4096, 0);
  GPUKIT_ASSERT_OK(device().CopyDeviceToHost(back.data(), buffer, 0, 4096, stream()));
  GPUKIT_ASSERT_OK(Sync());
  EXPECT_EQ(back, data);
}

TEST_P(DeviceConformanceTest, HostBuffersRoundTripEveryByteThroughTheDevice) {
  // Sizes below and above the copy paths' thresholds (the transfer engine stages from 1 MiB),
  // and a part of a buffer copied at an offset into it.
  for (int64_t bytes : {int64_t{1}, int64_t{4097}, int64_t{3} << 20}) {
    SCOPED_TRACE(bytes);
    GPUKIT_ASSERT_OK_AND_ASSIGN(HostBuffer out, device().AllocateHostBuffer(bytes));
    GPUKIT_ASSERT_OK_AND_ASSIGN(HostBuffer in, device().AllocateHostBuffer(bytes));
    ASSERT_EQ(out.bytes(), bytes);
    ASSERT_NE(out.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(out.data()) % 64, 0u);
    const std::vector<uint8_t> data = Pattern(static_cast<size_t>(bytes), 11);
    std::memcpy(out.data(), data.data(), data.size());
    std::memset(in.data(), 0xEE, data.size());
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Allocate(bytes));
    GPUKIT_ASSERT_OK(device().CopyHostToDevice(buffer, 0, out.data(), bytes, stream()));
    GPUKIT_ASSERT_OK(device().CopyDeviceToHost(in.data(), buffer, 0, bytes, stream()));
    GPUKIT_ASSERT_OK(Sync());
    EXPECT_EQ(std::memcmp(in.data(), data.data(), data.size()), 0);
    if (bytes > 2) {
      GPUKIT_ASSERT_OK(device().CopyDeviceToHost(in.data() + 1, buffer, 0, bytes - 1, stream()));
      GPUKIT_ASSERT_OK(Sync());
      EXPECT_EQ(std::memcmp(in.data() + 1, data.data(), data.size() - 1), 0);
    }
  }
}

TEST_P(DeviceConformanceTest, HostBuffersOfNothingAreEmptyAndNegativeSizesInvalid) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostBuffer empty, device().AllocateHostBuffer(0));
  EXPECT_EQ(empty.bytes(), 0);
  EXPECT_THAT(device().AllocateHostBuffer(-1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(device().AllocateHostBuffer(std::numeric_limits<int64_t>::max()).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_P(DeviceConformanceTest, CopiesHonourOffsets) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Upload(std::vector<uint8_t>(16, 0)));
  const uint8_t four[4] = {1, 2, 3, 4};
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(buffer, 12, four, 4, stream()));
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(buffer, 5, four, 2, stream()));
  uint8_t middle[3] = {9, 9, 9};
  GPUKIT_ASSERT_OK(device().CopyDeviceToHost(middle, buffer, 4, 3, stream()));
  GPUKIT_ASSERT_OK(Sync());
  EXPECT_THAT(middle, ElementsAre(0, 1, 2));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> all, Download<uint8_t>(buffer, 16));
  EXPECT_THAT(all, ElementsAre(0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 1, 2, 3, 4));
}

TEST_P(DeviceConformanceTest, DeviceToDeviceCopyMovesBytesBetweenBuffers) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId src, Upload(Pattern(64, 11)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId dst, Upload(std::vector<uint8_t>(64, 0)));
  GPUKIT_ASSERT_OK(device().CopyDeviceToDevice(dst, 8, src, 16, 32, stream()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> out, Download<uint8_t>(dst, 64));
  const std::vector<uint8_t> pattern = Pattern(64, 11);
  std::vector<uint8_t> expected(64, 0);
  std::copy(pattern.begin() + 16, pattern.begin() + 48, expected.begin() + 8);
  EXPECT_EQ(out, expected);
}

// Each range is given as (offset, bytes) against a 64-byte buffer.
struct Range {
  int64_t offset;
  int64_t bytes;
};
constexpr Range kBadRanges[] = {
    {0, 65},                                   // one byte past the end
    {64, 1},                                   // starts at the end
    {65, 0},                                   // starts past the end
    {-1, 4},                                   // negative offset
    {0, -1},                                   // negative size
    {60, 8},                                   // straddles the end
    {1, std::numeric_limits<int64_t>::max()},  // offset + bytes overflows
    {std::numeric_limits<int64_t>::max(), 1},
};

TEST_P(DeviceConformanceTest, CopyRangesOutsideTheBufferAreOutOfRange) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Upload(std::vector<uint8_t>(64, 0)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId other, Upload(std::vector<uint8_t>(64, 0)));
  std::vector<uint8_t> host(128, 0);
  for (const Range& r : kBadRanges) {
    SCOPED_TRACE(::testing::Message() << "offset " << r.offset << " bytes " << r.bytes);
    EXPECT_THAT(device().CopyHostToDevice(buffer, r.offset, host.data(), r.bytes, stream()),
                StatusIs(kOutOfRange));
    EXPECT_THAT(device().CopyDeviceToHost(host.data(), buffer, r.offset, r.bytes, stream()),
                StatusIs(kOutOfRange));
    EXPECT_THAT(device().CopyDeviceToDevice(other, 0, buffer, r.offset, r.bytes, stream()),
                StatusIs(kOutOfRange));
    EXPECT_THAT(device().CopyDeviceToDevice(buffer, r.offset, other, 0, r.bytes, stream()),
                StatusIs(kOutOfRange));
  }
  GPUKIT_EXPECT_OK(Sync());  // a rejected copy leaves no error behind on the stream
}

TEST_P(DeviceConformanceTest, EmptyCopyAtTheVeryEndIsAllowed) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Upload(std::vector<uint8_t>(64, 0)));
  uint8_t host[1] = {0};
  GPUKIT_EXPECT_OK(device().CopyHostToDevice(buffer, 64, host, 0, stream()));
  GPUKIT_EXPECT_OK(device().CopyDeviceToHost(host, buffer, 64, 0, stream()));
  GPUKIT_EXPECT_OK(device().CopyDeviceToDevice(buffer, 64, buffer, 0, 0, stream()));
  GPUKIT_EXPECT_OK(Sync());
}

TEST_P(DeviceConformanceTest, FillZeroZeroesExactlyItsRange) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Upload(Pattern(64, 3)));
  GPUKIT_ASSERT_OK(device().FillZero(buffer, 8, 20, stream()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> out, Download<uint8_t>(buffer, 64));
  std::vector<uint8_t> expected = Pattern(64, 3);
  std::fill(expected.begin() + 8, expected.begin() + 28, 0);
  EXPECT_EQ(out, expected);
}

TEST_P(DeviceConformanceTest, FillZeroCoversAWholeBufferLargerThanOneMebibyte) {
  // Larger than the default implementation's zeroed host block, and not a multiple of it.
  constexpr size_t kBytes = (size_t{1} << 20) * 2 + 4096 + 3;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Upload(std::vector<uint8_t>(kBytes, 0xA5)));
  GPUKIT_ASSERT_OK(device().FillZero(buffer, 0, kBytes, stream()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> out, Download<uint8_t>(buffer, kBytes));
  EXPECT_EQ(std::count(out.begin(), out.end(), 0), static_cast<std::ptrdiff_t>(kBytes));
}

TEST_P(DeviceConformanceTest, FillZeroRunsInStreamOrderBetweenCopies) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Allocate(16));
  const std::vector<uint8_t> ones(16, 1);
  const uint8_t two = 2;
  // Written, zeroed in part, then patched: only stream order gives this result.
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(buffer, 0, ones.data(), 16, stream()));
  GPUKIT_ASSERT_OK(device().FillZero(buffer, 4, 8, stream()));
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(buffer, 6, &two, 1, stream()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> out, Download<uint8_t>(buffer, 16));
  EXPECT_THAT(out, ElementsAre(1, 1, 1, 1, 0, 0, 2, 0, 0, 0, 0, 0, 1, 1, 1, 1));
}

TEST_P(DeviceConformanceTest, FillZeroRangesOutsideTheBufferAreOutOfRange) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Upload(Pattern(64, 5)));
  for (const Range& r : kBadRanges) {
    SCOPED_TRACE(::testing::Message() << "offset " << r.offset << " bytes " << r.bytes);
    EXPECT_THAT(device().FillZero(buffer, r.offset, r.bytes, stream()), StatusIs(kOutOfRange));
  }
  GPUKIT_EXPECT_OK(device().FillZero(buffer, 64, 0, stream()));  // empty, at the very end
  const BufferId unknown{~uint64_t{0} - 1};
  EXPECT_THAT(device().FillZero(unknown, 0, 4, stream()), StatusIs(kNotFound));
  EXPECT_THAT(device().FillZero(buffer, 0, 4, StreamId{~uint64_t{0} - 2}), StatusIs(kNotFound));
  // Nothing rejected touched the buffer.
  EXPECT_THAT(Download<uint8_t>(buffer, 64), IsOkAndHolds(ElementsAreArray(Pattern(64, 5))));
}

TEST_P(DeviceConformanceTest, CopiesNamingUnknownBuffersOrStreamsAreNotFound) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, Upload(std::vector<uint8_t>(16, 0)));
  uint8_t host[16] = {};
  const BufferId unknown{~uint64_t{0} - 1};
  const StreamId no_stream{~uint64_t{0} - 2};
  EXPECT_THAT(device().CopyHostToDevice(unknown, 0, host, 4, stream()), StatusIs(kNotFound));
  EXPECT_THAT(device().CopyDeviceToHost(host, unknown, 0, 4, stream()), StatusIs(kNotFound));
  EXPECT_THAT(device().CopyDeviceToDevice(buffer, 0, unknown, 0, 4, stream()), StatusIs(kNotFound));
  EXPECT_THAT(device().CopyDeviceToDevice(unknown, 0, buffer, 0, 4, stream()), StatusIs(kNotFound));
  EXPECT_THAT(device().CopyHostToDevice(buffer, 0, host, 4, no_stream), StatusIs(kNotFound));
  EXPECT_THAT(device().CopyDeviceToHost(host, buffer, 0, 4, no_stream), StatusIs(kNotFound));
  EXPECT_THAT(device().CopyDeviceToDevice(buffer, 0, buffer, 8, 4, no_stream), StatusIs(kNotFound));
}

// ---- Streams and events ----

TEST_P(DeviceConformanceTest, WorkOnOneStreamRunsInEnqueueOrder) {
  // A is written, copied to B, overwritten, copied to C: only enqueue order gives B = x, C = y.
  const std::vector<uint8_t> x = Pattern(256, 1), y = Pattern(256, 2);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Allocate(256));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, Allocate(256));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId c, Allocate(256));
  std::vector<uint8_t> out_b(256), out_c(256);
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, x.data(), 256, stream()));
  GPUKIT_ASSERT_OK(device().CopyDeviceToDevice(b, 0, a, 0, 256, stream()));
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, y.data(), 256, stream()));
  GPUKIT_ASSERT_OK(device().CopyDeviceToDevice(c, 0, a, 0, 256, stream()));
  GPUKIT_ASSERT_OK(device().CopyDeviceToHost(out_b.data(), b, 0, 256, stream()));
  GPUKIT_ASSERT_OK(device().CopyDeviceToHost(out_c.data(), c, 0, 256, stream()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId done, device().RecordEvent(stream()));
  GPUKIT_ASSERT_OK(device().WaitEvent(done));
  GPUKIT_ASSERT_OK(device().DestroyEvent(done));
  EXPECT_EQ(out_b, x);
  EXPECT_EQ(out_c, y);
}

TEST_P(DeviceConformanceTest, ConcurrentEnqueuersOnOneStreamEachSeeTheirOwnOrder) {
  // Several threads share one stream, so work is often enqueued while the stream is busy.
  // Each thread's own sequence (upload, device copy, download, event) must still run in its
  // order and its event must cover its work.
  constexpr int kThreads = 4;
  constexpr int kRounds = 40;
  constexpr int64_t kBytes = 16 << 10;
  std::vector<BufferId> first(kThreads), second(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(first[t], Allocate(kBytes));
    GPUKIT_ASSERT_OK_AND_ASSIGN(second[t], Allocate(kBytes));
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const std::vector<uint8_t> in = Pattern(kBytes, static_cast<uint8_t>(t * 31 + round));
        std::vector<uint8_t> out(kBytes, 0);
        bool ok = device().CopyHostToDevice(first[t], 0, in.data(), kBytes, stream()).ok() &&
                  device().CopyDeviceToDevice(second[t], 0, first[t], 0, kBytes, stream()).ok() &&
                  device().CopyDeviceToHost(out.data(), second[t], 0, kBytes, stream()).ok();
        absl::StatusOr<EventId> event = device().RecordEvent(stream());
        ok = ok && event.ok() && device().WaitEvent(*event).ok() &&
             device().DestroyEvent(*event).ok() && out == in;
        if (!ok) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(DeviceConformanceTest, StreamsHaveDistinctIdsForEveryPriority) {
  std::set<uint64_t> ids = {stream().value};
  std::vector<StreamId> made;
  for (StreamPriority p : {StreamPriority::kLow, StreamPriority::kNormal, StreamPriority::kHigh}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId s, device().CreateStream(p));
    EXPECT_NE(s.value, 0u);
    ids.insert(s.value);
    made.push_back(s);
  }
  EXPECT_EQ(ids.size(), 4u);
  for (StreamId s : made) GPUKIT_EXPECT_OK(device().DestroyStream(s));
}

TEST_P(DeviceConformanceTest, StreamsTakeAnSmShareInRangeAndRefuseOthers) {
  for (double share : {0.01, 0.5, 1.0}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        StreamId s, device().CreateStream({.priority = StreamPriority::kLow, .sm_share = share}));
    // A stream on part of the SMs carries work like any other.
    const std::vector<uint8_t> x = Pattern(256, 9);
    std::vector<uint8_t> out(256);
    GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Allocate(256));
    GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, x.data(), 256, s));
    GPUKIT_ASSERT_OK(device().CopyDeviceToHost(out.data(), a, 0, 256, s));
    GPUKIT_ASSERT_OK(SynchronizeStream(device(), s));
    EXPECT_EQ(out, x) << "sm_share " << share;
    GPUKIT_EXPECT_OK(device().DestroyStream(s));
  }
  for (double share : {0.0, -0.5, 1.5, std::nan("")}) {
    EXPECT_THAT(device().CreateStream({.priority = StreamPriority::kLow, .sm_share = share}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sm_share")))
        << share;
  }
}

TEST_P(DeviceConformanceTest, StreamsCarryIndependentWork) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId other, device().CreateStream(StreamPriority::kHigh));
  const std::vector<uint8_t> x = Pattern(512, 5), y = Pattern(512, 6);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Allocate(512));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, Allocate(512));
  std::vector<uint8_t> out_a(512), out_b(512);
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, x.data(), 512, stream()));
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(b, 0, y.data(), 512, other));
  GPUKIT_ASSERT_OK(device().CopyDeviceToHost(out_a.data(), a, 0, 512, stream()));
  GPUKIT_ASSERT_OK(device().CopyDeviceToHost(out_b.data(), b, 0, 512, other));
  GPUKIT_ASSERT_OK(SynchronizeStream(device(), other));
  GPUKIT_ASSERT_OK(Sync());
  EXPECT_EQ(out_a, x);
  EXPECT_EQ(out_b, y);
  GPUKIT_EXPECT_OK(device().DestroyStream(other));
}

TEST_P(DeviceConformanceTest, DestroyStreamRunsItsQueuedWorkFirst) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId doomed, device().CreateStream(StreamPriority::kLow));
  const std::vector<uint8_t> x = Pattern(1024, 9);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Allocate(1024));
  std::vector<uint8_t> out(1024, 0);
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, x.data(), 1024, doomed));
  GPUKIT_ASSERT_OK(device().CopyDeviceToHost(out.data(), a, 0, 1024, doomed));
  GPUKIT_ASSERT_OK(device().DestroyStream(doomed));
  EXPECT_EQ(out, x);
  EXPECT_THAT(device().RecordEvent(doomed), StatusIs(kNotFound));
  EXPECT_THAT(device().CopyHostToDevice(a, 0, x.data(), 4, doomed), StatusIs(kNotFound));
  EXPECT_THAT(device().DestroyStream(doomed), StatusIs(kNotFound));
}

TEST_P(DeviceConformanceTest, UnknownStreamsAreNotFound) {
  EXPECT_THAT(device().DestroyStream(StreamId{0}), StatusIs(kNotFound));
  EXPECT_THAT(device().RecordEvent(StreamId{~uint64_t{0}}), StatusIs(kNotFound));
}

TEST_P(DeviceConformanceTest, EventOnAnIdleStreamCompletes) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId event, device().RecordEvent(stream()));
  EXPECT_NE(event.value, 0u);
  GPUKIT_EXPECT_OK(device().WaitEvent(event));
  EXPECT_THAT(device().QueryEvent(event), IsOkAndHolds(true));
  GPUKIT_EXPECT_OK(device().WaitEvent(event));  // waiting again returns at once
  GPUKIT_EXPECT_OK(device().DestroyEvent(event));
}

TEST_P(DeviceConformanceTest, QueryEventReportsCompletionWithoutAWait) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Allocate(1 << 20));
  const std::vector<uint8_t> x = Pattern(1 << 20, 4);
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, x.data(), 1 << 20, stream()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId event, device().RecordEvent(stream()));
  // Completion is observed by polling only: a bounded real-time guard, not a wait for time.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  bool done = false;
  while (!done && absl::Now() < give_up) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(done, device().QueryEvent(event));
    if (!done) std::this_thread::yield();
  }
  EXPECT_TRUE(done);
  GPUKIT_EXPECT_OK(device().WaitEvent(event));
  GPUKIT_EXPECT_OK(device().DestroyEvent(event));
}

TEST_P(DeviceConformanceTest, EventsAreIndependentOfEachOther) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId first, device().RecordEvent(stream()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId second, device().RecordEvent(stream()));
  EXPECT_NE(first.value, second.value);
  GPUKIT_ASSERT_OK(device().DestroyEvent(first));
  GPUKIT_EXPECT_OK(device().WaitEvent(second));
  GPUKIT_EXPECT_OK(device().DestroyEvent(second));
}

TEST_P(DeviceConformanceTest, UnknownOrDestroyedEventsAreNotFound) {
  EXPECT_THAT(device().WaitEvent(EventId{0}), StatusIs(kNotFound));
  EXPECT_THAT(device().QueryEvent(EventId{0}), StatusIs(kNotFound));
  EXPECT_THAT(device().DestroyEvent(EventId{0}), StatusIs(kNotFound));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId event, device().RecordEvent(stream()));
  GPUKIT_ASSERT_OK(device().WaitEvent(event));
  GPUKIT_ASSERT_OK(device().DestroyEvent(event));
  EXPECT_THAT(device().WaitEvent(event), StatusIs(kNotFound));
  EXPECT_THAT(device().QueryEvent(event), StatusIs(kNotFound));
  EXPECT_THAT(device().DestroyEvent(event), StatusIs(kNotFound));
}

TEST_P(DeviceConformanceTest, EventElapsedTimeMeasuresTheWorkBetweenTwoEvents) {
  constexpr int64_t kBytes = 16 << 20;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Allocate(kBytes));
  const std::vector<uint8_t> x = Pattern(kBytes, 3);
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId start, device().RecordEvent(stream()));
  for (int i = 0; i < 4; ++i) {
    GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, x.data(), kBytes, stream()));
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId end, device().RecordEvent(stream()));
  GPUKIT_ASSERT_OK(device().WaitEvent(end));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t elapsed_ns, device().EventElapsedNs(start, end));
  // 64 MiB of copies cannot take zero time, nor more than a generous minute.
  EXPECT_GT(elapsed_ns, 0);
  EXPECT_LT(elapsed_ns, int64_t{60'000'000'000});
  EXPECT_THAT(device().EventElapsedNs(start, start), IsOkAndHolds(0));
  EXPECT_THAT(device().EventElapsedNs(end, start), StatusIs(absl::StatusCode::kInvalidArgument));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId other, device().CreateStream(StreamPriority::kNormal));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId elsewhere, device().RecordEvent(other));
  GPUKIT_ASSERT_OK(device().WaitEvent(elsewhere));
  EXPECT_THAT(device().EventElapsedNs(start, elsewhere),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(device().EventElapsedNs(start, EventId{0}), StatusIs(kNotFound));
  for (EventId e : {start, end, elsewhere}) GPUKIT_EXPECT_OK(device().DestroyEvent(e));
  GPUKIT_EXPECT_OK(device().DestroyStream(other));
}

// A completed pair, asked without blocking, answers what WaitEvent and EventElapsedNs give, and
// their errors for pairs they refuse.
TEST_P(DeviceConformanceTest, ElapsedNsIfCompletedAnswersAsWaitAndElapsedDo) {
  constexpr int64_t kBytes = 4 << 20;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Allocate(kBytes));
  const std::vector<uint8_t> x = Pattern(kBytes, 5);
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId start, device().RecordEvent(stream()));
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, x.data(), kBytes, stream()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId end, device().RecordEvent(stream()));
  GPUKIT_ASSERT_OK(device().WaitEvent(end));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t elapsed_ns, device().EventElapsedNs(start, end));
  EXPECT_THAT(device().ElapsedNsIfCompleted(start, end), IsOkAndHolds(elapsed_ns));
  EXPECT_GT(elapsed_ns, 0);
  EXPECT_THAT(device().ElapsedNsIfCompleted(start, start), IsOkAndHolds(0));
  EXPECT_THAT(device().ElapsedNsIfCompleted(end, start),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(device().ElapsedNsIfCompleted(start, EventId{0}), StatusIs(kNotFound));
  EXPECT_THAT(device().ElapsedNsIfCompleted(EventId{0}, end), StatusIs(kNotFound));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId other, device().CreateStream(StreamPriority::kNormal));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId elsewhere, device().RecordEvent(other));
  GPUKIT_ASSERT_OK(device().WaitEvent(elsewhere));
  EXPECT_THAT(device().ElapsedNsIfCompleted(start, elsewhere),
              StatusIs(absl::StatusCode::kInvalidArgument));
  for (EventId e : {start, end, elsewhere}) GPUKIT_EXPECT_OK(device().DestroyEvent(e));
  EXPECT_THAT(device().ElapsedNsIfCompleted(start, end), StatusIs(kNotFound));
  GPUKIT_EXPECT_OK(device().DestroyStream(other));
}

// A batch waited for at its last event: every pair's outcome is what WaitEvent and
// EventElapsedNs give one by one, and a pair that fails (an event of another stream, an unknown
// one) fails alone.
TEST_P(DeviceConformanceTest, WaitEventPairsAnswersEachPairAsWaitAndElapsedDo) {
  constexpr int64_t kBytes = 1 << 20;
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Allocate(kBytes));
  const std::vector<uint8_t> x = Pattern(kBytes, 4);
  std::vector<EventId> events;
  for (int i = 0; i < 3; ++i) {
    if (i > 0) {
      GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, x.data(), kBytes, stream()));
    }
    GPUKIT_ASSERT_OK_AND_ASSIGN(EventId event, device().RecordEvent(stream()));
    events.push_back(event);
  }
  // Not waited for first: the call waits for the last end itself.
  const std::vector<EventPair> pairs = {
      {events[0], events[1]}, {events[0], events[2]}, {events[1], events[2]}};
  const std::vector<EventPairOutcome> outcomes = device().WaitEventPairs(pairs);
  ASSERT_EQ(outcomes.size(), pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    GPUKIT_EXPECT_OK(outcomes[i].status) << "pair " << i;
    GPUKIT_EXPECT_OK(device().WaitEvent(pairs[i].end));
    EXPECT_THAT(device().EventElapsedNs(pairs[i].start, pairs[i].end),
                IsOkAndHolds(outcomes[i].elapsed_ns))
        << "pair " << i;
  }
  EXPECT_TRUE(device().WaitEventPairs({}).empty());

  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId other, device().CreateStream(StreamPriority::kNormal));
  GPUKIT_ASSERT_OK_AND_ASSIGN(EventId elsewhere, device().RecordEvent(other));
  GPUKIT_ASSERT_OK(device().WaitEvent(elsewhere));
  const std::vector<EventPair> mixed = {
      {events[0], elsewhere}, {events[0], EventId{0}}, {events[1], events[2]}};
  const std::vector<EventPairOutcome> answers = device().WaitEventPairs(mixed);
  ASSERT_EQ(answers.size(), mixed.size());
  EXPECT_THAT(answers[0].status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(answers[0].elapsed_ns, 0);
  EXPECT_THAT(answers[1].status, StatusIs(kNotFound));
  GPUKIT_EXPECT_OK(answers[2].status);
  EXPECT_EQ(answers[2].elapsed_ns, outcomes[2].elapsed_ns);
  for (EventId e : events) GPUKIT_EXPECT_OK(device().DestroyEvent(e));
  GPUKIT_EXPECT_OK(device().DestroyEvent(elsewhere));
  GPUKIT_EXPECT_OK(device().DestroyStream(other));
}

TEST_P(DeviceConformanceTest, SynchronizeStreamWaitsForQueuedWork) {
  const std::vector<uint8_t> x = Pattern(2048, 8);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Allocate(2048));
  std::vector<uint8_t> out(2048, 0);
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, x.data(), 2048, stream()));
  GPUKIT_ASSERT_OK(device().CopyDeviceToHost(out.data(), a, 0, 2048, stream()));
  GPUKIT_ASSERT_OK(SynchronizeStream(device(), stream()));
  EXPECT_EQ(out, x);
  EXPECT_THAT(SynchronizeStream(device(), StreamId{~uint64_t{0}}), StatusIs(kNotFound));
}

// ---- Built-in ops ----

// The first of `ops` that `device` has no kernel for, or "" when it runs them all.
std::string FirstUnsupportedOp(const Device& device, std::initializer_list<const char*> ops) {
  for (const char* op : ops) {
    if (!device.SupportsOp(op)) return op;
  }
  return "";
}

// A backend whose op kernels have not landed yet (CUDA, until its NVRTC-compiled kernels do)
// answers SupportsOp false, as the Device contract allows; tests that run those ops skip,
// visibly, instead of failing. Validation tests of RunOp still run everywhere.
#define GPUKIT_SKIP_UNLESS_DEVICE_RUNS(...)                                                      \
  if (const std::string missing = FirstUnsupportedOp(device(), {__VA_ARGS__}); !missing.empty()) \
  GTEST_SKIP() << device().properties().name << " has no kernel for built-in op \"" << missing   \
               << "\" yet"

TEST_P(DeviceConformanceTest, SupportsEveryBuiltinOp) {
  EXPECT_FALSE(device().SupportsOp("frobnicate"));
  // A backend supports no built-in op until its kernels land, and then all of them.
  // The fault-injection ops of test builds (IsTestOnlyOp) are the CPU backend's alone.
  std::vector<const OpDef*> ops;
  for (const OpDef& op : OpRegistry::Builtin().ops()) {
    if (!IsTestOnlyOp(op.name)) ops.push_back(&op);
  }
  if (std::none_of(ops.begin(), ops.end(),
                   [&](const OpDef* op) { return device().SupportsOp(op->name); })) {
    GTEST_SKIP() << device().properties().name << " has no built-in op kernels yet";
  }
  for (const OpDef* op : ops) {
    EXPECT_TRUE(device().SupportsOp(op->name)) << op->name;
  }
}

TEST_P(DeviceConformanceTest, RunsAddWithBroadcasting) {
  GPUKIT_SKIP_UNLESS_DEVICE_RUNS("add");
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload<float>({1, 2, 3, 4, 5, 6}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, Upload<float>({10, 20, 30}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpResult out,
                              RunBuiltin("add", {ArrayOperand(a, DType::kFloat32, {2, 3}),
                                                 ArrayOperand(b, DType::kFloat32, {3})}));
  EXPECT_THAT(out.desc.shape, ElementsAre(2, 3));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> values, Download<float>(out.buffer, 6));
  EXPECT_THAT(values, ElementsAre(11, 22, 33, 14, 25, 36));
}

TEST_P(DeviceConformanceTest, RunsSubWithAScalarOnEitherSide) {
  GPUKIT_SKIP_UNLESS_DEVICE_RUNS("sub");
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload<int32_t>({5, 7, -3}));
  ScalarValue two;
  two.int_value = 2;
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      OpResult left, RunBuiltin("sub", {ArrayOperand(a, DType::kInt32, {3}), ScalarOperand(two)}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      OpResult right, RunBuiltin("sub", {ScalarOperand(two), ArrayOperand(a, DType::kInt32, {3})}));
  EXPECT_EQ(left.desc.dtype, DType::kInt32);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> l, Download<int32_t>(left.buffer, 3));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> r, Download<int32_t>(right.buffer, 3));
  EXPECT_THAT(l, ElementsAre(3, 5, -5));
  EXPECT_THAT(r, ElementsAre(-3, -5, 5));
}

TEST_P(DeviceConformanceTest, RunsMulAndTrueDivision) {
  GPUKIT_SKIP_UNLESS_DEVICE_RUNS("mul", "div");
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload<int32_t>({1, 6, -9}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, Upload<int32_t>({2, 4, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpResult product,
                              RunBuiltin("mul", {ArrayOperand(a, DType::kInt32, {3}),
                                                 ArrayOperand(b, DType::kInt32, {3})}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpResult quotient,
                              RunBuiltin("div", {ArrayOperand(a, DType::kInt32, {3}),
                                                 ArrayOperand(b, DType::kInt32, {3})}));
  EXPECT_EQ(quotient.desc.dtype, DType::kFloat32);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> p, Download<int32_t>(product.buffer, 3));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> q, Download<float>(quotient.buffer, 3));
  EXPECT_THAT(p, ElementsAre(2, 24, -18));
  EXPECT_THAT(q, ElementsAre(0.5f, 1.5f, -4.5f));
}

TEST_P(DeviceConformanceTest, RunsMatmul) {
  GPUKIT_SKIP_UNLESS_DEVICE_RUNS("matmul");
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload<float>({1, 2, 3, 4, 5, 6}));     // [2, 3]
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, Upload<float>({7, 8, 9, 10, 11, 12}));  // [3, 2]
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpResult out,
                              RunBuiltin("matmul", {ArrayOperand(a, DType::kFloat32, {2, 3}),
                                                    ArrayOperand(b, DType::kFloat32, {3, 2})}));
  EXPECT_THAT(out.desc.shape, ElementsAre(2, 2));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> c, Download<float>(out.buffer, 4));
  EXPECT_THAT(c, ElementsAre(58, 64, 139, 154));
}

TEST_P(DeviceConformanceTest, RunsReductionsAlongAnAxis) {
  GPUKIT_SKIP_UNLESS_DEVICE_RUNS("sum", "mean", "max", "min");
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId x, Upload<float>({1, -2, 3, 4, 5, -6}));  // [2, 3]
  const OpOperand in = ArrayOperand(x, DType::kFloat32, {2, 3});
  const AttrMap axis0 = {{"axis", int64_t{0}}};
  const AttrMap axis1_keep = {{"axis", int64_t{1}}, {"keepdims", true}};
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpResult sum, RunBuiltin("sum", {in}, axis0));
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpResult mean, RunBuiltin("mean", {in}, axis1_keep));
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpResult max, RunBuiltin("max", {in}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpResult min, RunBuiltin("min", {in}, axis0));
  EXPECT_THAT(mean.desc.shape, ElementsAre(2, 1));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> s, Download<float>(sum.buffer, 3));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> m, Download<float>(mean.buffer, 2));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> hi, Download<float>(max.buffer, 1));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> lo, Download<float>(min.buffer, 3));
  EXPECT_THAT(s, ElementsAre(5, 3, -3));
  EXPECT_THAT(m, ElementsAre(FloatEq(2.0f / 3), 1));
  EXPECT_THAT(hi, ElementsAre(5));
  EXPECT_THAT(lo, ElementsAre(1, -2, -6));
}

TEST_P(DeviceConformanceTest, RunsAstypeReshapeAndTranspose) {
  GPUKIT_SKIP_UNLESS_DEVICE_RUNS("astype", "reshape", "transpose");
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId x, Upload<float>({1.9f, -2.5f, 3, 4, 5, 6}));
  const OpOperand in = ArrayOperand(x, DType::kFloat32, {2, 3});
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpResult cast,
                              RunBuiltin("astype", {in}, {{"dtype", DType::kInt32}}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      OpResult reshaped, RunBuiltin("reshape", {in}, {{"shape", std::vector<int64_t>{3, -1}}}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(OpResult transposed, RunBuiltin("transpose", {in}));
  EXPECT_THAT(reshaped.desc.shape, ElementsAre(3, 2));
  EXPECT_THAT(transposed.desc.shape, ElementsAre(3, 2));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> c, Download<int32_t>(cast.buffer, 6));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> r, Download<float>(reshaped.buffer, 6));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> t, Download<float>(transposed.buffer, 6));
  EXPECT_THAT(c, ElementsAre(1, -2, 3, 4, 5, 6));
  EXPECT_THAT(r, ElementsAre(1.9f, -2.5f, 3, 4, 5, 6));
  EXPECT_THAT(t, ElementsAre(1.9f, 4, -2.5f, 5, 3, 6));
}

TEST_P(DeviceConformanceTest, OpsSeeTheCopiesEnqueuedBeforeThemAndViceVersa) {
  GPUKIT_SKIP_UNLESS_DEVICE_RUNS("add");
  // Upload, op and download are all enqueued before one wait: stream order must connect them.
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Allocate(4 * sizeof(float)));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId out, Allocate(4 * sizeof(float)));
  const std::vector<float> first = {1, 2, 3, 4}, second = {10, 20, 30, 40};
  std::vector<float> result_first(4), result_second(4);
  const OpRegistry& registry = OpRegistry::Builtin();
  GPUKIT_ASSERT_OK_AND_ASSIGN(const OpDef* add, registry.Find("add"));
  OpLaunch launch;
  launch.op = add;
  launch.inputs = {ArrayOperand(a, DType::kFloat32, {4}), ArrayOperand(a, DType::kFloat32, {4})};
  launch.output = out;
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      launch.plan,
      registry.Plan(
          *add, std::vector<OperandDesc>(2, OperandDesc{false, {DType::kFloat32, {4}}, {}}), {}));
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, first.data(), 16, stream()));
  GPUKIT_ASSERT_OK(device().RunOp(launch, stream()));
  GPUKIT_ASSERT_OK(device().CopyDeviceToHost(result_first.data(), out, 0, 16, stream()));
  GPUKIT_ASSERT_OK(device().CopyHostToDevice(a, 0, second.data(), 16, stream()));
  GPUKIT_ASSERT_OK(device().RunOp(launch, stream()));
  GPUKIT_ASSERT_OK(device().CopyDeviceToHost(result_second.data(), out, 0, 16, stream()));
  GPUKIT_ASSERT_OK(Sync());
  EXPECT_THAT(result_first, ElementsAre(2, 4, 6, 8));
  EXPECT_THAT(result_second, ElementsAre(20, 40, 60, 80));
}

TEST_P(DeviceConformanceTest, RunOpOfAnOpWithoutAKernelIsUnimplemented) {
  static const OpDef kUnknown = {.name = "frobnicate", .summary = "no backend has it"};
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload<float>({1}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId out, Allocate(4));
  OpLaunch launch;
  launch.op = &kUnknown;
  launch.plan.output = {DType::kFloat32, {1}};
  launch.inputs = {ArrayOperand(a, DType::kFloat32, {1})};
  launch.output = out;
  EXPECT_THAT(device().RunOp(launch, stream()),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("frobnicate")));
}

TEST_P(DeviceConformanceTest, RunOpValidatesBuffersWhenItIsCalled) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload<float>({1, 2, 3, 4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId small, Allocate(8));  // room for 2 floats, not 4
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId freed, Upload<float>({1, 2, 3, 4}));
  GPUKIT_ASSERT_OK(device().Free(freed));
  const OpRegistry& registry = OpRegistry::Builtin();
  GPUKIT_ASSERT_OK_AND_ASSIGN(const OpDef* neg, registry.Find("sub"));
  OpLaunch launch;
  launch.op = neg;
  launch.plan.compute_dtype = DType::kFloat32;
  launch.plan.output = {DType::kFloat32, {4}};

  launch.inputs = {ArrayOperand(a, DType::kFloat32, {4}),
                   ArrayOperand(freed, DType::kFloat32, {4})};
  GPUKIT_ASSERT_OK_AND_ASSIGN(launch.output, Allocate(16));
  EXPECT_THAT(device().RunOp(launch, stream()), StatusIs(kNotFound));

  launch.inputs = {ArrayOperand(a, DType::kFloat32, {4}), ArrayOperand(a, DType::kFloat32, {4})};
  launch.output = small;
  EXPECT_THAT(device().RunOp(launch, stream()), StatusIs(kOutOfRange));

  launch.inputs = {ArrayOperand(a, DType::kFloat32, {4}),
                   ArrayOperand(small, DType::kFloat32, {4})};
  GPUKIT_ASSERT_OK_AND_ASSIGN(launch.output, Allocate(16));
  EXPECT_THAT(device().RunOp(launch, stream()), StatusIs(kOutOfRange));

  launch.inputs = {ArrayOperand(a, DType::kFloat32, {4}), ArrayOperand(a, DType::kFloat32, {4})};
  EXPECT_THAT(device().RunOp(launch, StreamId{~uint64_t{0}}), StatusIs(kNotFound));
  GPUKIT_EXPECT_OK(Sync());  // nothing rejected reached the stream
}

// ---- The executor seam: segments and health ----

TEST_P(DeviceConformanceTest, AFreshDeviceIsHealthy) {
  GPUKIT_EXPECT_OK(device().CheckHealth());
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, Upload<float>({1, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> values, Download<float>(a, 2));
  EXPECT_THAT(values, ElementsAre(1, 2));
  GPUKIT_EXPECT_OK(device().CheckHealth());
}

TEST_P(DeviceConformanceTest, UnknownSegmentsAreNotFound) {
  EXPECT_THAT(device().UnmapSegment(12345), StatusIs(kNotFound, HasSubstr("12345")));
  EXPECT_THAT(device().BufferInSegment(12345, 0, 16), StatusIs(kNotFound, HasSubstr("12345")));
}

}  // namespace
}  // namespace gpukit::testing
