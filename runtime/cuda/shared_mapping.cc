#include "runtime/cuda/shared_mapping.h"

#include <cuda.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_driver.h"
#include "spdlog/spdlog.h"

namespace gpukit {
absl::StatusOr<std::unique_ptr<SharedMapping>> SharedMapping::OpenDescriptor(
    const CudaDriver& cu, int device, ScopedFd fd, int64_t allocation_bytes, bool read_only) {
  if (allocation_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared allocation of ", allocation_bytes, " bytes"));
  }
  CUmemGenericAllocationHandle handle = 0;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu.cuMemImportFromShareableHandle(
                  &handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd.get())),
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              "cuMemImportFromShareableHandle"));
  const size_t size = static_cast<size_t>(allocation_bytes);
  CUdeviceptr address = 0;
  absl::Status status =
      CheckCu(cu.cuMemAddressReserve(&address, size, 0, 0, 0), "cuMemAddressReserve");
  if (status.ok()) {
    status = CheckCu(cu.cuMemMap(address, size, 0, handle, 0), "cuMemMap");
    if (status.ok()) {
      CUmemAccessDesc access = {};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = device;
      access.flags = read_only ? CU_MEM_ACCESS_FLAGS_PROT_READ : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      status = CheckCu(cu.cuMemSetAccess(address, size, &access, 1), "cuMemSetAccess");
      if (!status.ok()) LogIfFailed(cu.cuMemUnmap(address, size), "cuMemUnmap");
    }
    if (!status.ok()) LogIfFailed(cu.cuMemAddressFree(address, size), "cuMemAddressFree");
  }
  // The mapping holds the memory from here on; the handle can go.
  LogIfFailed(cu.cuMemRelease(handle), "cuMemRelease");
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("mapping a shared allocation of ",
                                                    allocation_bytes, " bytes: ", status.message()));
  }
  return std::unique_ptr<SharedMapping>(new SharedMapping(
      cu, Kind::kDescriptor, static_cast<uint64_t>(address), allocation_bytes, std::move(fd)));
}

absl::StatusOr<std::unique_ptr<SharedMapping>> SharedMapping::OpenIpcHandle(
    const CudaDriver& cu, absl::string_view handle) {
  static_assert(sizeof(CUipcMemHandle) == kIpcHandleBytes);
  if (handle.size() != kIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a CUDA IPC handle has ", kIpcHandleBytes,
                                                   " bytes, not ", handle.size()));
  }
  CUipcMemHandle ipc;
  std::memcpy(&ipc, handle.data(), sizeof(ipc));
  CUdeviceptr address = 0;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu.cuIpcOpenMemHandle(&address, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
              "cuIpcOpenMemHandle"));
  CUdeviceptr base = 0;
  size_t size = 0;
  absl::Status status =
      CheckCu(cu.cuMemGetAddressRange(&base, &size, address), "cuMemGetAddressRange");
  if (!status.ok()) {
    LogIfFailed(cu.cuIpcCloseMemHandle(address), "cuIpcCloseMemHandle");
    return status;
  }
  // The handle names the allocation from its base, so address == base.
  return std::unique_ptr<SharedMapping>(new SharedMapping(
      cu, Kind::kIpcHandle, static_cast<uint64_t>(address),
      static_cast<int64_t>(size - static_cast<size_t>(address - base)), ScopedFd()));
}

SharedMapping::~SharedMapping() {
  const auto address = static_cast<CUdeviceptr>(address_);
  if (kind_ == Kind::kIpcHandle) {
    LogIfFailed(cu_.cuIpcCloseMemHandle(address), "cuIpcCloseMemHandle");
    return;
  }
  const size_t size = static_cast<size_t>(bytes_);
  LogIfFailed(cu_.cuMemUnmap(address, size), "cuMemUnmap");
  LogIfFailed(cu_.cuMemAddressFree(address, size), "cuMemAddressFree");
  fd_.Reset();
}

}  // namespace gpukit
