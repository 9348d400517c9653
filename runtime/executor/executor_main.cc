// gpukit-executor: runs one device for gpukitd, in a process of its own (docs/architecture.md,
// "The device executor"). gpukitd starts it with the channel's socket as descriptor 3; users
// never do. Usage (gpukitd's):
//   gpukit-executor --backend=cpu|cuda --index=N [--jit-worker=PATH] [--jit-cache-dir=DIR]
// Exit codes: 0 when gpukitd closed the channel, 2 for a bad command line or a device that
// could not be created (said in the Hello first), 3 when the device faulted.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "runtime/base/allocator_settings.h"
#include "runtime/base/mutex_mode.h"
#include "runtime/base/unix_fd.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/executor/executor_server.h"
#include "runtime/jit/jit_compiler.h"
#include "spdlog/spdlog.h"
#include <sys/prctl.h>

// jemalloc's settings (runtime/base/allocator_settings.h).
extern "C" {
const char* malloc_conf = GPUKIT_MALLOC_CONF;
}

namespace {

constexpr int kChannelFd = 3;

struct Flags {
  std::string backend;
  int index = 0;
  std::string jit_worker;
  std::string jit_cache_dir;
  gpukit::MatmulSliceLengths matmul_slices;
};

bool ParseFlags(int argc, char** argv, Flags& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      return absl::StartsWith(arg, name) ? argv[i] + std::string(name).size() : nullptr;
    };
    if (const char* v = value("--backend=")) {
      flags.backend = v;
    } else if (const char* v = value("--index=")) {
      if (!absl::SimpleAtoi(v, &flags.index) || flags.index < 0) return false;
    } else if (const char* v = value("--jit-worker=")) {
      flags.jit_worker = v;
    } else if (const char* v = value("--jit-cache-dir=")) {
      flags.jit_cache_dir = v;
    } else if (const char* v = value("--low-priority-slice=")) {
      if (!absl::ParseDuration(v, &flags.matmul_slices.low_priority)) return false;
    } else if (const char* v = value("--normal-priority-slice=")) {
      if (!absl::ParseDuration(v, &flags.matmul_slices.normal_priority)) return false;
    } else if (const char* v = value("--log-level=")) {
      spdlog::set_level(spdlog::level::from_str(v));
    } else {
      return false;
    }
  }
  return flags.backend == "cpu" || flags.backend == "cuda";
}

absl::StatusOr<std::unique_ptr<gpukit::Device>> CreateDevice(const Flags& flags) {
  if (flags.backend == "cpu") {
    gpukit::CpuDeviceOptions options;
    options.index = flags.index;
    return gpukit::CpuDevice::Create(options);
  }
  gpukit::CudaDeviceOptions options;
  options.index = flags.index;
  options.compile_builtin_kernels_at_start = true;
  options.matmul_slices = flags.matmul_slices;
  // The build's precompiled kernels serve most GPUs: then no JIT compiler (and none of its
  // worker processes) is started at all. Only a GPU they do not cover gets one.
  absl::StatusOr<std::unique_ptr<gpukit::CudaDevice>> precompiled =
      gpukit::CudaDevice::Create(options);
  if (!precompiled.ok() || (*precompiled)->runs_builtin_ops() || flags.jit_worker.empty()) {
    return precompiled;
  }
  precompiled->reset();
  {
    // Built-in kernels the binary carries no code for are compiled here, in the sandbox.
    gpukit::JitCompilerOptions jit;
    jit.worker_path = flags.jit_worker;
    jit.cache_dir = flags.jit_cache_dir;
    absl::StatusOr<std::unique_ptr<gpukit::JitCompiler>> compiler =
        gpukit::JitCompiler::Create(jit);
    if (compiler.ok()) {
      options.jit = std::shared_ptr<gpukit::JitCompiler>(*std::move(compiler));
    } else {
      spdlog::warn("executor: no JIT compiler: {}", std::string(compiler.status().message()));
    }
  }
  return gpukit::CudaDevice::Create(options);
}

}  // namespace

int main(int argc, char** argv) {
  // Dies with gpukitd, whatever kills it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 0;
  gpukit::UseFastMutexes();
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [executor %P] [%l] %v");
  gpukit::ScopedFd channel(kChannelFd);
  Flags flags;
  if (!ParseFlags(argc, argv, flags)) {
    std::fprintf(stderr,
                 "gpukit-executor is started by gpukitd: gpukit-executor --backend=cpu|cuda "
                 "--index=N [--jit-worker=PATH] [--jit-cache-dir=DIR] [--low-priority-slice=DURATION] "
                 "[--normal-priority-slice=DURATION] [--log-level=LEVEL]\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<gpukit::Device>> device = CreateDevice(flags);
  if (!device.ok()) {
    gpukit::ExecutorServer::SendStartFailure(channel.get(), device.status());
    return 2;
  }
  gpukit::ExecutorServer server(**device, std::move(channel));
  absl::Status served = server.Serve();
  if (!served.ok()) {
    spdlog::error("executor: {}", std::string(served.message()));
    std::_Exit(3);
  }
  return 0;
}
