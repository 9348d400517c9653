#include "runtime/cuda/vmm_segment_source.h"

#include <cuda.h>  // types and constants only; calls go through CudaDriver
#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/units.h"
#include "runtime/cuda/cuda_driver.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace {

static_assert(sizeof(CUmemGenericAllocationHandle) == sizeof(uint64_t),
              "allocation handles are kept as uint64_t");
static_assert(std::is_same_v<CUdevice, int>, "CUdevice is kept as int");

// What cuMemCreate is asked for: pinned memory of the GPU, exportable as a POSIX descriptor.
// Built per call rather than kept, so the header needs no CUDA type.
CUmemAllocationProp AllocationProp(CUdevice device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaVmmSegmentSource>> CudaVmmSegmentSource::Create(
    int device_index) {
  GPUKIT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
  int count = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (device_index < 0 || device_index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device index ", device_index,
                                                   " is out of range: the driver shows ", count,
                                                   " device(s)"));
  }
  CUdevice device = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceGet(&device, device_index), "cuDeviceGet"));
  char name[256] = {};
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu->cuDeviceGetName(name, sizeof(name) - 1, device), "cuDeviceGetName"));
  const std::string described = absl::StrCat("GPU ", device_index, " (", name, ")");

  auto attribute = [&](CUdevice_attribute which, const char* what) -> absl::StatusOr<int> {
    int value = 0;
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceGetAttribute(&value, which, device),
                                   absl::StrCat("cuDeviceGetAttribute(", what, ")")));
    return value;
  };
  GPUKIT_ASSIGN_OR_RETURN(const int vmm,
                          attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                    "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"));
  if (vmm == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(described,
                     " has no virtual memory management (cuMemCreate), which gpukitd needs to "
                     "own device memory its executor maps"));
  }
  GPUKIT_ASSIGN_OR_RETURN(const int posix_fd,
                          attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                    "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED"));
  if (posix_fd == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(described,
                     " cannot export device memory as POSIX file descriptors "
                     "(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), which gpukitd needs to hand its "
                     "memory to its executor"));
  }
  const CUmemAllocationProp prop = AllocationProp(device);
  size_t granularity = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(
      cu->cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      "cuMemGetAllocationGranularity"));
  if (granularity == 0 || (granularity & (granularity - 1)) != 0) {
    return absl::InternalError(absl::StrCat("cuMemGetAllocationGranularity gave ", granularity,
                                            " bytes, not a power of two"));
  }
  size_t total_bytes = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceTotalMem(&total_bytes, device), "cuDeviceTotalMem"));
  return std::unique_ptr<CudaVmmSegmentSource>(
      new CudaVmmSegmentSource(*cu, device_index, device, name, static_cast<int64_t>(granularity),
                               static_cast<int64_t>(total_bytes)));
}

CudaVmmSegmentSource::~CudaVmmSegmentSource() {
  absl::flat_hash_map<uint64_t, Allocation> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(allocations_);
    mapped_bytes_ = 0;
  }
  for (auto& [key, allocation] : left) {
    allocation.fd.Reset();
    LogIfFailed(cu_.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(allocation.handle)),
                "cuMemRelease");
  }
}

absl::StatusOr<Segment> CudaVmmSegmentSource::Map(int64_t bytes) {
  if (bytes <= 0 || bytes % granularity_bytes_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment of ", bytes, " bytes: must be a positive multiple of ",
                     FormatBytes(granularity_bytes_), " (the granularity)"));
  }
  // Reserved first, so that concurrent Maps cannot together pass the capacity.
  {
    absl::MutexLock lock(&mu_);
    if (bytes > capacity_bytes_ - mapped_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of device memory on GPU ", device_index_, ": ", FormatBytes(bytes),
                       " requested, gpukitd holds ", FormatBytes(mapped_bytes_), " of its ",
                       FormatBytes(capacity_bytes_)));
    }
    mapped_bytes_ += bytes;
  }
  auto unreserve = [&] {
    absl::MutexLock lock(&mu_);
    mapped_bytes_ -= bytes;
  };
  const CUmemAllocationProp prop = AllocationProp(device_);
  CUmemGenericAllocationHandle handle = 0;
  const CUresult created = cu_.cuMemCreate(&handle, static_cast<size_t>(bytes), &prop, 0);
  if (created != CUDA_SUCCESS) {
    unreserve();
    const absl::Status status = CheckCu(created, "cuMemCreate");
    if (created == CUDA_ERROR_OUT_OF_MEMORY) {
      // Other processes (or the executor's own workspaces) hold the rest of the GPU.
      int64_t held = 0;
      {
        absl::MutexLock lock(&mu_);
        held = mapped_bytes_;
      }
      return absl::ResourceExhaustedError(
          absl::StrCat("out of device memory on GPU ", device_index_, ": ", FormatBytes(bytes),
                       " requested, gpukitd holds ", FormatBytes(held), " of its ",
                       FormatBytes(capacity_bytes_), " (", status.message(), ")"));
    }
    return status;
  }
  int raw_fd = -1;
  const absl::Status exported =
      CheckCu(cu_.cuMemExportToShareableHandle(&raw_fd, handle,
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              "cuMemExportToShareableHandle");
  ScopedFd fd(raw_fd);
  // The executor gets its own duplicates (Share); this one must not leak into children.
  if (exported.ok() && ::fcntl(fd.get(), F_SETFD, FD_CLOEXEC) != 0) {
    spdlog::warn("cannot mark a segment's descriptor close-on-exec: {}", std::strerror(errno));
  }
  if (!exported.ok()) {
    LogIfFailed(cu_.cuMemRelease(handle), "cuMemRelease");
    unreserve();
    return exported;
  }
  absl::MutexLock lock(&mu_);
  Segment segment;
  segment.address = next_address_;
  segment.bytes = bytes;
  segment.handle = next_key_++;
  next_address_ += static_cast<uint64_t>(bytes);
  allocations_.emplace(segment.handle,
                       Allocation{static_cast<uint64_t>(handle), std::move(fd), bytes});
  return segment;
}

void CudaVmmSegmentSource::Unmap(const Segment& segment) {
  Allocation doomed;
  {
    absl::MutexLock lock(&mu_);
    auto it = allocations_.find(segment.handle);
    if (it == allocations_.end()) {
      spdlog::warn("GPU {}: unmap of unknown segment {}", device_index_, segment.handle);
      return;
    }
    doomed = std::move(it->second);
    allocations_.erase(it);
    mapped_bytes_ -= doomed.bytes;
  }
  doomed.fd.Reset();
  LogIfFailed(cu_.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(doomed.handle)),
              "cuMemRelease");
}

absl::StatusOr<ScopedFd> CudaVmmSegmentSource::Share(const Segment& segment) const {
  absl::MutexLock lock(&mu_);
  auto it = allocations_.find(segment.handle);
  if (it == allocations_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no segment ", segment.handle, " on GPU ", device_index_));
  }
  const int fd = ::fcntl(it->second.fd.get(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot duplicate a segment's descriptor: ", std::strerror(errno)));
  }
  return ScopedFd(fd);
}

std::string CudaVmmSegmentSource::Describe() const {
  return absl::StrCat("VMM (cuMemCreate, POSIX file descriptors, ", FormatBytes(granularity_bytes_),
                      " granularity) on GPU ", device_index_, " (", name_, "), ",
                      FormatBytes(capacity_bytes_));
}

int64_t CudaVmmSegmentSource::mapped_bytes() const {
  absl::MutexLock lock(&mu_);
  return mapped_bytes_;
}

int64_t CudaVmmSegmentSource::segment_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(allocations_.size());
}

}  // namespace gpukit
