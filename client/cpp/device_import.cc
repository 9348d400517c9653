#include "client/cpp/device_import.h"

#include <cuda.h>  // types only; calls go through CudaDriver

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_driver.h"
#include "spdlog/spdlog.h"

namespace gpukit::internal {
absl::StatusOr<std::unique_ptr<PrimaryContext>> PrimaryContext::Retain(int device_index) {
  GPUKIT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
  CUdevice device = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceGet(&device, device_index), "cuDeviceGet"));
  CUcontext context = nullptr;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu->cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain"));
  return std::unique_ptr<PrimaryContext>(new PrimaryContext(*cu, device, context));
}

PrimaryContext::~PrimaryContext() {
  LogIfFailed(cu_.cuDevicePrimaryCtxRelease(device_), "cuDevicePrimaryCtxRelease");
}

absl::Status PrimaryContext::MakeCurrent() const {
  return CheckCu(cu_.cuCtxSetCurrent(static_cast<CUcontext>(context_)), "cuCtxSetCurrent");
}

absl::StatusOr<PrimaryContext::Scope> PrimaryContext::Enter() const {
  CUcontext previous = nullptr;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu_.cuCtxGetCurrent(&previous), "cuCtxGetCurrent"));
  GPUKIT_RETURN_IF_ERROR(MakeCurrent());
  return Scope(cu_, previous);
}

PrimaryContext::Scope::Scope(Scope&& other) noexcept
    : cu_(std::exchange(other.cu_, nullptr)), previous_(other.previous_) {}

PrimaryContext::Scope::~Scope() {
  if (cu_ != nullptr) {
    LogIfFailed(cu_->cuCtxSetCurrent(static_cast<CUcontext>(previous_)), "cuCtxSetCurrent");
  }
}

absl::StatusOr<std::unique_ptr<DeviceImport>> DeviceImport::Import(int device_index, ScopedFd fd,
                                                                   int64_t allocation_bytes,
                                                                   bool read_only) {
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<PrimaryContext> context,
                          PrimaryContext::Retain(device_index));
  GPUKIT_ASSIGN_OR_RETURN(PrimaryContext::Scope scope, context->Enter());
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<SharedMapping> mapping,
                          SharedMapping::OpenDescriptor(context->cu(), context->device(),
                                                        std::move(fd), allocation_bytes,
                                                        read_only));
  return std::unique_ptr<DeviceImport>(new DeviceImport(std::move(context), std::move(mapping)));
}

absl::StatusOr<std::unique_ptr<DeviceImport>> DeviceImport::OpenIpcHandle(
    int device_index, const std::string& handle) {
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<PrimaryContext> context,
                          PrimaryContext::Retain(device_index));
  GPUKIT_ASSIGN_OR_RETURN(PrimaryContext::Scope scope, context->Enter());
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<SharedMapping> mapping,
                          SharedMapping::OpenIpcHandle(context->cu(), handle));
  return std::unique_ptr<DeviceImport>(new DeviceImport(std::move(context), std::move(mapping)));
}

DeviceImport::~DeviceImport() {
  absl::StatusOr<PrimaryContext::Scope> scope = context_->Enter();  // the unmap's context
  if (!scope.ok()) spdlog::warn("unmapping gpukitd's memory: {}", scope.status().ToString());
  mapping_.reset();
}

absl::Status SynchronizeLegacyStream(int device_index) {
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<PrimaryContext> context,
                          PrimaryContext::Retain(device_index));
  GPUKIT_ASSIGN_OR_RETURN(PrimaryContext::Scope scope, context->Enter());
  return CheckCu(context->cu().cuStreamSynchronize(CU_STREAM_LEGACY), "cuStreamSynchronize");
}

absl::StatusOr<SharedDeviceMemory> ShareDeviceMemory(uint64_t pointer, int64_t bytes) {
  GPUKIT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
  const auto address = static_cast<CUdeviceptr>(pointer);
  int ordinal = -1;
  if (CUresult r =
          cu->cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address);
      r != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "0x", absl::Hex(pointer), " is not CUDA device memory of this process (",
        CuErrorName(r), ")"));
  }
  // The queries below want a context of the memory's device: its primary context, which the
  // CUDA runtime (and so PyTorch) allocates in.
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<PrimaryContext> context,
                          PrimaryContext::Retain(ordinal));
  GPUKIT_ASSIGN_OR_RETURN(PrimaryContext::Scope scope, context->Enter());
  CUdeviceptr base = 0;
  size_t size = 0;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu->cuMemGetAddressRange(&base, &size, address), "cuMemGetAddressRange"));
  SharedDeviceMemory shared;
  shared.allocation_bytes = static_cast<int64_t>(size);
  shared.offset_bytes = static_cast<int64_t>(address - base);
  shared.device_index = ordinal;
  if (bytes < 0 || bytes > shared.allocation_bytes - shared.offset_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes, " bytes at 0x", absl::Hex(pointer), " run past the end of its ",
                     size, "-byte allocation (", shared.offset_bytes, " bytes in)"));
  }
  CUipcMemHandle handle;
  const CUresult legacy = cu->cuIpcGetMemHandle(&handle, base);
  if (legacy == CUDA_SUCCESS) {
    shared.cuda_ipc_handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
    return shared;
  }
  // Not cuMemAlloc memory: a VMM allocation exports its own descriptor if it was created
  // for that.
  CUmemGenericAllocationHandle allocation = 0;
  if (CUresult r = cu->cuMemRetainAllocationHandle(&allocation, reinterpret_cast<void*>(address));
      r != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("the memory at 0x", absl::Hex(pointer), " cannot be shared: ",
                     "cuIpcGetMemHandle: ", CuErrorName(legacy), "; cuMemRetainAllocationHandle: ",
                     CuErrorName(r)));
  }
  int fd = -1;
  const CUresult exported = cu->cuMemExportToShareableHandle(
      &fd, allocation, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  LogIfFailed(cu->cuMemRelease(allocation), "cuMemRelease");
  if (exported != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the VMM allocation at 0x", absl::Hex(pointer),
        " cannot be shared: it was not created with the POSIX file descriptor handle type (",
        CuErrorName(exported), ")"));
  }
  shared.fd.Reset(fd);
  return shared;
}

}  // namespace gpukit::internal
