// CudaVmmSegmentSource: gpukitd's device memory on one GPU, as physical VMM allocations that
// its device executor maps (runtime/executor/shareable_segment_source.h says why gpukitd owns
// the memory).
//
// Each segment is one cuMemCreate allocation (pinned device memory of the GPU, requested with
// POSIX file-descriptor handles) exported at once with cuMemExportToShareableHandle. The source
// keeps the allocation handle and the descriptor until Unmap; Share hands out duplicates of
// the descriptor, which the executor imports and maps (CudaDevice::MapSegment). This process
// never maps the memory and never creates a CUDA context: cuInit, device queries, cuMemCreate,
// cuMemExportToShareableHandle and cuMemRelease need none (measured on the H100 host, CUDA
// 13.0 with driver 580, issue 15: allocations made and exported with no current context map
// and compute in another process). So a kernel's fault in the executor cannot reach this
// process, and the memory and its bytes outlive any executor: the driver frees physical memory
// only once the handle is released here and no process maps it.
//
// A Segment's `address` is synthetic (a counter from 1 << 40, advanced by each segment's size,
// so segments never overlap and the pool can carve them), `handle` is its key for Share and
// Device::MapSegment.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<CudaVmmSegmentSource> source,
//                           CudaVmmSegmentSource::Create(0));
//   GPUKIT_ASSIGN_OR_RETURN(Segment segment, source->Map(source->granularity_bytes()));
//   GPUKIT_ASSIGN_OR_RETURN(ScopedFd fd, source->Share(segment));
//   // send fd to the executor, which calls device.MapSegment(segment.handle, fd, bytes)
//
// No CUDA type appears here: gpukitd includes this header without CUDA's.
//
// Thread safety: thread-safe. Driver calls run outside the source's lock.
#ifndef GPUKIT_RUNTIME_CUDA_VMM_SEGMENT_SOURCE_H_
#define GPUKIT_RUNTIME_CUDA_VMM_SEGMENT_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/base/unix_fd.h"
#include "runtime/executor/shareable_segment_source.h"

namespace gpukit {

struct CudaDriver;

class CudaVmmSegmentSource final : public ShareableSegmentSource {
 public:
  // Loads the driver (CudaDriver::Get, which runs cuInit) and reads the GPU's properties: a few
  // driver calls, no context. FAILED_PRECONDITION without a usable driver, or for a GPU without
  // virtual memory management or POSIX file-descriptor handles (naming which is missing);
  // INVALID_ARGUMENT for an index the driver does not have.
  static absl::StatusOr<std::unique_ptr<CudaVmmSegmentSource>> Create(int device_index);

  // Releases every segment still mapped (closes its descriptor, cuMemRelease); memory an
  // executor still maps lives on until it unmaps it.
  ~CudaVmmSegmentSource() override;
  CudaVmmSegmentSource(const CudaVmmSegmentSource&) = delete;
  CudaVmmSegmentSource& operator=(const CudaVmmSegmentSource&) = delete;

  // The recommended granularity of a pinned device allocation with POSIX descriptor handles
  // (cuMemGetAllocationGranularity; 2 MiB on the H100).
  int64_t granularity_bytes() const override { return granularity_bytes_; }
  // cuMemCreate + cuMemExportToShareableHandle: physical memory, not mapped anywhere yet. Costs
  // the driver's allocation (tens of microseconds to a few milliseconds for large segments).
  // INVALID_ARGUMENT for `bytes` that is not a positive multiple of the granularity;
  // RESOURCE_EXHAUSTED when the segments would exceed the GPU's memory or the driver is out of
  // memory (naming the sizes); other driver errors as CheckCu gives them.
  absl::StatusOr<Segment> Map(int64_t bytes) override;
  // Closes the segment's descriptor and releases its handle (cuMemRelease). Unknown segments
  // are ignored (logged).
  void Unmap(const Segment& segment) override;
  // A close-on-exec duplicate of the segment's descriptor (fcntl F_DUPFD_CLOEXEC): no driver
  // call. NOT_FOUND for a segment that is not mapped, RESOURCE_EXHAUSTED when the process is
  // out of descriptors.
  absl::StatusOr<ScopedFd> Share(const Segment& segment) const override;
  // cuDeviceTotalMem.
  int64_t capacity_bytes() const override { return capacity_bytes_; }
  // "VMM (cuMemCreate, POSIX file descriptors, 2 MiB granularity) on GPU 0 (NVIDIA H100 80GB
  // HBM3), 79.2 GiB".
  std::string Describe() const override;

  // The bytes and the number of segments mapped now: for tests and diagnostics.
  int64_t mapped_bytes() const;
  int64_t segment_count() const;

 private:
  struct Allocation {
    uint64_t handle = 0;  // CUmemGenericAllocationHandle
    ScopedFd fd;          // its POSIX descriptor
    int64_t bytes = 0;
  };

  CudaVmmSegmentSource(const CudaDriver& cu, int device_index, int device, std::string name,
                       int64_t granularity_bytes, int64_t capacity_bytes)
      : cu_(cu),
        device_index_(device_index),
        device_(device),
        name_(std::move(name)),
        granularity_bytes_(granularity_bytes),
        capacity_bytes_(capacity_bytes) {}

  const CudaDriver& cu_;
  const int device_index_;
  const int device_;  // CUdevice
  const std::string name_;
  const int64_t granularity_bytes_;
  const int64_t capacity_bytes_;

  mutable absl::Mutex mu_;
  // Bytes of segments mapped or being created (reserved before cuMemCreate).
  int64_t mapped_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_address_ ABSL_GUARDED_BY(mu_) = uint64_t{1} << 40;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Allocation> allocations_ ABSL_GUARDED_BY(mu_);  // by key
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_VMM_SEGMENT_SOURCE_H_
