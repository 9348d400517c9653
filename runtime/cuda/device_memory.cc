#include "runtime/cuda/device_memory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace {

// Segments of the legacy (cuMemAlloc) source: the VMM granularity of current GPUs, so the
// pool's slabs look the same on both.
constexpr int64_t kLegacyGranularityBytes = int64_t{2} << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<CudaSegmentSource>> CudaSegmentSource::Create(const CudaDriver& cu,
                                                                             CUcontext context,
                                                                             CUdevice device) {
  int vmm = 0;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                      device),
              "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)"));
  CUmemAllocationProp prop = {};
  if (vmm == 0) {
    return std::unique_ptr<CudaSegmentSource>(
        new CudaSegmentSource(cu, context, Kind::kLegacy, prop, kLegacyGranularityBytes));
  }
  int posix_fd = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(
      cu.cuDeviceGetAttribute(
          &posix_fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device),
      "cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)"));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes =
      posix_fd != 0 ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  size_t granularity = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(
      cu.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      "cuMemGetAllocationGranularity"));
  if (granularity == 0 || (granularity & (granularity - 1)) != 0) {
    return absl::InternalError(absl::StrCat("cuMemGetAllocationGranularity gave ", granularity,
                                            " bytes, not a power of two"));
  }
  return std::unique_ptr<CudaSegmentSource>(
      new CudaSegmentSource(cu, context, posix_fd != 0 ? Kind::kVmmPosixFd : Kind::kVmm, prop,
                            static_cast<int64_t>(granularity)));
}

CudaSegmentSource::CudaSegmentSource(const CudaDriver& cu, CUcontext context, Kind kind,
                                     CUmemAllocationProp prop, int64_t granularity_bytes)
    : cu_(cu), context_(context), kind_(kind), prop_(prop), granularity_bytes_(granularity_bytes) {}

std::string CudaSegmentSource::Describe() const {
  const int64_t mib = granularity_bytes_ >> 20;
  switch (kind_) {
    case Kind::kVmmPosixFd:
      return absl::StrCat("VMM (cuMemCreate, POSIX file descriptors, ", mib, " MiB granularity)");
    case Kind::kVmm:
      return absl::StrCat("VMM (cuMemCreate, not exportable: no POSIX file descriptor handles, ",
                          mib, " MiB granularity)");
    case Kind::kLegacy:
      return "cuMemAlloc (the GPU has no virtual memory management; not exportable)";
  }
  return "unknown";
}

absl::StatusOr<Segment> CudaSegmentSource::Map(int64_t bytes) {
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  const size_t size = static_cast<size_t>(bytes);
  if (kind_ == Kind::kLegacy) {
    CUdeviceptr address = 0;
    GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuMemAlloc(&address, size), "cuMemAlloc"));
    return Segment{static_cast<uint64_t>(address), bytes, 0};
  }
  CUmemGenericAllocationHandle handle = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuMemCreate(&handle, size, &prop_, 0), "cuMemCreate"));
  CUdeviceptr address = 0;
  absl::Status status = CheckCu(
      cu_.cuMemAddressReserve(&address, size, static_cast<size_t>(granularity_bytes_), 0, 0),
      "cuMemAddressReserve");
  if (status.ok()) {
    status = CheckCu(cu_.cuMemMap(address, size, 0, handle, 0), "cuMemMap");
    if (status.ok()) {
      CUmemAccessDesc access = {};
      access.location = prop_.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      status = CheckCu(cu_.cuMemSetAccess(address, size, &access, 1), "cuMemSetAccess");
      if (status.ok()) return Segment{static_cast<uint64_t>(address), bytes, handle};
      LogIfFailed(cu_.cuMemUnmap(address, size), "cuMemUnmap");
    }
    LogIfFailed(cu_.cuMemAddressFree(address, size), "cuMemAddressFree");
  }
  LogIfFailed(cu_.cuMemRelease(handle), "cuMemRelease");
  return status;
}

void CudaSegmentSource::Unmap(const Segment& segment) {
  LogIfFailed(cu_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  const CUdeviceptr address = static_cast<CUdeviceptr>(segment.address);
  if (kind_ == Kind::kLegacy) {
    LogIfFailed(cu_.cuMemFree(address), "cuMemFree");
    return;
  }
  const size_t size = static_cast<size_t>(segment.bytes);
  LogIfFailed(cu_.cuMemUnmap(address, size), "cuMemUnmap");
  LogIfFailed(cu_.cuMemAddressFree(address, size), "cuMemAddressFree");
  LogIfFailed(cu_.cuMemRelease(static_cast<CUmemGenericAllocationHandle>(segment.handle)),
              "cuMemRelease");
}

absl::StatusOr<Segment> PinnedHostSource::Map(int64_t bytes) {
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuCtxSetCurrent(context_), "cuCtxSetCurrent"));
  void* data = nullptr;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu_.cuMemHostAlloc(&data, static_cast<size_t>(bytes), 0), "cuMemHostAlloc"));
  return Segment{reinterpret_cast<uint64_t>(data), bytes, 0};
}

void PinnedHostSource::Unmap(const Segment& segment) {
  LogIfFailed(cu_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
  LogIfFailed(cu_.cuMemFreeHost(reinterpret_cast<void*>(segment.address)), "cuMemFreeHost");
}

}  // namespace gpukit
