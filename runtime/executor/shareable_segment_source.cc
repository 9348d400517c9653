#include "runtime/executor/shareable_segment_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/units.h"

namespace gpukit {

absl::StatusOr<Segment> MemfdSegmentSource::Map(int64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    if (bytes > capacity_bytes_ - mapped_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of device memory: ", FormatBytes(bytes), " requested, ",
                       FormatBytes(capacity_bytes_ - mapped_bytes_), " of ",
                       FormatBytes(capacity_bytes_), " free"));
    }
    mapped_bytes_ += bytes;
  }
  absl::StatusOr<ScopedFd> file = CreateSharedMemory("gpukit-device", bytes);
  absl::MutexLock lock(&mu_);
  if (!file.ok()) {
    mapped_bytes_ -= bytes;
    return file.status();
  }
  Segment segment;
  segment.address = next_address_;
  segment.bytes = bytes;
  segment.handle = next_key_++;
  next_address_ += static_cast<uint64_t>(bytes);
  files_.emplace(segment.handle, *std::move(file));
  return segment;
}

void MemfdSegmentSource::Unmap(const Segment& segment) {
  absl::MutexLock lock(&mu_);
  if (files_.erase(segment.handle) > 0) mapped_bytes_ -= segment.bytes;
}

absl::StatusOr<ScopedFd> MemfdSegmentSource::Share(const Segment& segment) const {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(segment.handle);
  if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no segment ", segment.handle));
  const int fd = ::fcntl(it->second.get(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot duplicate a segment's descriptor: ", std::strerror(errno)));
  }
  return ScopedFd(fd);
}

std::string MemfdSegmentSource::Describe() const {
  return absl::StrCat("memfd segments, ", FormatBytes(capacity_bytes_), ", ",
                      FormatBytes(granularity_bytes_), " granularity");
}

}  // namespace gpukit
