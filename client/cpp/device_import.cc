#include "client/cpp/device_import.h"

#include <cuda.h>  // types only; calls go through CudaDriver

#include <cstdint>
#include <utility>

#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_driver.h"
#include "spdlog/spdlog.h"

namespace gpukit::internal {
namespace {

void LogIfFailed(CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) spdlog::warn("{} failed: {}", call, CuErrorName(result));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceImport>> DeviceImport::Import(int device_index, ScopedFd fd,
                                                                   int64_t allocation_bytes) {
  GPUKIT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
  CUdevice device = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceGet(&device, device_index), "cuDeviceGet"));
  CUcontext context = nullptr;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu->cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain"));
  auto release_context = [&] {
    LogIfFailed(cu->cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease");
  };
  absl::Status status = CheckCu(cu->cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUmemGenericAllocationHandle handle = 0;
  if (status.ok()) {
    status = CheckCu(cu->cuMemImportFromShareableHandle(
                         &handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd.get())),
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                     "cuMemImportFromShareableHandle");
  }
  if (!status.ok()) {
    release_context();
    return status;
  }
  const size_t size = static_cast<size_t>(allocation_bytes);
  CUdeviceptr address = 0;
  status = CheckCu(cu->cuMemAddressReserve(&address, size, 0, 0, 0), "cuMemAddressReserve");
  if (status.ok()) {
    status = CheckCu(cu->cuMemMap(address, size, 0, handle, 0), "cuMemMap");
    if (status.ok()) {
      CUmemAccessDesc access = {};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = device;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      status = CheckCu(cu->cuMemSetAccess(address, size, &access, 1), "cuMemSetAccess");
      if (!status.ok()) LogIfFailed(cu->cuMemUnmap(address, size), "cuMemUnmap");
    }
    if (!status.ok()) LogIfFailed(cu->cuMemAddressFree(address, size), "cuMemAddressFree");
  }
  // The mapping holds the memory from here on; the handle and the descriptor can go.
  LogIfFailed(cu->cuMemRelease(handle), "cuMemRelease");
  if (!status.ok()) {
    release_context();
    return status;
  }
  return std::unique_ptr<DeviceImport>(
      new DeviceImport(device, context, static_cast<uint64_t>(address), allocation_bytes));
}

DeviceImport::~DeviceImport() {
  absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
  if (!cu.ok()) return;
  const size_t size = static_cast<size_t>(bytes_);
  LogIfFailed((*cu)->cuCtxSetCurrent(static_cast<CUcontext>(context_)), "cuCtxSetCurrent");
  LogIfFailed((*cu)->cuMemUnmap(static_cast<CUdeviceptr>(address_), size), "cuMemUnmap");
  LogIfFailed((*cu)->cuMemAddressFree(static_cast<CUdeviceptr>(address_), size),
              "cuMemAddressFree");
  LogIfFailed((*cu)->cuDevicePrimaryCtxRelease(device_), "cuDevicePrimaryCtxRelease");
}

}  // namespace gpukit::internal
