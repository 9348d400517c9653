// The daemon's devices, each run by a device executor (RemoteDevice): the executor-process
// counterpart of CreateDevices (runtime/device_factory.h), with the same backend choice, the
// same refusals and the same fall-back to the CPU backend, logged alike.
//
//   ExecutorDevicesOptions options;
//   options.executor_path = "/usr/lib/gpukit/gpukit-executor";
//   GPUKIT_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Device>> devices,
//                           CreateExecutorDevices(options));
//
// Thread safety: call from one thread at start-up.
#ifndef GPUKIT_RUNTIME_EXECUTOR_EXECUTOR_DEVICES_H_
#define GPUKIT_RUNTIME_EXECUTOR_EXECUTOR_DEVICES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/device.h"
#include "runtime/device_factory.h"

namespace gpukit {

struct ExecutorDevicesOptions {
  BackendChoice backend = BackendChoice::kAuto;
  int64_t cpu_memory_bytes = int64_t{4} << 30;
  std::string executor_path;  // gpukit-executor
  absl::Duration launch_deadline = absl::Seconds(30);
  bool standby = true;
  // Passed to CUDA executors, which compile the built-in kernels the binary has no code for.
  std::string jit_worker_path;
  std::string jit_cache_dir;
  std::string log_level = "info";
  // CUDA executors' matmul slices (CudaDeviceOptions).
  MatmulSliceLengths matmul_slices;
};

// FAILED_PRECONDITION when the executor binary is missing or (for kCuda) no GPU can be used.
absl::StatusOr<std::vector<std::unique_ptr<Device>>> CreateExecutorDevices(
    const ExecutorDevicesOptions& options);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_EXECUTOR_EXECUTOR_DEVICES_H_
