// HostRegion: a client's shared memory mapped into gpukitd (ArrayService.RegisterHostMemory),
// so bulk transfers between it and arrays are a memcpy, or a DMA on a GPU, instead of bytes
// inside gRPC messages.
//
// A region is created when the client registers it and becomes usable when the client's
// descriptor arrives over the descriptor channel (Attach): gpukitd maps the memory shared
// and registers it with the device (page-locked on a GPU). The destructor undoes both. The
// session owns its regions; a copy in flight holds the region, so unregistering waits for
// nothing and unmaps when the copy lets go.
//
//   auto region = std::make_shared<HostRegion>(NewOpaqueId("m-"), device, bytes);
//   GPUKIT_RETURN_IF_ERROR(region->Attach(std::move(fd)));  // from the descriptor channel
//   GPUKIT_ASSIGN_OR_RETURN(char* data, region->Data(offset, n));
//
// Thread safety: thread-safe.
#ifndef GPUKIT_DAEMON_SESSION_HOST_REGION_H_
#define GPUKIT_DAEMON_SESSION_HOST_REGION_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/base/unix_fd.h"
#include "runtime/device.h"

namespace gpukit {

class HostRegion {
 public:
  // `device` must outlive the region.
  HostRegion(std::string handle, Device& device, int64_t bytes)
      : handle_(std::move(handle)), device_(device), bytes_(bytes) {}
  HostRegion(const HostRegion&) = delete;
  HostRegion& operator=(const HostRegion&) = delete;
  ~HostRegion();

  const std::string& handle() const { return handle_; }
  int64_t bytes() const { return bytes_; }

  // Maps `fd` (MAP_SHARED, read-write) and registers the mapping with the device. Errors:
  // FAILED_PRECONDITION when a descriptor came already, INVALID_ARGUMENT when the file is
  // smaller than the region or cannot be mapped (not shared memory).
  absl::Status Attach(ScopedFd fd);
  // The mapping at `offset`, after checking [offset, offset + bytes) lies inside the region
  // (OUT_OF_RANGE otherwise); FAILED_PRECONDITION before Attach.
  absl::StatusOr<char*> Data(int64_t offset, int64_t bytes) const;

 private:
  const std::string handle_;
  Device& device_;
  const int64_t bytes_;
  mutable absl::Mutex mu_;
  char* mapping_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SESSION_HOST_REGION_H_
