// CudaDriver: the CUDA Driver API entry points gpukit uses, resolved once per process from
// the driver's own libcuda.so.1.
//
// gpukit links no CUDA library. libcuda.so.1 is opened with dlopen through the system
// loader path (it always comes from the installed driver, never from a copy beside gpukit),
// cuGetProcAddress_v2 is taken with dlsym, and every other entry point is resolved through
// it for the API version of the headers gpukit was built with (CUDA_VERSION), or the
// driver's own version when that is older. Asking cuGetProcAddress rather than dlsym picks
// the ABI-versioned variant the headers declare (cuMemAlloc -> cuMemAlloc_v2, ...), which is
// what each typed pointer below expects. cuInit(0) has been called when Get() succeeds.
//
//   GPUKIT_ASSIGN_OR_RETURN(const CudaDriver* cu, CudaDriver::Get());
//   CUdeviceptr ptr = 0;
//   GPUKIT_RETURN_IF_ERROR(CheckCu(cu->cuMemAlloc(&ptr, bytes), "cuMemAlloc"));
//
// An entry whose signature changed between the API versions gpukit may resolve for (12.0 to
// the headers' 13.0; cudaTypedefs.h lists every PFN_<name>_v<version>) must not be listed
// under that name: the pointer would have the old type and the new ABI.
// tests/unit/runtime/cuda_driver_abi_test.cc checks this. cuCtxSynchronize is one (13.0
// added a context argument), which is why gpukit synchronises its streams instead.
//
// The fields are named after the calls, so call sites read like the CUDA documentation.
// (cuda.h #defines some names to their versioned symbol, e.g. cuMemAlloc to cuMemAlloc_v2;
// the preprocessor renames the field and every use of it alike, so `cu->cuMemAlloc` works.)
//
// Thread safety: Get() may be called from any thread; the table is immutable once loaded and
// lives until the process exits (the library is never closed: CUDA objects may outlive any
// one user of the table).
#ifndef GPUKIT_RUNTIME_CUDA_CUDA_DRIVER_H_
#define GPUKIT_RUNTIME_CUDA_CUDA_DRIVER_H_

#include <cuda.h>  // types and declarations only; nothing from libcuda is linked

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpukit {

// Every entry point CudaDriver resolves. REQUIRED ones must exist for Get() to succeed;
// OPTIONAL ones are left null when the driver is too old to have them. The cuLibrary* /
// cuKernel* calls load a module for every context at once, and the green context calls
// partition a device's SMs; both are measured by tests/gpu/green_context_test.cc before the
// CUDA device uses them (each comment gives the CUDA version that added the call).
#define GPUKIT_CUDA_DRIVER_FUNCTIONS(REQUIRED, OPTIONAL) \
  REQUIRED(cuInit)                                       \
  REQUIRED(cuDriverGetVersion)                           \
  REQUIRED(cuGetErrorName)                               \
  REQUIRED(cuGetErrorString)                             \
  REQUIRED(cuDeviceGetCount)                             \
  REQUIRED(cuDeviceGet)                                  \
  REQUIRED(cuDeviceGetName)                              \
  REQUIRED(cuDeviceTotalMem)                             \
  REQUIRED(cuDeviceGetAttribute)                         \
  REQUIRED(cuDevicePrimaryCtxRetain)                     \
  REQUIRED(cuDevicePrimaryCtxRelease)                    \
  REQUIRED(cuCtxGetCurrent)                              \
  REQUIRED(cuCtxSetCurrent)                              \
  REQUIRED(cuCtxGetStreamPriorityRange)                  \
  REQUIRED(cuMemAlloc)                                   \
  REQUIRED(cuMemFree)                                    \
  REQUIRED(cuMemHostAlloc)                               \
  REQUIRED(cuMemFreeHost)                                \
  REQUIRED(cuMemHostRegister)                            \
  REQUIRED(cuMemHostUnregister)                          \
  REQUIRED(cuMemGetAllocationGranularity)                \
  REQUIRED(cuMemCreate)                                  \
  REQUIRED(cuMemRelease)                                 \
  REQUIRED(cuMemAddressReserve)                          \
  REQUIRED(cuMemAddressFree)                             \
  REQUIRED(cuMemMap)                                     \
  REQUIRED(cuMemUnmap)                                   \
  REQUIRED(cuMemSetAccess)                               \
  REQUIRED(cuMemExportToShareableHandle)                 \
  REQUIRED(cuMemImportFromShareableHandle)               \
  REQUIRED(cuMemRetainAllocationHandle)                  \
  REQUIRED(cuMemGetAddressRange)                         \
  REQUIRED(cuPointerGetAttribute)                        \
  REQUIRED(cuIpcGetMemHandle)                            \
  REQUIRED(cuIpcOpenMemHandle)                           \
  REQUIRED(cuIpcCloseMemHandle)                          \
  REQUIRED(cuMemcpyDtoD)                                 \
  REQUIRED(cuMemcpyHtoD)                                 \
  REQUIRED(cuMemcpyDtoH)                                 \
  REQUIRED(cuMemcpyHtoDAsync)                            \
  REQUIRED(cuMemcpyDtoHAsync)                            \
  REQUIRED(cuMemcpyDtoDAsync)                            \
  REQUIRED(cuMemsetD8Async)                              \
  REQUIRED(cuStreamCreate)                               \
  REQUIRED(cuStreamCreateWithPriority)                   \
  REQUIRED(cuStreamGetPriority)                          \
  REQUIRED(cuStreamSynchronize)                          \
  REQUIRED(cuStreamQuery)                                \
  REQUIRED(cuStreamDestroy)                              \
  REQUIRED(cuEventCreate)                                \
  REQUIRED(cuEventRecord)                                \
  REQUIRED(cuEventQuery)                                 \
  REQUIRED(cuEventSynchronize)                           \
  REQUIRED(cuEventElapsedTime)                           \
  REQUIRED(cuEventDestroy)                               \
  REQUIRED(cuModuleLoadDataEx)                           \
  REQUIRED(cuModuleUnload)                               \
  REQUIRED(cuModuleGetFunction)                          \
  REQUIRED(cuFuncGetAttribute)                           \
  REQUIRED(cuFuncSetAttribute)                           \
  REQUIRED(cuLaunchKernel)                               \
  OPTIONAL(cuFuncGetParamInfo)          /* CUDA 12.4 */  \
  OPTIONAL(cuLibraryLoadData)           /* 12.0 */       \
  OPTIONAL(cuLibraryUnload)             /* 12.0 */       \
  OPTIONAL(cuLibraryGetKernel)          /* 12.0 */       \
  OPTIONAL(cuKernelGetFunction)         /* 12.0 */       \
  OPTIONAL(cuDeviceGetDevResource)      /* 12.4 */       \
  OPTIONAL(cuDevSmResourceSplitByCount) /* 12.4 */       \
  OPTIONAL(cuDevResourceGenerateDesc)   /* 12.4 */       \
  OPTIONAL(cuGreenCtxCreate)            /* 12.4 */       \
  OPTIONAL(cuGreenCtxDestroy)           /* 12.4 */       \
  OPTIONAL(cuCtxFromGreenCtx)           /* 12.4 */       \
  OPTIONAL(cuGreenCtxGetDevResource)    /* 12.4 */       \
  OPTIONAL(cuStreamGetGreenCtx)         /* 12.4 */       \
  OPTIONAL(cuGreenCtxStreamCreate)      /* 12.5 */

struct CudaDriver {
  // The process-wide table, loaded on first use. FAILED_PRECONDITION when libcuda.so.1
  // cannot be loaded, is older than CUDA 12.0, lacks a required entry point, or cuInit fails
  // (no device, driver/kernel-module mismatch, ...); the failure is remembered.
  static absl::StatusOr<const CudaDriver*> Get();

  std::string library_path;  // where libcuda.so.1 was found
  int driver_version = 0;    // cuDriverGetVersion, e.g. 13000 for CUDA 13.0
  int api_version = 0;       // the version entry points were resolved for

#define GPUKIT_CUDA_DRIVER_FIELD_(name) decltype(&::name) name = nullptr;
  GPUKIT_CUDA_DRIVER_FUNCTIONS(GPUKIT_CUDA_DRIVER_FIELD_, GPUKIT_CUDA_DRIVER_FIELD_)
#undef GPUKIT_CUDA_DRIVER_FIELD_
};

// OK for CUDA_SUCCESS; otherwise a Status naming the call and the driver's error name and
// text: "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)". The code says what the
// caller can do about it: RESOURCE_EXHAUSTED for out-of-memory and launch resources,
// INVALID_ARGUMENT for bad values and unloadable images, NOT_FOUND for missing symbols,
// FAILED_PRECONDITION for a missing or unusable device or driver, INTERNAL for everything
// else, including the sticky errors of a faulted context (illegal address, launch failure).
absl::Status CheckCu(CUresult result, absl::string_view call);

// The error's name ("CUDA_ERROR_OUT_OF_MEMORY"), or its number when the driver is not
// loaded or does not know it.
std::string CuErrorName(CUresult result);

// Logs a warning naming `call` unless `result` is CUDA_SUCCESS: for releases on cleanup paths,
// which have no caller to report to.
void LogIfFailed(CUresult result, const char* call);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_CUDA_DRIVER_H_
