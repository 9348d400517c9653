#include "runtime/device_factory.h"

#include <cuda.h>  // types only; nothing from libcuda is linked

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/units.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/dynamic_library.h"
#include "spdlog/spdlog.h"

namespace gpukit {

absl::StatusOr<BackendChoice> ParseBackendChoice(absl::string_view name) {
  if (name == "auto") return BackendChoice::kAuto;
  if (name == "cpu") return BackendChoice::kCpu;
  if (name == "cuda") return BackendChoice::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend \"", name, "\"; expected auto, cpu or cuda"));
}

DriverProbe ProbeCudaDriver() {
  DriverProbe probe;
  absl::StatusOr<DynamicLibrary> lib = DynamicLibrary::Open("libcuda.so.1", {});
  if (!lib.ok()) {
    probe.error = std::string(lib.status().message());
    return probe;
  }
  probe.driver_loaded = true;
  probe.library_path = lib->path();
  using InitFn = CUresult (*)(unsigned int);
  using VersionFn = CUresult (*)(int*);
  using CountFn = CUresult (*)(int*);
  auto init = lib->Symbol("cuInit");
  auto version = lib->Symbol("cuDriverGetVersion");
  auto count = lib->Symbol("cuDeviceGetCount");
  if (!init.ok() || !version.ok() || !count.ok()) {
    probe.error = "libcuda.so.1 lacks cuInit, cuDriverGetVersion or cuDeviceGetCount";
    return probe;
  }
  reinterpret_cast<VersionFn> (*version)(&probe.driver_version);
  if (CUresult r = reinterpret_cast<InitFn>(*init)(0); r != CUDA_SUCCESS) {
    probe.error = absl::StrCat("cuInit failed with CUresult ", static_cast<int>(r));
    return probe;
  }
  if (CUresult r = reinterpret_cast<CountFn>(*count)(&probe.device_count); r != CUDA_SUCCESS) {
    probe.error = absl::StrCat("cuDeviceGetCount failed with CUresult ", static_cast<int>(r));
  } else if (probe.device_count == 0) {
    probe.error = "the CUDA driver reports no devices";
  }
  return probe;
}

namespace {

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CpuDevices(
    const DeviceFactoryOptions& options) {
  CpuDeviceOptions cpu;
  cpu.memory_bytes = options.cpu_memory_bytes;
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<CpuDevice> device, CpuDevice::Create(cpu));
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::move(device));
  return devices;
}

// The driver's devices that CudaDevice accepts, and why each of the others was refused.
CudaDeviceCandidates CreateCudaDevices(int device_count, const DeviceFactoryOptions& factory) {
  CudaDeviceCandidates result;
  for (int index = 0; index < device_count; ++index) {
    CudaDeviceOptions options;
    options.index = index;
    options.jit = factory.jit;
    options.matmul_slices = factory.matmul_slices;
    options.compile_builtin_kernels_at_start = true;  // the daemon's first op should not wait
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(options);
    if (!device.ok()) {
      result.refusals.push_back(absl::StrCat("device ", index, ": ", device.status().message()));
      continue;
    }
    const CudaDeviceInfo& info = (*device)->cuda_info();
    spdlog::info("CUDA device {}: {}, {}, {} SMs, {} memory", index, (*device)->properties().name,
                 info.arch, info.multiprocessor_count,
                 FormatBytes((*device)->properties().memory_total_bytes));
    result.devices.push_back(*std::move(device));
  }
  return result;
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Device>>> ChooseDevices(
    BackendChoice backend,
    const std::function<CudaDeviceCandidates(int device_count)>& cuda_devices,
    const std::function<absl::StatusOr<std::vector<std::unique_ptr<Device>>>()>& cpu_devices) {
  if (backend == BackendChoice::kCpu) {
    spdlog::info("Using the CPU simulation backend (--backend=cpu)");
    return cpu_devices();
  }
  const DriverProbe probe = ProbeCudaDriver();
  std::string reason;  // why CUDA is not used, when it is not
  if (!probe.driver_loaded) {
    reason = absl::StrCat("CUDA driver not detected (", probe.error, ")");
  } else if (!probe.error.empty()) {
    reason = absl::StrCat("CUDA driver ", probe.driver_version, " at ", probe.library_path,
                          " is unusable: ", probe.error);
  } else {
    CudaDeviceCandidates cuda = cuda_devices(probe.device_count);
    // Asked for by name, every visible GPU must be usable (CUDA_VISIBLE_DEVICES narrows the
    // set); auto takes the ones that are.
    if (backend == BackendChoice::kCuda && !cuda.refusals.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("--backend=cuda: ", absl::StrJoin(cuda.refusals, "; "),
                       " (CUDA_VISIBLE_DEVICES can leave a device out)"));
    }
    if (!cuda.devices.empty()) {
      for (const std::string& refusal : cuda.refusals) {
        spdlog::warn("CUDA {}; not used", refusal);
      }
      spdlog::info("Using the CUDA backend with {} device(s), driver {}", cuda.devices.size(),
                   probe.driver_version);
      return std::move(cuda.devices);
    }
    reason =
        absl::StrCat("CUDA driver ", probe.driver_version, " found with ", probe.device_count,
                     " device(s), none usable by gpukitd: ", absl::StrJoin(cuda.refusals, "; "));
  }
  if (backend == BackendChoice::kCuda) {
    return absl::FailedPreconditionError(absl::StrCat("--backend=cuda: ", reason));
  }
  spdlog::warn("{}", reason);
  spdlog::warn("Falling back to CPU simulation backend");
  return cpu_devices();
}

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateDevices(
    const DeviceFactoryOptions& options) {
  return ChooseDevices(
      options.backend,
      [&](int device_count) { return CreateCudaDevices(device_count, options); },
      [&] { return CpuDevices(options); });
}

}  // namespace gpukit
