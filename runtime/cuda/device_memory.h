// CudaSegmentSource: where the CUDA device's memory pool (runtime/memory_pool.h) gets its
// segments.
//
// On GPUs with virtual memory management (every SM 80+ GPU under a current driver) a segment
// is physical memory from cuMemCreate, requested with the POSIX file-descriptor handle type
// where the device supports it, mapped at an address range of its own (cuMemAddressReserve,
// cuMemMap, cuMemSetAccess for read-write from this GPU). Its handle stays open while the
// segment is mapped, so any segment can later be exported to another process with
// cuMemExportToShareableHandle and passed over a unix socket: the zero-copy path for
// clients. Where VMM is missing the source falls back to cuMemAlloc segments (handle 0, not
// exportable as file descriptors) and says so in its description.
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<CudaSegmentSource> source,
//                           CudaSegmentSource::Create(*cu, context, device));
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<MemoryPool> pool,
//                           MemoryPool::Create(std::move(source), {}));
//
// Thread safety: thread-safe; each call makes the context current on its calling thread.
#ifndef GPUKIT_RUNTIME_CUDA_DEVICE_MEMORY_H_
#define GPUKIT_RUNTIME_CUDA_DEVICE_MEMORY_H_

#include <cuda.h>  // types only; calls go through CudaDriver

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/memory_pool.h"

namespace gpukit {

class CudaSegmentSource final : public SegmentSource {
 public:
  enum class Kind { kVmm, kVmmPosixFd, kLegacy };

  // `context` must be the primary context of `device` and outlive the source. Errors from
  // the driver's queries (granularity) come back as they are.
  static absl::StatusOr<std::unique_ptr<CudaSegmentSource>> Create(const CudaDriver& cu,
                                                                   CUcontext context,
                                                                   CUdevice device);

  int64_t granularity_bytes() const override { return granularity_bytes_; }
  // RESOURCE_EXHAUSTED "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY (...)" when the GPU is full;
  // whatever was set up before a failing step is undone.
  absl::StatusOr<Segment> Map(int64_t bytes) override;
  void Unmap(const Segment& segment) override;

  Kind kind() const { return kind_; }
  // "VMM (cuMemCreate, POSIX file descriptors, 2 MiB granularity)", for logs.
  std::string Describe() const;

 private:
  CudaSegmentSource(const CudaDriver& cu, CUcontext context, Kind kind, CUmemAllocationProp prop,
                    int64_t granularity_bytes);

  const CudaDriver& cu_;
  const CUcontext context_;
  const Kind kind_;
  const CUmemAllocationProp prop_;  // kVmm*: what cuMemCreate is asked for
  const int64_t granularity_bytes_;
};

// PinnedHostSource: page-locked host memory (cuMemHostAlloc) in segments, for a MemoryPool of
// host buffers the GPU copies to and from at full speed (spilled arrays). Locking pages is
// slow (the kernel touches every page), which is why the memory is pooled.
class PinnedHostSource final : public SegmentSource {
 public:
  // `context` must outlive the source.
  PinnedHostSource(const CudaDriver& cu, CUcontext context) : cu_(cu), context_(context) {}
  int64_t granularity_bytes() const override { return int64_t{2} << 20; }
  // RESOURCE_EXHAUSTED when the host cannot lock that much.
  absl::StatusOr<Segment> Map(int64_t bytes) override;
  void Unmap(const Segment& segment) override;

 private:
  const CudaDriver& cu_;
  const CUcontext context_;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_DEVICE_MEMORY_H_
