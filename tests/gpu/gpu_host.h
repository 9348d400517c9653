// Whether this host has GPUs that gpukitd --backend=cuda serves on, for GPU tests that start
// the daemon and must skip, saying why, elsewhere.
//
//   if (std::optional<std::string> why = WhyNoCudaBackend()) GTEST_SKIP() << *why;
//
// Thread safety: may be called from any thread; it creates and releases CUDA devices, so call
// it before starting a daemon.
#ifndef GPUKIT_TESTS_GPU_GPU_HOST_H_
#define GPUKIT_TESTS_GPU_GPU_HOST_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device_factory.h"

namespace gpukit::testing {

// Why gpukitd --backend=cuda would not serve here, or nothing when it would: it serves on
// every GPU the driver shows and refuses to start if it refuses one of them (older than SM 80).
inline std::optional<std::string> WhyNoCudaBackend() {
  const DriverProbe probe = ProbeCudaDriver();
  if (!probe.driver_loaded) return "no CUDA driver on this machine: " + probe.error;
  if (probe.device_count == 0) return std::string("the CUDA driver shows no GPU");
  for (int index = 0; index < probe.device_count; ++index) {
    CudaDeviceOptions options;
    options.index = index;
    options.use_cublaslt = false;  // not needed to accept the device; saves loading it
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(options);
    if (!device.ok()) {
      return absl::StrCat("GPU ", index, " is not one gpukitd --backend=cuda accepts: ",
                          device.status().ToString());
    }
  }
  return std::nullopt;
}

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_GPU_GPU_HOST_H_
