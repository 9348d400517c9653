// Backend selection: probes for the CUDA driver and builds the daemon's devices.
//
//   DeviceFactoryOptions options;
//   options.backend = BackendChoice::kAuto;
//   GPUKIT_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Device>> devices,
//                           CreateDevices(options));
//
// Thread safety: call from one thread at start-up.
#ifndef GPUKIT_RUNTIME_DEVICE_FACTORY_H_
#define GPUKIT_RUNTIME_DEVICE_FACTORY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/device.h"
#include "runtime/jit/jit_compiler.h"

namespace gpukit {

enum class BackendChoice { kAuto, kCpu, kCuda };
absl::StatusOr<BackendChoice> ParseBackendChoice(absl::string_view name);

struct DriverProbe {
  bool driver_loaded = false;
  std::string library_path;  // where libcuda was found
  int driver_version = 0;    // e.g. 13000 for CUDA 13.0
  int device_count = 0;
  std::string error;  // why the driver is unusable, when it is
};

// Opens libcuda.so.1 through the system loader (the driver's own library, never a copy),
// calls cuInit and counts devices. Never fails: what went wrong is in `error`.
DriverProbe ProbeCudaDriver();

struct DeviceFactoryOptions {
  BackendChoice backend = BackendChoice::kAuto;
  // Memory the CPU simulation device offers (default 4 GiB: enough for tests and demos,
  // small enough not to hurt a laptop).
  int64_t cpu_memory_bytes = int64_t{4} << 30;
  // Compiles the built-in op kernels of CUDA devices (see CudaDeviceOptions::jit).
  std::shared_ptr<JitCompiler> jit;
  // CUDA devices' matmul slices (CudaDeviceOptions).
  MatmulSliceLengths matmul_slices;
};

// The GPUs that could be opened, and why each of the others was refused ("device 1: ...").
struct CudaDeviceCandidates {
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::string> refusals;
};

// The backend choice's rules, for whichever way devices are made (in-process here, in device
// executors in runtime/executor/executor_devices.h): kCpu takes `cpu()`; otherwise the driver
// is probed and `cuda(device_count)` tries each GPU; kCuda fails with the reason unless every
// visible GPU opened, kAuto takes the GPUs that did, else falls back to `cpu()`, logging why.
absl::StatusOr<std::vector<std::unique_ptr<Device>>> ChooseDevices(
    BackendChoice backend,
    const std::function<CudaDeviceCandidates(int device_count)>& cuda,
    const std::function<absl::StatusOr<std::vector<std::unique_ptr<Device>>>()>& cpu);

// kCpu: one CPU simulation device. kCuda: one CudaDevice per GPU the driver shows, or
// FAILED_PRECONDITION with the reason (no driver, no device, or a device CudaDevice refuses,
// e.g. older than SM 80; each refusal names its device index). kAuto: the CUDA devices that
// CudaDevice accepts when there is at least one (refused ones are logged as warnings), else
// the CPU device, logging why ("CUDA driver not detected ...") and "Falling back to CPU
// simulation backend". Each CUDA device is logged at info with its index, name, sm_XX and
// memory.
absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateDevices(
    const DeviceFactoryOptions& options);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_DEVICE_FACTORY_H_
