#include "daemon/session/host_region.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"
#include <sys/mman.h>

namespace gpukit {

// No lock: the last owner is the only thread that can reach the region.
HostRegion::~HostRegion() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (mapping_ == nullptr) return;
  if (registered_) {
    if (absl::Status status = device_.UnregisterHostMemory(mapping_); !status.ok()) {
      spdlog::warn("host region {}: {}", handle_, std::string(status.message()));
    }
  }
  ::munmap(mapping_, static_cast<size_t>(bytes_));
}

absl::Status HostRegion::Attach(ScopedFd fd) {
  GPUKIT_ASSIGN_OR_RETURN(const int64_t file_bytes, FileBytes(fd.get()));
  if (file_bytes < bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("host memory region ", handle_, " is ", bytes_,
                                                   " bytes but the descriptor's file has ",
                                                   file_bytes));
  }
  absl::MutexLock lock(&mu_);
  if (mapping_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("host memory region ", handle_, " has its descriptor already"));
  }
  void* mapping =
      ::mmap(nullptr, static_cast<size_t>(bytes_), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (mapping == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat("host memory region ", handle_,
                     ": cannot map the descriptor's file: ", std::strerror(errno)));
  }
  mapping_ = static_cast<char*>(mapping);
  // The descriptor closes here; the mapping keeps the memory.
  absl::Status registered = device_.RegisterHostMemory(mapping_, bytes_, fd.get());
  registered_ = registered.ok();
  if (!registered.ok()) {
    spdlog::warn("host region {} not registered with device {} (copies take the slower path): {}",
                 handle_, device_.properties().index, std::string(registered.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<char*> HostRegion::Data(int64_t offset, int64_t bytes) const {
  absl::MutexLock lock(&mu_);
  if (mapping_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("host memory region ", handle_,
                     " is waiting for its descriptor (send it over the "
                     "descriptor channel with the registration's token)"));
  }
  if (offset < 0 || bytes < 0 || offset > bytes_ || bytes > bytes_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("range [", offset, ", +", bytes,
                                              ") outside host memory region ", handle_, " of ",
                                              bytes_, " bytes"));
  }
  return mapping_ + offset;
}

}  // namespace gpukit
