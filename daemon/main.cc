// gpukitd: parses flags, wires the layers together and serves until SIGTERM or SIGINT.
#include <csignal>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "daemon/config/config.h"
#include "daemon/core/core.h"
#include "daemon/server.h"
#include "grpc/grpc.h"
#include "runtime/base/default_address.h"
#include "runtime/base/units.h"
#include "runtime/device_factory.h"
#include "runtime/jit/jit_compiler.h"
#include "spdlog/spdlog.h"

namespace {

int Fail(const absl::Status& status) {
  spdlog::critical("{}", std::string(status.message()));
  return 1;
}

// The NVRTC JIT compiler, or null (with a warning) when NVRTC is missing: the daemon still
// serves, without custom kernels and, on a GPU, without built-in ops.
std::shared_ptr<gpukit::JitCompiler> CreateJitCompiler(const gpukit::DaemonConfig& config) {
  gpukit::JitCompilerOptions options = config.jit;
  options.cache_dir = gpukit::KernelCacheDir(config.jit.cache_dir);
  absl::StatusOr<std::unique_ptr<gpukit::JitCompiler>> jit = gpukit::JitCompiler::Create(options);
  if (!jit.ok() && !options.cache_dir.empty() &&
      jit.status().code() != absl::StatusCode::kFailedPrecondition) {
    spdlog::warn("kernel cache {}: {}; keeping compiled kernels in memory only",
                 options.cache_dir, std::string(jit.status().message()));
    options.cache_dir.clear();
    jit = gpukit::JitCompiler::Create(options);
  }
  if (!jit.ok()) {
    spdlog::warn("{}", std::string(jit.status().message()));
    return nullptr;
  }
  spdlog::info("NVRTC {} JIT compiler at {}; kernel cache {}", (*jit)->nvrtc_version(),
               (*jit)->nvrtc_library_path(),
               options.cache_dir.empty() ? std::string("in memory only") : options.cache_dir);
  return std::shared_ptr<gpukit::JitCompiler>(*std::move(jit));
}

int Run(int argc, char** argv) {
  absl::StatusOr<gpukit::CommandLine> flags = gpukit::ParseCommandLine(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "gpukitd: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help) {
    std::cout << gpukit::UsageText();
    return 0;
  }
  if (flags->version) {
    std::cout << "gpukitd " << GPUKIT_VERSION_STRING << "\n";
    return 0;
  }
  if (flags->print_default_config) {
    std::cout << gpukit::EmbeddedDefaultConfigJson();
    return 0;
  }
  absl::StatusOr<gpukit::DaemonConfig> config = gpukit::ResolveConfig(*flags);
  if (!config.ok()) {
    std::fprintf(stderr, "gpukitd: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  if (config->listen.empty()) config->listen.push_back(gpukit::DefaultListenAddress());

  // Block the stop signals in every thread; the main thread takes them with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // Hold a gRPC library reference for the life of the process. Without it the last one goes
  // in ~grpc::Server, whose grpc_shutdown joins gRPC's executor threads; after a large
  // transfer one of them can sit in the TCP backup poller's 10 s epoll_wait, so SIGTERM took
  // up to 10 s to take effect. The process is exiting anyway: nothing needs that join.
  grpc_init();
  // Debian's abseil is built with Mutex deadlock detection on, which keeps a global graph
  // of every mutex and lock order: it costs every Lock and every Mutex destruction (each
  // request creates and destroys a few) and serialises them on one global lock. Tests keep
  // it; the daemon turns it off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  spdlog::info("gpukitd {} starting", GPUKIT_VERSION_STRING);
  std::shared_ptr<gpukit::JitCompiler> jit = CreateJitCompiler(*config);
  gpukit::DeviceFactoryOptions device_options;
  device_options.backend = config->backend;
  device_options.cpu_memory_bytes = config->cpu_memory_bytes;
  device_options.jit = jit;
  auto devices = gpukit::CreateDevices(device_options);
  if (!devices.ok()) return Fail(devices.status());
  for (const auto& device : *devices) {
    const gpukit::DeviceProperties& p = device->properties();
    spdlog::info("backend {}: device {} \"{}\" with {}",
                 std::string(gpukit::BackendName(p.backend)), p.index, p.name,
                 gpukit::FormatBytes(p.memory_total_bytes));
  }

  gpukit::SystemClock clock;
  auto core = gpukit::Core::Create(clock, *std::move(devices), config->core, jit);
  if (!core.ok()) return Fail(core.status());
  for (const gpukit::PartitionStatus& p : (*core)->scheduler().ListPartitions()) {
    spdlog::info("partition {}: device {}, memory {}, compute {}{}{}", p.spec.name,
                 p.spec.device_index, gpukit::FormatBytes(p.spec.memory_quota_bytes),
                 p.spec.compute_share,
                 p.spec.bandwidth_cap > 0 ? absl::StrCat(", bandwidth cap ", p.spec.bandwidth_cap)
                                          : std::string(),
                 p.spec.spill ? ", spills to host" : "");
  }
  gpukit::ServerOptions server_options;
  server_options.listen = config->listen;
  server_options.version = GPUKIT_VERSION_STRING;
  server_options.max_threads = config->server_max_threads;
  auto server = gpukit::Server::Start(**core, clock, server_options);
  if (!server.ok()) return Fail(server.status());
  spdlog::info("gpukitd ready");

  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("received {}, shutting down", signal == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown();
  (*core)->CloseAllSessions();
  spdlog::info("gpukitd stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
