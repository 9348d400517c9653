#include "runtime/cuda/cuda_driver.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/dynamic_library.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace {

// Set once the table has loaded; CheckCu reads the error names through it.
std::atomic<const CudaDriver*> loaded_driver{nullptr};
// libcuda.so.1, open for the life of the process once Load has opened it.
DynamicLibrary* loaded_library = nullptr;

// The oldest driver gpukit runs on: cuGetProcAddress_v2 (with its status argument) and the
// entry points above all exist from CUDA 12.0 on.
constexpr int kMinimumDriverVersion = 12000;

std::string VersionText(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

absl::StatusOr<std::unique_ptr<CudaDriver>> Load() {
  absl::StatusOr<DynamicLibrary> opened = DynamicLibrary::Open("libcuda.so.1", {});
  if (!opened.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA driver not detected: ", opened.status().message()));
  }
  // Never closed: streams, modules and memory handed out through the table may be released
  // during static destruction, after any owner of the library would be gone.
  loaded_library = new DynamicLibrary(*std::move(opened));
  const DynamicLibrary* library = loaded_library;
  auto driver = std::make_unique<CudaDriver>();
  driver->library_path = library->path();

  // cuDriverGetVersion and cuGetProcAddress_v2 are exported under these exact names by every
  // CUDA 12+ driver; everything else is asked of cuGetProcAddress.
  absl::StatusOr<void*> get_version = library->Symbol("cuDriverGetVersion");
  if (!get_version.ok()) return absl::FailedPreconditionError(get_version.status().message());
  if (reinterpret_cast<decltype(&::cuDriverGetVersion)>(*get_version)(&driver->driver_version) !=
      CUDA_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuDriverGetVersion failed in ", driver->library_path));
  }
  if (driver->driver_version < kMinimumDriverVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gpukitd needs a CUDA ", VersionText(kMinimumDriverVersion), " or newer driver; ",
        driver->library_path, " is CUDA ", VersionText(driver->driver_version)));
  }
  absl::StatusOr<void*> get_proc = library->Symbol("cuGetProcAddress_v2");
  if (!get_proc.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        driver->library_path, " has no cuGetProcAddress_v2: ", get_proc.status().message()));
  }
  auto get_proc_address = reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(*get_proc);
  // Asking for a version newer than the driver fails, so ask for the older of the two; the
  // entry points used here kept their signatures from 12.0 to 13.0.
  driver->api_version = std::min(CUDA_VERSION, driver->driver_version);

  auto resolve = [&](const char* symbol, void** fn, bool required) -> absl::Status {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const CUresult result = get_proc_address(symbol, fn, driver->api_version,
                                             CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    if (result == CUDA_SUCCESS && found == CU_GET_PROC_ADDRESS_SUCCESS && *fn != nullptr) {
      return absl::OkStatus();
    }
    *fn = nullptr;
    if (!required) {
      spdlog::debug("CUDA driver {} lacks optional {}", driver->driver_version, symbol);
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA driver ", VersionText(driver->driver_version), " at ",
                     driver->library_path, " lacks ", symbol, " (cuGetProcAddress result ",
                     static_cast<int>(result), ", status ", static_cast<int>(found), ")"));
  };
#define GPUKIT_RESOLVE_REQUIRED_(name) \
  GPUKIT_RETURN_IF_ERROR(resolve(#name, reinterpret_cast<void**>(&driver->name), true));
#define GPUKIT_RESOLVE_OPTIONAL_(name) \
  GPUKIT_RETURN_IF_ERROR(resolve(#name, reinterpret_cast<void**>(&driver->name), false));
  GPUKIT_CUDA_DRIVER_FUNCTIONS(GPUKIT_RESOLVE_REQUIRED_, GPUKIT_RESOLVE_OPTIONAL_)
#undef GPUKIT_RESOLVE_REQUIRED_
#undef GPUKIT_RESOLVE_OPTIONAL_

  if (CUresult result = driver->cuInit(0); result != CUDA_SUCCESS) {
    const char* name = nullptr;
    const char* text = nullptr;
    driver->cuGetErrorName(result, &name);
    driver->cuGetErrorString(result, &text);
    return absl::FailedPreconditionError(absl::StrCat(
        "cuInit: ", name != nullptr ? name : "CUresult", " ",
        text != nullptr ? absl::StrCat("(", text, ")") : absl::StrCat(static_cast<int>(result)),
        " (CUDA driver ", VersionText(driver->driver_version), " at ", driver->library_path, ")"));
  }
  spdlog::debug("CUDA driver {} loaded from {}; entry points for API {}",
                VersionText(driver->driver_version), driver->library_path,
                VersionText(driver->api_version));
  return driver;
}

absl::StatusCode CodeFor(CUresult result) {
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return absl::StatusCode::kResourceExhausted;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND:
      return absl::StatusCode::kInvalidArgument;
    case CUDA_ERROR_NOT_FOUND:
      return absl::StatusCode::kNotFound;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_JIT_COMPILATION_DISABLED:
    case CUDA_ERROR_NOT_SUPPORTED:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::StatusOr<const CudaDriver*> CudaDriver::Get() {
  // Loaded once: a static initialiser runs exactly once even when threads race to it.
  static const absl::StatusOr<const CudaDriver*>* const table = [] {
    absl::StatusOr<std::unique_ptr<CudaDriver>> driver = Load();
    if (!driver.ok()) {
      spdlog::debug("CUDA driver unusable: {}", driver.status().ToString());
      return new absl::StatusOr<const CudaDriver*>(driver.status());
    }
    const CudaDriver* raw = driver->release();  // lives for the process, like the library
    loaded_driver.store(raw, std::memory_order_release);
    return new absl::StatusOr<const CudaDriver*>(raw);
  }();
  return *table;
}

std::string CuErrorName(CUresult result) {
  const CudaDriver* driver = loaded_driver.load(std::memory_order_acquire);
  const char* name = nullptr;
  if (driver != nullptr && driver->cuGetErrorName(result, &name) == CUDA_SUCCESS &&
      name != nullptr) {
    return name;
  }
  return absl::StrCat("CUresult ", static_cast<int>(result));
}

absl::Status CheckCu(CUresult result, absl::string_view call) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const CudaDriver* driver = loaded_driver.load(std::memory_order_acquire);
  const char* text = nullptr;
  if (driver == nullptr || driver->cuGetErrorString(result, &text) != CUDA_SUCCESS) {
    text = nullptr;
  }
  return absl::Status(CodeFor(result),
                      absl::StrCat(call, ": ", CuErrorName(result),
                                   text != nullptr ? absl::StrCat(" (", text, ")") : ""));
}

void LogIfFailed(CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) spdlog::warn("{} failed: {}", call, CuErrorName(result));
}

}  // namespace gpukit
