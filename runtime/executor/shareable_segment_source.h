// ShareableSegmentSource: device memory that gpukitd owns and its device executor maps.
//
// gpukitd keeps every byte of device memory in its own process, where no kernel runs, so a
// kernel that faults (and takes its CUDA context down with it) or an executor that dies loses
// nothing: the next executor maps the same memory again. A source hands out segments as a
// SegmentSource does (the daemon's MemoryPool carves them into buffers), and a descriptor of
// each segment's memory for the executor to map (Device::MapSegment):
//   - CUDA: physical memory from cuMemCreate with POSIX file-descriptor handles, exported
//     with cuMemExportToShareableHandle. gpukitd needs no CUDA context for it and never maps
//     the memory itself (runtime/cuda/vmm_segment_source.h).
//   - CPU backend: a memfd per segment, which gpukitd does not map either
//     (MemfdSegmentSource below).
// A Segment's `address` is the source's name for it in gpukitd (unique and not overlapping
// others, so the pool can carve it), not an address anything can read; `handle` is its key
// (what Share and Device::MapSegment name it by).
//
// Thread safety: implementations are thread-safe.
#ifndef GPUKIT_RUNTIME_EXECUTOR_SHAREABLE_SEGMENT_SOURCE_H_
#define GPUKIT_RUNTIME_EXECUTOR_SHAREABLE_SEGMENT_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/base/unix_fd.h"
#include "runtime/memory_pool.h"

namespace gpukit {

class ShareableSegmentSource : public SegmentSource {
 public:
  // A new descriptor of the memory of `segment` (one that Map returned and that is still
  // mapped), to send to the executor. NOT_FOUND for an unknown segment.
  virtual absl::StatusOr<ScopedFd> Share(const Segment& segment) const = 0;
  // The memory the device offers in all.
  virtual int64_t capacity_bytes() const = 0;
  // "memfd segments", "VMM (cuMemCreate, POSIX file descriptors, 2 MiB granularity)": logs.
  virtual std::string Describe() const = 0;
};

// The CPU backend's source: one memfd per segment, never mapped by gpukitd. Map fails with
// RESOURCE_EXHAUSTED once the segments would exceed `capacity_bytes` (the simulated device's
// memory) or the system cannot provide the file.
class MemfdSegmentSource final : public ShareableSegmentSource {
 public:
  MemfdSegmentSource(int64_t capacity_bytes, int64_t granularity_bytes)
      : capacity_bytes_(capacity_bytes), granularity_bytes_(granularity_bytes) {}

  int64_t granularity_bytes() const override { return granularity_bytes_; }
  absl::StatusOr<Segment> Map(int64_t bytes) override;
  void Unmap(const Segment& segment) override;
  absl::StatusOr<ScopedFd> Share(const Segment& segment) const override;
  int64_t capacity_bytes() const override { return capacity_bytes_; }
  std::string Describe() const override;

 private:
  const int64_t capacity_bytes_;
  const int64_t granularity_bytes_;
  mutable absl::Mutex mu_;
  int64_t mapped_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_address_ ABSL_GUARDED_BY(mu_) = uint64_t{1} << 40;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, ScopedFd> files_ ABSL_GUARDED_BY(mu_);  // key -> memfd
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_EXECUTOR_SHAREABLE_SEGMENT_SOURCE_H_
