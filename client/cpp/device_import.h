// DeviceImport: device memory gpukitd exported (ArrayService.Export), mapped into this
// process: the client side of zero-copy device arrays.
//
// Import takes the descriptor gpukitd sent over its descriptor channel (a CUDA VMM allocation
// as a POSIX file descriptor), imports it with cuMemImportFromShareableHandle and maps all of
// it at an address range of its own in the primary context of the given device, readable and
// writable from that device. The destructor unmaps it; the memory itself lives until every
// process that maps it has let go.
//
// Thread safety: a value; Import may be called from any thread.
#ifndef GPUKIT_CLIENT_CPP_DEVICE_IMPORT_H_
#define GPUKIT_CLIENT_CPP_DEVICE_IMPORT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "runtime/base/unix_fd.h"

namespace gpukit::internal {

class DeviceImport {
 public:
  // FAILED_PRECONDITION without a usable CUDA driver in this process; the driver's errors
  // (INVALID_ARGUMENT for a descriptor that is not exported device memory).
  static absl::StatusOr<std::unique_ptr<DeviceImport>> Import(int device_index, ScopedFd fd,
                                                              int64_t allocation_bytes);
  ~DeviceImport();
  DeviceImport(const DeviceImport&) = delete;
  DeviceImport& operator=(const DeviceImport&) = delete;

  uint64_t address() const { return address_; }  // a CUdeviceptr of this process
  int64_t bytes() const { return bytes_; }

 private:
  DeviceImport(int device, void* context, uint64_t address, int64_t bytes)
      : device_(device), context_(context), address_(address), bytes_(bytes) {}

  const int device_;     // CUdevice, whose primary context this process retained
  void* const context_;  // that context (a CUcontext)
  const uint64_t address_;
  const int64_t bytes_;
};

}  // namespace gpukit::internal

#endif  // GPUKIT_CLIENT_CPP_DEVICE_IMPORT_H_
