// MemfdSegmentSource (runtime/executor/shareable_segment_source.h): the CPU backend's device
// memory as gpukitd owns it, one memfd per segment, never mapped by gpukitd itself.
#include "runtime/executor/shareable_segment_source.h"

#include <dirent.h>
#include <fcntl.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/unix_fd.h"
#include "tests/testing/status_matchers.h"
#include <sys/mman.h>

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kGranularity = int64_t{2} << 20;
constexpr int64_t kCapacity = 4 * kGranularity;

// This process's open descriptors.
int OpenFds() {
  int count = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the directory's own descriptor
}

TEST(MemfdSegmentSourceTest, DescribesItsCapacityAndGranularity) {
  MemfdSegmentSource source(kCapacity, kGranularity);
  EXPECT_EQ(source.capacity_bytes(), kCapacity);
  EXPECT_EQ(source.granularity_bytes(), kGranularity);
  EXPECT_THAT(source.Describe(), HasSubstr("memfd"));
}

TEST(MemfdSegmentSourceTest, SegmentsAreDistinctNonOverlappingAndSized) {
  MemfdSegmentSource source(kCapacity, kGranularity);
  std::vector<Segment> segments;
  std::set<uint64_t> handles;
  for (int64_t bytes : {kGranularity, 2 * kGranularity, kGranularity}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Segment segment, source.Map(bytes));
    EXPECT_EQ(segment.bytes, bytes);
    EXPECT_NE(segment.handle, 0u);
    EXPECT_TRUE(handles.insert(segment.handle).second) << "handle " << segment.handle;
    for (const Segment& other : segments) {
      EXPECT_TRUE(segment.address + segment.bytes <= other.address ||
                  other.address + other.bytes <= segment.address)
          << "segments at " << segment.address << " and " << other.address << " overlap";
    }
    GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd fd, source.Share(segment));
    EXPECT_THAT(FileBytes(fd.get()), IsOkAndHolds(bytes));
    segments.push_back(segment);
  }
  for (const Segment& segment : segments) source.Unmap(segment);
}

TEST(MemfdSegmentSourceTest, MapBeyondTheCapacityIsResourceExhaustedUntilMemoryIsReturned) {
  MemfdSegmentSource source(kCapacity, kGranularity);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment big, source.Map(3 * kGranularity));
  EXPECT_THAT(source.Map(2 * kGranularity),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("out of device memory")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment last, source.Map(kGranularity));  // exactly full
  EXPECT_THAT(source.Map(kGranularity), StatusIs(absl::StatusCode::kResourceExhausted));
  source.Unmap(big);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment again, source.Map(3 * kGranularity));
  // Unmapping a segment twice returns its memory once.
  source.Unmap(last);
  source.Unmap(last);
  EXPECT_THAT(source.Map(2 * kGranularity), StatusIs(absl::StatusCode::kResourceExhausted));
  source.Unmap(again);
}

TEST(MemfdSegmentSourceTest, ShareGivesANewDescriptorOfTheSameMemory) {
  MemfdSegmentSource source(kCapacity, kGranularity);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment segment, source.Map(kGranularity));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd first, source.Share(segment));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd second, source.Share(segment));
  EXPECT_NE(first.get(), second.get());
  EXPECT_NE(::fcntl(first.get(), F_GETFD) & FD_CLOEXEC, 0) << "shared descriptors close on exec";
  const size_t bytes = static_cast<size_t>(kGranularity);
  void* a = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, first.get(), 0);
  void* b = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, second.get(), 0);
  ASSERT_NE(a, MAP_FAILED);
  ASSERT_NE(b, MAP_FAILED);
  std::memset(a, 0x77, bytes);
  EXPECT_EQ(static_cast<uint8_t*>(b)[0], 0x77);
  EXPECT_EQ(static_cast<uint8_t*>(b)[bytes - 1], 0x77);
  munmap(a, bytes);
  munmap(b, bytes);
  // A descriptor shared after the writes still sees them: the memory lives in the source.
  first.Reset();
  second.Reset();
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd third, source.Share(segment));
  uint8_t byte = 0;
  ASSERT_EQ(::pread(third.get(), &byte, 1, kGranularity / 2), 1);
  EXPECT_EQ(byte, 0x77);
  source.Unmap(segment);
}

TEST(MemfdSegmentSourceTest, UnmapClosesTheSegmentsFileAndForgetsIt) {
  MemfdSegmentSource source(kCapacity, kGranularity);
  const int fds_before = OpenFds();
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment segment, source.Map(kGranularity));
  EXPECT_EQ(OpenFds(), fds_before + 1);
  source.Unmap(segment);
  EXPECT_EQ(OpenFds(), fds_before);
  EXPECT_THAT(source.Share(segment), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(source.Share(Segment{}), StatusIs(absl::StatusCode::kNotFound));
}

TEST(MemfdSegmentSourceTest, AnUnmappedSegmentsMemoryLivesOnWhileADescriptorOfItDoes) {
  MemfdSegmentSource source(kCapacity, kGranularity);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment segment, source.Map(kGranularity));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd held, source.Share(segment));
  const uint8_t value = 0x42;
  ASSERT_EQ(::pwrite(held.get(), &value, 1, 100), 1);
  source.Unmap(segment);
  uint8_t byte = 0;
  ASSERT_EQ(::pread(held.get(), &byte, 1, 100), 1);
  EXPECT_EQ(byte, value);
}

}  // namespace
}  // namespace gpukit
