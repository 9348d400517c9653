// TransferEngine: large host <-> device copies at pinned-memory speed from ordinary
// (pageable) host memory.
//
// A copy from pageable memory goes through the driver's own small staging buffer, one
// piece at a time, at a fraction of what the bus carries. The engine instead keeps a few
// pinned staging buffers and pipelines: while the DMA engine moves chunk i, worker threads
// copy chunk i + 1 into the next staging buffer (several threads, since one core's memcpy
// is slower than the bus). Downloads run the same pipeline the other way.
//
//   TransferEngine engine(cu, context, {});
//   GPUKIT_RETURN_IF_ERROR(engine.HostToDevice(dst, src, bytes, stream));
//
// Upload returns once every byte of `src` has been copied into staging and its DMA queued
// on `stream` (so `src` may be reused at once); download returns once `dst` holds the data.
// Both order correctly with the stream's other work. Transfers through one engine run one at
// a time (they share the staging buffers and, in the end, one bus).
//
// Thread safety: thread-safe.
#ifndef GPUKIT_RUNTIME_CUDA_TRANSFER_ENGINE_H_
#define GPUKIT_RUNTIME_CUDA_TRANSFER_ENGINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "runtime/base/parallel_copy.h"
#include "runtime/cuda/cuda_driver.h"

namespace gpukit {

// Defaults measured on the H100 host (16 cores): 8 threads and 32 MiB chunks moved 256 MiB
// at about half the raw pinned rate, 4 threads and 8 MiB chunks at 0.4x, and a single
// thread is slower still; host memcpy bandwidth, not the bus, is the limit
// (docs/benchmarks.md). The staging buffers (128 MiB of pinned memory per device) are
// allocated on the first copy of at least `min_bytes`.
struct TransferEngineOptions {
  int64_t chunk_bytes = int64_t{32} << 20;  // one staging buffer
  int staging_buffers = 4;
  int copy_threads = 8;  // host memcpy threads per chunk, the calling thread included
  // Copies smaller than this go straight to the driver (no staging, no threads).
  int64_t min_bytes = int64_t{1} << 20;
};

class TransferEngine {
 public:
  // `context` is made current on the calling thread by the caller; the engine allocates its
  // pinned buffers lazily, on the first large transfer.
  TransferEngine(const CudaDriver& cu, CUcontext context, const TransferEngineOptions& options);
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  absl::Status HostToDevice(CUdeviceptr dst, const void* src, int64_t bytes, CUstream stream);
  absl::Status DeviceToHost(void* dst, CUdeviceptr src, int64_t bytes, CUstream stream);

 private:
  struct Slot {
    void* pinned = nullptr;
    CUevent done = nullptr;  // recorded after the slot's last DMA
    bool busy = false;       // `done` has been recorded and not yet waited for
  };

  absl::Status EnsureSlotsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WaitSlot(Slot& slot);
  // memcpy(dst, src, bytes) split across copier_'s threads and the calling thread.
  void ParallelCopy(void* dst, const void* src, int64_t bytes);

  const CudaDriver& cu_;
  const CUcontext context_;
  const TransferEngineOptions options_;

  absl::Mutex mu_;  // one transfer at a time
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);

  // The memcpy threads (copy_threads - 1 of them; the caller is the last), started once.
  ParallelCopyWorkers copier_;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_TRANSFER_ENGINE_H_
