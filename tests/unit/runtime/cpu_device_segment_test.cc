// The CPU device's side of the executor seam (runtime/cpu/cpu_device.h): memory another
// process owns, mapped whole by MapSegment and carved by BufferInSegment, as the device
// executor maps gpukitd's memfd segments (runtime/executor/shareable_segment_source.h).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/device.h"
#include "runtime/executor/shareable_segment_source.h"
#include "tests/testing/status_matchers.h"
#include <sys/mman.h>

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;
using ::testing::Each;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int64_t kSegmentBytes = int64_t{1} << 20;

std::unique_ptr<CpuDevice> MakeDevice() {
  CpuDeviceOptions options;
  options.memory_bytes = int64_t{16} << 20;
  absl::StatusOr<std::unique_ptr<CpuDevice>> device = CpuDevice::Create(options);
  EXPECT_THAT(device, IsOk());
  return device.ok() ? *std::move(device) : nullptr;
}

// A memfd named uniquely, so that /proc/self/maps shows exactly where it is mapped.
struct NamedFile {
  std::string name;
  ScopedFd fd;
};
NamedFile MakeFile(int64_t bytes) {
  static std::atomic<int> counter{0};
  NamedFile file;
  file.name = absl::StrCat("cpu-segment-test-", getpid(), "-", counter.fetch_add(1));
  absl::StatusOr<ScopedFd> fd = CreateSharedMemory(file.name, bytes);
  EXPECT_THAT(fd, IsOk());
  if (fd.ok()) file.fd = *std::move(fd);
  return file;
}

ScopedFd Dup(const ScopedFd& fd) { return ScopedFd(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0)); }

// How many of this process's mappings show `name` (a memfd appears as "/memfd:NAME (deleted)").
int MappingsOf(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) {
    if (line.find(absl::StrCat("/memfd:", name, " ")) != std::string::npos) ++count;
  }
  return count;
}

// The owner's own view of a shared file (what another process sees).
class OwnerView {
 public:
  OwnerView(int fd, int64_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED) << std::strerror(errno);
    data_ = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~OwnerView() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  uint8_t* data() { return data_; }

 private:
  int64_t bytes_;
  uint8_t* data_ = nullptr;
};

class CpuDeviceSegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = MakeDevice();
    ASSERT_NE(device_, nullptr);
    GPUKIT_ASSERT_OK_AND_ASSIGN(stream_, device_->CreateStream(StreamPriority::kNormal));
  }

  absl::Status Read(BufferId buffer, int64_t offset, std::vector<uint8_t>& out) {
    GPUKIT_RETURN_IF_ERROR(device_->CopyDeviceToHost(out.data(), buffer, offset,
                                                     static_cast<int64_t>(out.size()), stream_));
    return SynchronizeStream(*device_, stream_);
  }
  absl::Status Write(BufferId buffer, int64_t offset, const std::vector<uint8_t>& in) {
    GPUKIT_RETURN_IF_ERROR(device_->CopyHostToDevice(buffer, offset, in.data(),
                                                     static_cast<int64_t>(in.size()), stream_));
    return SynchronizeStream(*device_, stream_);
  }

  std::unique_ptr<CpuDevice> device_;
  StreamId stream_;
};

TEST_F(CpuDeviceSegmentTest, BuffersOverASegmentAreTheOwnersMemoryBothWays) {
  NamedFile file = MakeFile(kSegmentBytes);
  OwnerView owner(file.fd.get(), kSegmentBytes);
  ASSERT_NE(owner.data(), nullptr);
  for (int64_t i = 0; i < kSegmentBytes; ++i) owner.data()[i] = static_cast<uint8_t>(i * 7);
  GPUKIT_ASSERT_OK(device_->MapSegment(42, Dup(file.fd), kSegmentBytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device_->BufferInSegment(42, 4096, 8192));
  EXPECT_THAT(device_->BufferBytes(buffer), ::gpukit::testing::IsOkAndHolds(8192));

  // The device reads what the owner wrote at the buffer's offset in the segment...
  std::vector<uint8_t> read(8192);
  GPUKIT_ASSERT_OK(Read(buffer, 0, read));
  EXPECT_THAT(read, ElementsAreArray(owner.data() + 4096, 8192));
  // ... and the owner sees what the device writes, at the same place.
  std::vector<uint8_t> written(100, 0xAB);
  GPUKIT_ASSERT_OK(Write(buffer, 10, written));
  EXPECT_THAT(std::vector<uint8_t>(owner.data() + 4106, owner.data() + 4206), Each(0xAB));
  EXPECT_EQ(owner.data()[4105], static_cast<uint8_t>(4105 * 7));
  EXPECT_EQ(owner.data()[4206], static_cast<uint8_t>(4206 * 7));
  GPUKIT_EXPECT_OK(device_->Free(buffer));
  GPUKIT_EXPECT_OK(device_->UnmapSegment(42));
}

TEST_F(CpuDeviceSegmentTest, SegmentMemoryIsNotCountedAsTheDevicesOwn) {
  NamedFile file = MakeFile(kSegmentBytes);
  const int64_t before = device_->GetMemoryInfo().used_bytes;
  GPUKIT_ASSERT_OK(device_->MapSegment(1, std::move(file.fd), kSegmentBytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId whole, device_->BufferInSegment(1, 0, kSegmentBytes));
  EXPECT_EQ(device_->GetMemoryInfo().used_bytes, before);
  // The device's own memory is all still there for Allocate.
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId own,
                              device_->Allocate(device_->GetMemoryInfo().total_bytes - before));
  GPUKIT_EXPECT_OK(device_->Free(own));
  GPUKIT_EXPECT_OK(device_->Free(whole));
  EXPECT_EQ(device_->GetMemoryInfo().used_bytes, before);
  GPUKIT_EXPECT_OK(device_->UnmapSegment(1));
}

TEST_F(CpuDeviceSegmentTest, MapSegmentRefusesWhatItCannotMap) {
  NamedFile file = MakeFile(kSegmentBytes);
  EXPECT_THAT(device_->MapSegment(1, Dup(file.fd), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("> 0 bytes")));
  EXPECT_THAT(device_->MapSegment(1, Dup(file.fd), -4096),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(device_->MapSegment(1, Dup(file.fd), 2 * kSegmentBytes),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("has ", kSegmentBytes, " bytes"))));
  EXPECT_THAT(device_->MapSegment(1, ScopedFd(), kSegmentBytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot map")));
  // A descriptor opened read-only cannot be mapped for writing.
  ScopedFd read_only(
      ::open(absl::StrCat("/proc/self/fd/", file.fd.get()).c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(read_only.valid()) << std::strerror(errno);
  EXPECT_THAT(device_->MapSegment(1, std::move(read_only), kSegmentBytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot map")));
  // None of these left a segment behind.
  EXPECT_THAT(device_->UnmapSegment(1), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(MappingsOf(file.name), 0);
}

TEST_F(CpuDeviceSegmentTest, AKeyInUseIsRefusedUntilItsSegmentIsUnmapped) {
  NamedFile first = MakeFile(kSegmentBytes);
  NamedFile second = MakeFile(kSegmentBytes);
  GPUKIT_ASSERT_OK(device_->MapSegment(9, Dup(first.fd), kSegmentBytes));
  EXPECT_THAT(device_->MapSegment(9, Dup(second.fd), kSegmentBytes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 9 is in use")));
  EXPECT_EQ(MappingsOf(second.name), 0);
  GPUKIT_ASSERT_OK(device_->UnmapSegment(9));
  GPUKIT_ASSERT_OK(device_->MapSegment(9, Dup(second.fd), kSegmentBytes));
  EXPECT_EQ(MappingsOf(second.name), 1);
  GPUKIT_EXPECT_OK(device_->UnmapSegment(9));
}

TEST_F(CpuDeviceSegmentTest, BufferInSegmentChecksTheKeyAndTheRange) {
  NamedFile file = MakeFile(kSegmentBytes);
  GPUKIT_ASSERT_OK(device_->MapSegment(3, std::move(file.fd), kSegmentBytes));
  EXPECT_THAT(device_->BufferInSegment(4, 0, 16), StatusIs(absl::StatusCode::kNotFound));
  struct Range {
    int64_t offset, bytes;
  };
  for (const Range& r :
       {Range{-1, 16}, Range{0, -1}, Range{0, kSegmentBytes + 1}, Range{kSegmentBytes - 15, 16},
        Range{kSegmentBytes + 1, 0}, Range{1, INT64_MAX}}) {
    EXPECT_THAT(device_->BufferInSegment(3, r.offset, r.bytes),
                StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("outside segment 3")))
        << r.offset << " +" << r.bytes;
  }
  // The whole segment, and an empty range at its end, are inside.
  for (const Range& r : {Range{0, kSegmentBytes}, Range{kSegmentBytes, 0}}) {
    absl::StatusOr<BufferId> buffer = device_->BufferInSegment(3, r.offset, r.bytes);
    ASSERT_THAT(buffer, IsOk()) << r.offset << " +" << r.bytes;
    GPUKIT_EXPECT_OK(device_->Free(*buffer));
  }
  GPUKIT_EXPECT_OK(device_->UnmapSegment(3));
}

TEST_F(CpuDeviceSegmentTest, UnmapWaitsForEveryBufferAndReleasesTheMapping) {
  NamedFile file = MakeFile(kSegmentBytes);
  GPUKIT_ASSERT_OK(device_->MapSegment(5, Dup(file.fd), kSegmentBytes));
  EXPECT_EQ(MappingsOf(file.name), 1);
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId a, device_->BufferInSegment(5, 0, 4096));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId b, device_->BufferInSegment(5, 4096, 4096));
  EXPECT_THAT(device_->UnmapSegment(5),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("2 buffers")));
  // Freeing one buffer leaves the segment mapped and the other buffer usable.
  GPUKIT_ASSERT_OK(device_->Free(a));
  EXPECT_THAT(device_->Free(a), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(MappingsOf(file.name), 1);
  GPUKIT_ASSERT_OK(Write(b, 0, std::vector<uint8_t>(4096, 0x5A)));
  std::vector<uint8_t> read(4096);
  GPUKIT_ASSERT_OK(Read(b, 0, read));
  EXPECT_THAT(read, Each(0x5A));
  EXPECT_THAT(device_->UnmapSegment(5),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("(1 buffer over it)")));
  GPUKIT_ASSERT_OK(device_->Free(b));
  GPUKIT_ASSERT_OK(device_->UnmapSegment(5));
  EXPECT_EQ(MappingsOf(file.name), 0);
  EXPECT_THAT(device_->UnmapSegment(5), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(device_->BufferInSegment(5, 0, 16), StatusIs(absl::StatusCode::kNotFound));
  // The memory itself is the owner's: what the device wrote is still in the file.
  OwnerView owner(file.fd.get(), kSegmentBytes);
  ASSERT_NE(owner.data(), nullptr);
  EXPECT_EQ(owner.data()[4096], 0x5A);
  EXPECT_EQ(owner.data()[8191], 0x5A);
}

TEST_F(CpuDeviceSegmentTest, MapSegmentKeepsNoDescriptor) {
  NamedFile file = MakeFile(kSegmentBytes);
  ScopedFd dup = Dup(file.fd);
  const int dup_number = dup.get();
  GPUKIT_ASSERT_OK(device_->MapSegment(6, std::move(dup), kSegmentBytes));
  // The descriptor it was given is closed: its number is free again.
  EXPECT_EQ(::fcntl(dup_number, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
  GPUKIT_EXPECT_OK(device_->UnmapSegment(6));
}

TEST(CpuDeviceSegmentLifetimeTest, DestroyingTheDeviceUnmapsItsSegments) {
  NamedFile file = MakeFile(kSegmentBytes);
  std::unique_ptr<CpuDevice> device = MakeDevice();
  ASSERT_NE(device, nullptr);
  GPUKIT_ASSERT_OK(device->MapSegment(1, Dup(file.fd), kSegmentBytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer, device->BufferInSegment(1, 64, 64));
  (void)buffer;  // left live: the device forgets it without touching the segment's memory
  EXPECT_EQ(MappingsOf(file.name), 1);
  device.reset();
  EXPECT_EQ(MappingsOf(file.name), 0);
}

// gpukitd's side and the executor's side together: a MemfdSegmentSource segment, shared and
// mapped by the device, is one memory with every other descriptor of it.
TEST(CpuDeviceSegmentLifetimeTest, MapsAMemfdSegmentSourcesSegment) {
  MemfdSegmentSource source(int64_t{8} << 20, int64_t{2} << 20);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Segment segment, source.Map(int64_t{2} << 20));
  std::unique_ptr<CpuDevice> device = MakeDevice();
  ASSERT_NE(device, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd shared, source.Share(segment));
  GPUKIT_ASSERT_OK(device->MapSegment(segment.handle, std::move(shared), segment.bytes));
  GPUKIT_ASSERT_OK_AND_ASSIGN(BufferId buffer,
                              device->BufferInSegment(segment.handle, 1 << 20, 4096));
  GPUKIT_ASSERT_OK_AND_ASSIGN(StreamId stream, device->CreateStream(StreamPriority::kNormal));
  std::vector<uint8_t> data(4096);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i ^ 0x3C);
  GPUKIT_ASSERT_OK(device->CopyHostToDevice(buffer, 0, data.data(), 4096, stream));
  GPUKIT_ASSERT_OK(SynchronizeStream(*device, stream));

  // Another descriptor of the segment (as a restarted executor would get) sees the bytes.
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd again, source.Share(segment));
  OwnerView view(again.get(), segment.bytes);
  ASSERT_NE(view.data(), nullptr);
  EXPECT_THAT(std::vector<uint8_t>(view.data() + (1 << 20), view.data() + (1 << 20) + 4096),
              ElementsAreArray(data));
  GPUKIT_EXPECT_OK(device->DestroyStream(stream));
  GPUKIT_EXPECT_OK(device->Free(buffer));
  GPUKIT_EXPECT_OK(device->UnmapSegment(segment.handle));
  source.Unmap(segment);
}

}  // namespace
}  // namespace gpukit
