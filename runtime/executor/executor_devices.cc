#include "runtime/executor/executor_devices.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/units.h"
#include "runtime/cuda/vmm_segment_source.h"
#include "runtime/executor/remote_device.h"
#include "spdlog/spdlog.h"

namespace gpukit {
namespace {

RemoteDeviceOptions BaseOptions(const ExecutorDevicesOptions& options, absl::string_view backend,
                                int index) {
  RemoteDeviceOptions remote;
  remote.executor_path = options.executor_path;
  remote.executor_args = {absl::StrCat("--backend=", backend), absl::StrCat("--index=", index),
                          absl::StrCat("--log-level=", options.log_level)};
  if (backend == "cuda" && !options.jit_worker_path.empty()) {
    remote.executor_args.push_back(absl::StrCat("--jit-worker=", options.jit_worker_path));
    if (!options.jit_cache_dir.empty()) {
      remote.executor_args.push_back(absl::StrCat("--jit-cache-dir=", options.jit_cache_dir));
    }
  }
  remote.launch_deadline = options.launch_deadline;
  remote.standby = options.standby;
  return remote;
}

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CpuDevices(
    const ExecutorDevicesOptions& options) {
  RemoteDeviceOptions remote = BaseOptions(options, "cpu", 0);
  // Segments as large as a GPU's (2 MiB): small arrays share slabs, large ones get their own.
  remote.memory = std::make_unique<MemfdSegmentSource>(options.cpu_memory_bytes, int64_t{2} << 20);
  // The simulated device's memory is the host's: cache little of it.
  remote.memory_pool.max_cached_bytes = int64_t{64} << 20;
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<RemoteDevice> device,
                          RemoteDevice::Create(std::move(remote)));
  spdlog::info("CPU simulation device in executor pid {}", device->executor_state().pid);
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::move(device));
  return devices;
}

struct CudaDevices {
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::string> refusals;
};

CudaDevices CreateCudaDevices(const ExecutorDevicesOptions& options, int device_count) {
  CudaDevices result;
  for (int index = 0; index < device_count; ++index) {
    absl::StatusOr<std::unique_ptr<CudaVmmSegmentSource>> memory =
        CudaVmmSegmentSource::Create(index);
    if (!memory.ok()) {
      result.refusals.push_back(absl::StrCat("device ", index, ": ", memory.status().message()));
      continue;
    }
    RemoteDeviceOptions remote = BaseOptions(options, "cuda", index);
    const std::string source = (*memory)->Describe();
    remote.memory = *std::move(memory);
    absl::StatusOr<std::unique_ptr<RemoteDevice>> device = RemoteDevice::Create(std::move(remote));
    if (!device.ok()) {
      result.refusals.push_back(absl::StrCat("device ", index, ": ", device.status().message()));
      continue;
    }
    const DeviceProperties& p = (*device)->properties();
    spdlog::info("CUDA device {}: {}, {}, {} memory ({}), in executor pid {}", index, p.name,
                 p.kernel_arch, FormatBytes(p.memory_total_bytes), source,
                 (*device)->executor_state().pid);
    result.devices.push_back(*std::move(device));
  }
  return result;
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateExecutorDevices(
    const ExecutorDevicesOptions& options) {
  if (options.executor_path.empty() || access(options.executor_path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the device executor gpukit-executor is not ",
        options.executor_path.empty() ? std::string("beside gpukitd or in ../libexec/gpukit")
                                      : absl::StrCat("executable at ", options.executor_path),
        " (set executor.path, or executor.mode \"inprocess\" to debug without it)"));
  }
  if (options.backend == BackendChoice::kCpu) {
    spdlog::info("Using the CPU simulation backend (--backend=cpu)");
    return CpuDevices(options);
  }
  const DriverProbe probe = ProbeCudaDriver();
  std::string reason;
  if (!probe.driver_loaded) {
    reason = absl::StrCat("CUDA driver not detected (", probe.error, ")");
  } else if (!probe.error.empty()) {
    reason = absl::StrCat("CUDA driver ", probe.driver_version, " at ", probe.library_path,
                          " is unusable: ", probe.error);
  } else {
    CudaDevices cuda = CreateCudaDevices(options, probe.device_count);
    if (options.backend == BackendChoice::kCuda && !cuda.refusals.empty()) {
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
  if (options.backend == BackendChoice::kCuda) {
    return absl::FailedPreconditionError(absl::StrCat("--backend=cuda: ", reason));
  }
  spdlog::warn("{}", reason);
  spdlog::warn("Falling back to CPU simulation backend");
  return CpuDevices(options);
}

}  // namespace gpukit
