// Internals of CudaDevice shared by its source files (cuda_device.cc: creation, streams,
// copies, events, modules and launches; cuda_device_memory.cc: buffers, the pools, host memory,
// export, import and mapped segments; cuda_device_ops.cc: built-in ops and cuBLASLt): the
// nested types behind its tables and two driver helpers. Include it only from those files.
//
// Thread safety: as each type says; the device's mu_ guards the tables that hold them.
#ifndef GPUKIT_RUNTIME_CUDA_CUDA_DEVICE_INTERNAL_H_
#define GPUKIT_RUNTIME_CUDA_CUDA_DEVICE_INTERNAL_H_

#include <cuda.h>  // types and constants only; calls go through CudaDriver

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_driver.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace cuda_device_internal {

inline absl::Status MakeCurrent(const CudaDriver& cu, CUcontext context) {
  // Always set rather than compare with cuCtxGetCurrent: a thread may still name a primary
  // context that was released and retained again since, and setting it is as cheap.
  return CheckCu(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

// Releases have no caller to report to; a faulted context fails every one of them alike.
// Cleanups at the device's end often meet a context already torn down: debug level here,
// where cuda_driver.h's LogIfFailed warns.
inline void LogQuietlyIfFailed(CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) spdlog::debug("{} failed: {}", call, CuErrorName(result));
}

}  // namespace cuda_device_internal

using cuda_device_internal::LogQuietlyIfFailed;
using cuda_device_internal::MakeCurrent;

// A CUDA stream, destroyed when the last user lets go (the table, or a call using it).
struct CudaDevice::Stream {
  Stream(const CudaDriver& cu, CUcontext context, CUstream handle)
      : cu(cu), context(context), handle(handle) {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (MakeCurrent(cu, context).ok())
      LogQuietlyIfFailed(cu.cuStreamDestroy(handle), "cuStreamDestroy");
  }

  const CudaDriver& cu;
  const CUcontext context;
  const CUstream handle;
  // Seconds one slice of a large matmul on it may take, about; 0: matmuls run whole.
  double matmul_slice_seconds = 0;
  // SMs of its green context; 0: a plain stream (every SM).
  int sm_count = 0;
  // Orders RecordEvent on this stream, so sequence numbers follow the driver's record order.
  absl::Mutex record_mu;
  uint64_t next_event_seq ABSL_GUARDED_BY(record_mu) = 0;
};

// Timing CUDA events for reuse: every task records two, and creating and destroying them
// costs two driver calls each. Recording an event again is allowed while an earlier record is
// still pending; nobody can wait on the earlier one once its EventId is gone.
class CudaDevice::EventPool {
 public:
  EventPool(const CudaDriver& cu, CUcontext context) : cu_(cu), context_(context) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool() {
    if (!MakeCurrent(cu_, context_).ok()) return;
    for (CUevent event : free_) LogQuietlyIfFailed(cu_.cuEventDestroy(event), "cuEventDestroy");
  }

  // A free event, or a new one; the context must be current.
  absl::StatusOr<CUevent> Take() {
    {
      absl::MutexLock lock(&mu_);
      if (!free_.empty()) {
        CUevent event = free_.back();
        free_.pop_back();
        return event;
      }
    }
    CUevent event = nullptr;
    // Default flags: timing stays enabled, which EventElapsedNs (pacing) needs.
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuEventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate"));
    return event;
  }

  void Give(CUevent event) {
    {
      absl::MutexLock lock(&mu_);
      if (free_.size() < kMaxFree) {
        free_.push_back(event);
        return;
      }
    }
    if (MakeCurrent(cu_, context_).ok())
      LogQuietlyIfFailed(cu_.cuEventDestroy(event), "cuEventDestroy");
  }

 private:
  // More than enough for every stream's tasks in flight; beyond it, events are destroyed.
  static constexpr size_t kMaxFree = 1024;
  const CudaDriver& cu_;
  const CUcontext context_;
  absl::Mutex mu_;
  std::vector<CUevent> free_ ABSL_GUARDED_BY(mu_);
};

// A timing CUDA event and where it was recorded (EventElapsedNs checks both).
struct CudaDevice::Event {
  Event(std::shared_ptr<EventPool> pool, CUevent handle) : pool(std::move(pool)), handle(handle) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { pool->Give(handle); }

  const std::shared_ptr<EventPool> pool;
  const CUevent handle;
  uint64_t stream_id = 0;  // set before the event enters the table, constant afterwards
  uint64_t seq = 0;        // order among the stream's events
};

// A loaded module, unloaded when the table and every function of it have let go.
struct CudaDevice::Module {
  Module(const CudaDriver& cu, CUcontext context, CUmodule handle)
      : cu(cu), context(context), handle(handle) {}
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module() {
    if (MakeCurrent(cu, context).ok())
      LogQuietlyIfFailed(cu.cuModuleUnload(handle), "cuModuleUnload");
  }

  const CudaDriver& cu;
  const CUcontext context;
  const CUmodule handle;
  // Kernel name -> FunctionId, so GetFunction gives one id per kernel. Guarded by the
  // device's mu_ (a nested type cannot name it in an annotation).
  absl::flat_hash_map<std::string, uint64_t> functions;
};

// A kernel of a module, with what launch validation needs to know about it.
struct CudaDevice::Function {
  std::shared_ptr<Module> module;  // keeps the code loaded while a launch uses it
  CUfunction handle = nullptr;
  std::string name;
  int max_threads_per_block = 0;  // after register use; at most the device's limit
  int static_shared_bytes = 0;
  bool params_known = false;        // the driver reports parameters (CUDA 12.4+)
  std::vector<size_t> param_bytes;  // when params_known
  // Dynamic shared memory the kernel is opted into; only ever raised, so a concurrent launch
  // never sees its limit lowered.
  absl::Mutex mu;
  int dynamic_shared_limit_bytes ABSL_GUARDED_BY(mu) = 0;
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_CUDA_DEVICE_INTERNAL_H_
