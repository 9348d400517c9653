// DeviceImport: device memory gpukitd exported (ArrayService.Export), mapped into this
// process: the client side of zero-copy device arrays.
//
// Import takes the descriptor gpukitd sent over its descriptor channel (a CUDA VMM allocation
// as a POSIX file descriptor) and maps all of it (SharedMapping) in the primary context of the
// given device, readable and writable from that device, or only readable. The destructor
// unmaps it; the memory itself lives until every process that maps it has let go.
//
// Thread safety: a value; Import may be called from any thread.
#ifndef GPUKIT_CLIENT_CPP_DEVICE_IMPORT_H_
#define GPUKIT_CLIENT_CPP_DEVICE_IMPORT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/base/unix_fd.h"
#include "runtime/cuda/shared_mapping.h"

namespace gpukit {
struct CudaDriver;
}  // namespace gpukit

namespace gpukit::internal {

// A device's primary context, retained for the life of this object: the context the CUDA
// runtime, and so PyTorch, works in. Retaining it does not change the calling thread's
// current context; Enter() makes it current for a while and puts back what was current.
class PrimaryContext {
 public:
  // FAILED_PRECONDITION without a usable CUDA driver; the driver's errors.
  static absl::StatusOr<std::unique_ptr<PrimaryContext>> Retain(int device_index);
  ~PrimaryContext();
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;

  // While it lives, the context is current on the thread that entered; then the context that
  // was current before is again, so the caller's own CUDA work keeps its device.
  class Scope {
   public:
    Scope(Scope&& other) noexcept;
    Scope& operator=(Scope&&) = delete;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope();

   private:
    friend class PrimaryContext;
    Scope(const CudaDriver& cu, void* previous) : cu_(&cu), previous_(previous) {}
    const CudaDriver* cu_;  // null once moved from
    void* previous_;        // a CUcontext, or null
  };
  absl::StatusOr<Scope> Enter() const;
  // Makes the context current on the calling thread, for good.
  absl::Status MakeCurrent() const;

  const CudaDriver& cu() const { return cu_; }
  int device() const { return device_; }  // the CUdevice

 private:
  PrimaryContext(const CudaDriver& cu, int device, void* context)
      : cu_(cu), device_(device), context_(context) {}
  const CudaDriver& cu_;
  const int device_;
  void* const context_;  // a CUcontext
};

class DeviceImport {
 public:
  // FAILED_PRECONDITION without a usable CUDA driver in this process; the driver's errors
  // (INVALID_ARGUMENT for a descriptor that is not exported device memory).
  static absl::StatusOr<std::unique_ptr<DeviceImport>> Import(int device_index, ScopedFd fd,
                                                              int64_t allocation_bytes,
                                                              bool read_only = false);
  // The same for a legacy CUDA IPC handle (64 bytes; mapped read-write).
  static absl::StatusOr<std::unique_ptr<DeviceImport>> OpenIpcHandle(int device_index,
                                                                     const std::string& handle);
  ~DeviceImport();
  DeviceImport(const DeviceImport&) = delete;
  DeviceImport& operator=(const DeviceImport&) = delete;

  uint64_t address() const { return mapping_->address(); }  // a CUdeviceptr of this process
  int64_t bytes() const { return mapping_->bytes(); }

 private:
  DeviceImport(std::unique_ptr<PrimaryContext> context, std::unique_ptr<SharedMapping> mapping)
      : context_(std::move(context)), mapping_(std::move(mapping)) {}

  std::unique_ptr<PrimaryContext> context_;  // retained while the mapping lives
  std::unique_ptr<SharedMapping> mapping_;
};

// Device memory of this process described for gpukitd's ArrayService.Import: a legacy CUDA IPC
// handle for cuMemAlloc (cudaMalloc) memory, or else a VMM allocation's POSIX descriptor
// (memory from cuMemCreate with that handle type, mapped from the allocation's start).
struct SharedDeviceMemory {
  std::string cuda_ipc_handle;   // 64 bytes, or empty when `fd` is set
  ScopedFd fd;                   // VMM
  int64_t allocation_bytes = 0;  // the allocation's size
  int64_t offset_bytes = 0;      // where `pointer` is in it
  int device_index = 0;          // the CUDA device (ordinal) the memory is on
};

// Describes the `bytes` at `pointer` (a CUdeviceptr of this process) for sharing. Errors:
// FAILED_PRECONDITION without a usable CUDA driver; INVALID_ARGUMENT for a pointer that is not
// device memory, a range past the end of its allocation, or memory that cannot be shared
// (a VMM allocation without the POSIX descriptor handle type, managed memory).
absl::StatusOr<SharedDeviceMemory> ShareDeviceMemory(uint64_t pointer, int64_t bytes);

// Waits until the legacy default stream of `device_index`'s primary context is idle: where
// a DLPack producer ordered its work when asked for stream 1. FAILED_PRECONDITION without a
// usable CUDA driver; the driver's errors.
absl::Status SynchronizeLegacyStream(int device_index);

}  // namespace gpukit::internal

#endif  // GPUKIT_CLIENT_CPP_DEVICE_IMPORT_H_
