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
  if (backend == "cuda") {
    remote.executor_args.push_back(absl::StrCat(
        "--low-priority-slice=", absl::FormatDuration(options.matmul_slices.low_priority)));
    remote.executor_args.push_back(absl::StrCat(
        "--normal-priority-slice=", absl::FormatDuration(options.matmul_slices.normal_priority)));
  }
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
  // The simulated device's memory is the host's: cache little of it, and little of the host
  // segments that stage copies (gRPC messages' bytes), which count in gpukitd's RSS.
  remote.memory_pool.max_cached_bytes = int64_t{64} << 20;
  remote.host_cache_bytes = int64_t{32} << 20;
  GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<RemoteDevice> device,
                          RemoteDevice::Create(std::move(remote)));
  spdlog::info("CPU simulation device in executor pid {}", device->executor_state().pid);
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::move(device));
  return devices;
}

CudaDeviceCandidates CreateCudaDevices(const ExecutorDevicesOptions& options, int device_count) {
  CudaDeviceCandidates result;
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
  return ChooseDevices(
      options.backend,
      [&](int device_count) { return CreateCudaDevices(options, device_count); },
      [&] { return CpuDevices(options); });
}

}  // namespace gpukit
