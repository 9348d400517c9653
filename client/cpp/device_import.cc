#include "client/cpp/device_import.h"

#include <cuda.h>  // types only; calls go through CudaDriver

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/cuda/cuda_driver.h"
#include "spdlog/spdlog.h"

namespace gpukit::internal {
namespace {

void LogIfFailed(CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) spdlog::warn("{} failed: {}", call, CuErrorName(result));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrimaryContext>> PrimaryContext::Bind(int device_index) {
  GPUKIT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
  CUdevice device = 0;
  GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuDeviceGet(&device, device_index), "cuDeviceGet"));
  CUcontext context = nullptr;
  GPUKIT_RETURN_IF_ERROR(
      CheckCu(cu->cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain"));
  auto bound = std::unique_ptr<PrimaryContext>(new PrimaryContext(*cu, device, context));
  GPUKIT_RETURN_IF_ERROR(bound->MakeCurrent());
  return bound;
}

absl::Status PrimaryContext::MakeCurrent() const {
  return CheckCu(cu_.cuCtxSetCurrent(static_cast<CUcontext>(context_)), "cuCtxSetCurrent");
}

PrimaryContext::~PrimaryContext() {
  LogIfFailed(cu_.cuDevicePrimaryCtxRelease(device_), "cuDevicePrimaryCtxRelease");
}

absl::StatusOr<std::unique_ptr<DeviceImport>> DeviceImport::Open(int device_index,
                                                                 const Opener& open) {
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<PrimaryContext> context,
                          PrimaryContext::Bind(device_index));
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<SharedMapping> mapping,
                          open(context->cu(), context->device()));
  return std::unique_ptr<DeviceImport>(new DeviceImport(std::move(context), std::move(mapping)));
}

absl::StatusOr<std::unique_ptr<DeviceImport>> DeviceImport::Import(int device_index, ScopedFd fd,
                                                                   int64_t allocation_bytes,
                                                                   bool read_only) {
  return Open(device_index, [&](const CudaDriver& cu, int device) {
    return SharedMapping::OpenDescriptor(cu, device, std::move(fd), allocation_bytes, read_only);
  });
}

absl::StatusOr<std::unique_ptr<DeviceImport>> DeviceImport::OpenIpcHandle(
    int device_index, const std::string& handle) {
  return Open(device_index, [&](const CudaDriver& cu, int /*device*/) {
    return SharedMapping::OpenIpcHandle(cu, handle);
  });
}

DeviceImport::~DeviceImport() {
  context_->MakeCurrent().IgnoreError();  // the unmap's context, whatever this thread had
  mapping_.reset();
}

absl::Status SynchronizeLegacyStream(int device_index) {
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<PrimaryContext> context,
                          PrimaryContext::Bind(device_index));
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
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<PrimaryContext> context, PrimaryContext::Bind(ordinal));
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
