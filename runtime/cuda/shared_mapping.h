// SharedMapping: device memory of another process, mapped into this one.
//
// Two ways in, both CUDA IPC:
//   - a VMM allocation's POSIX file descriptor (cuMemExportToShareableHandle): imported with
//     cuMemImportFromShareableHandle and mapped whole at an address range of its own
//     (cuMemAddressReserve, cuMemMap, cuMemSetAccess for `device`);
//   - a legacy IPC handle (cuIpcGetMemHandle of cuMemAlloc memory, 64 bytes): opened with
//     cuIpcOpenMemHandle, which maps the whole allocation.
// The destructor unmaps (cuMemUnmap + cuMemAddressFree, or cuIpcCloseMemHandle); the memory
// itself belongs to its owner and lives on as long as the owner keeps it (VMM memory also as
// long as any other process maps it). The calling thread must have the context current that
// the memory is to be mapped into, in both Open* and the destructor.
//
// gpukitd maps clients' memory with it (Device::ImportBuffer) and libgpukit maps gpukitd's
// (Array::Map): one implementation of the import for both.
//
// Thread safety: a value; no shared state.
#ifndef GPUKIT_RUNTIME_CUDA_SHARED_MAPPING_H_
#define GPUKIT_RUNTIME_CUDA_SHARED_MAPPING_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/base/unix_fd.h"

namespace gpukit {

struct CudaDriver;

class SharedMapping {
 public:
  // Size of a legacy IPC handle (CUipcMemHandle).
  static constexpr size_t kIpcHandleBytes = 64;

  // Maps all `allocation_bytes` of the VMM allocation behind `fd`, readable and writable from
  // `device` (a CUdevice), or read-only. The mapping keeps the descriptor and closes it when
  // it unmaps: closed right after the import instead, first maps took 1.6 ms rather than
  // 0.35 to 0.4 ms on the H100 host (docs/benchmarks.md; the driver's reason is not known). INVALID_ARGUMENT for a descriptor that is not exported device memory or a size
  // that is not the allocation's (the driver's error named), FAILED_PRECONDITION for a
  // driver without VMM support.
  static absl::StatusOr<std::unique_ptr<SharedMapping>> OpenDescriptor(const CudaDriver& cu,
                                                                       int device, ScopedFd fd,
                                                                       int64_t allocation_bytes,
                                                                       bool read_only = false);
  // Opens a legacy IPC handle of kIpcHandleBytes bytes; the mapping's size is what the
  // driver says the allocation has. INVALID_ARGUMENT for bytes that are not a handle of a live
  // allocation (among them a handle of this very process, which CUDA refuses to open).
  static absl::StatusOr<std::unique_ptr<SharedMapping>> OpenIpcHandle(const CudaDriver& cu,
                                                                      absl::string_view handle);
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  uint64_t address() const { return address_; }  // a CUdeviceptr of this process
  int64_t bytes() const { return bytes_; }

 private:
  enum class Kind { kDescriptor, kIpcHandle };
  SharedMapping(const CudaDriver& cu, Kind kind, uint64_t address, int64_t bytes, ScopedFd fd)
      : cu_(cu), kind_(kind), address_(address), bytes_(bytes), fd_(std::move(fd)) {}

  const CudaDriver& cu_;
  const Kind kind_;
  const uint64_t address_;
  const int64_t bytes_;
  ScopedFd fd_;  // kDescriptor: closed after the unmap
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_SHARED_MAPPING_H_
