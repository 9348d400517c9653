// gpukitd: parses flags, wires the layers together and serves until SIGTERM or SIGINT; SIGHUP
// reloads the --config file (daemon/config/reload.h). Under systemd (Type=notify) it says when
// it is ready, reloading and stopping, and feeds the watchdog while healthy
// (daemon/systemd/).
#include <malloc.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "daemon/config/config.h"
#include "daemon/config/reload.h"
#include "daemon/core/core.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/metrics/rpc_metrics.h"
#include "daemon/server.h"
#include "daemon/session/access_policy.h"
#include "daemon/systemd/service_notifier.h"
#include "daemon/systemd/watchdog.h"
#include "grpc/grpc.h"
#include "runtime/base/allocator_settings.h"
#include "runtime/base/default_address.h"
#include "runtime/base/mutex_mode.h"
#include "runtime/base/read_file.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/units.h"
#include "runtime/device_factory.h"
#include "runtime/executor/executor_devices.h"
#include "runtime/jit/jit_compiler.h"
#include "spdlog/spdlog.h"

// jemalloc's settings (runtime/base/allocator_settings.h).
extern "C" {
const char* malloc_conf = GPUKIT_MALLOC_CONF;
}

namespace {

int Fail(const absl::Status& status) {
  spdlog::critical("{}", std::string(status.message()));
  return 1;
}

// The access policy `config` asks for: from its access block, else the default rules; gpukitd's
// effective uid is an admin either way. Start-up and SIGHUP's reload both build it here.
absl::StatusOr<std::shared_ptr<const gpukit::AccessPolicy>> AccessPolicyFor(
    const gpukit::DaemonConfig& config) {
  if (config.access.has_value()) return gpukit::AccessPolicy::Create(geteuid(), *config.access);
  return std::make_shared<const gpukit::AccessPolicy>(static_cast<uint32_t>(geteuid()));
}

// The NVRTC JIT compiler, or null (with a warning) when NVRTC is missing: the daemon still
// serves, without custom kernels and, on a GPU, without built-in ops.
// A helper binary of gpukitd (gpukit-compile-worker, gpukit-executor): `configured`, else
// beside this executable, else in ../libexec/gpukit/ from it (a package's layout). "" when
// there is none.
std::string FindHelper(const std::string& configured, const std::string& name) {
  if (!configured.empty()) return configured;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "";
  for (const std::filesystem::path& candidate :
       {self.parent_path() / name,
        self.parent_path().parent_path() / "libexec" / "gpukit" / name}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

std::shared_ptr<gpukit::JitCompiler> CreateJitCompiler(const gpukit::DaemonConfig& config) {
  gpukit::JitCompilerOptions options = config.jit;
  options.cache_dir = gpukit::KernelCacheDir(config.jit.cache_dir);
  // Kernel sources are compiled in the sandbox only: without the worker, no kernels.
  options.worker_path = FindHelper(config.jit.worker_path, "gpukit-compile-worker");
  if (options.worker_path.empty()) {
    spdlog::warn(
        "NVRTC JIT compiler not available: the compile worker gpukit-compile-worker is not "
        "beside gpukitd or in ../libexec/gpukit (set jit.workerPath); no kernels are compiled");
    return nullptr;
  }
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
  spdlog::info("NVRTC {} JIT compiler at {}, sandboxed in {} (up to {} at once); kernel cache {}",
               (*jit)->nvrtc_version(), (*jit)->nvrtc_library_path(), options.worker_path,
               options.compile_workers,
               options.cache_dir.empty() ? std::string("in memory only") : options.cache_dir);
  return std::shared_ptr<gpukit::JitCompiler>(*std::move(jit));
}

// Large blocks go straight to mmap and back to the system at free. By default glibc raises its
// mmap threshold to the size of each mmap'd block freed (up to 32 MiB); after the first upload
// in 4 MiB gRPC messages, their buffers (the parsed chunk's bytes, gRPC's receive buffers)
// came from the heaps of whichever threads served the streams, one arena per thread up to 8
// per core, and stayed there. A fixed threshold turns the dynamic one off. Measured on the CPU
// build box (2 cores) with tests/integration/memory_return_test.cc, idle RSS after each round
// of 8 sessions x 4 uploads of 16 MiB, in MiB:
//   glibc's defaults                                 164 -> 580 -> 776 -> 990 -> 984 -> 1211
//   CPU device memory as its own mappings (runtime/cpu) 126..136 -> 180..198 (+45 to +64)
//   ... and malloc_trim(0) after each CloseSession        86..89 -> 104..136 (+15 to +47)
//   ... and MALLOC_ARENA_MAX=2                            68..79 -> 113..157
//   ... and this 1 MiB threshold                          62..81 -> 81..95 (+5 to +19)
//   jemalloc 5.3 (Debian, LD_PRELOAD), no other change    187 -> 189, but 100-130 MiB more
//                                                         after a 256 MiB upload until its
//                                                         10 s decay
// Its cost is a fresh mapping and its page faults per large message: a 256 MiB upload in gRPC
// messages, 6 interleaved runs each, median 230 MiB/s with it and 252 MiB/s without (runs of
// either spread over 136-397 MiB/s on the shared machine), on the path that the staging region
// (host shared memory) takes over for large transfers of the default client anyway.
void ReturnLargeBlocksToTheSystem() {
  constexpr int kMmapThresholdBytes = 1 << 20;
  if (mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) != 1) {
    spdlog::warn("mallopt(M_MMAP_THRESHOLD, {}) failed; freed large blocks may stay resident",
                 kMmapThresholdBytes);
  }
}

int Run(int argc, char** argv) {
  gpukit::UseFastMutexes();
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

  // Block the signals gpukitd acts on in every thread, before any thread starts: the main
  // thread takes them with sigwait, so no signal handler runs at all (nothing in gpukitd
  // has to be async-signal-safe) and a reload runs as ordinary code on the main thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // Without $NOTIFY_SOCKET (not run by systemd as Type=notify) each Notify does nothing.
  std::unique_ptr<gpukit::SystemdNotifier> notifier = gpukit::SystemdNotifier::Create();
  notifier->Notify("STATUS=starting");

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

  ReturnLargeBlocksToTheSystem();
  spdlog::info("gpukitd {} starting", GPUKIT_VERSION_STRING);
  std::shared_ptr<gpukit::JitCompiler> jit = CreateJitCompiler(*config);
  absl::StatusOr<std::vector<std::unique_ptr<gpukit::Device>>> devices;
  if (config->executor.in_process) {
    spdlog::warn(
        "executor.mode \"inprocess\": devices run inside gpukitd; a kernel that faults stops "
        "the device for every tenant until gpukitd restarts (for debugging only)");
    gpukit::DeviceFactoryOptions device_options;
    device_options.backend = config->backend;
    device_options.cpu_memory_bytes = config->cpu_memory_bytes;
    device_options.jit = jit;
    device_options.matmul_slices = {config->qos.best_effort_slice, config->qos.burstable_slice};
    devices = gpukit::CreateDevices(device_options);
  } else {
    gpukit::ExecutorDevicesOptions executor_options;
    executor_options.backend = config->backend;
    executor_options.cpu_memory_bytes = config->cpu_memory_bytes;
    executor_options.executor_path = FindHelper(config->executor.path, "gpukit-executor");
    executor_options.launch_deadline = config->executor.launch_deadline;
    executor_options.standby = config->executor.standby;
    executor_options.jit_worker_path = FindHelper(config->jit.worker_path, "gpukit-compile-worker");
    executor_options.jit_cache_dir = gpukit::KernelCacheDir(config->jit.cache_dir);
    executor_options.log_level = config->log_level;
    executor_options.matmul_slices = {config->qos.best_effort_slice, config->qos.burstable_slice};
    devices = gpukit::CreateExecutorDevices(executor_options);
  }
  if (!devices.ok()) return Fail(devices.status());
#if GPUKIT_FAULT_INJECTION
  spdlog::warn(
      "built with GPUKIT_FAULT_INJECTION: the _test_fault, _test_hang and _test_abort ops can "
      "crash a device executor; never deploy this build");
#endif
  for (const auto& device : *devices) {
    const gpukit::DeviceProperties& p = device->properties();
    spdlog::info("backend {}: device {} \"{}\" with {}",
                 std::string(gpukit::BackendName(p.backend)), p.index, p.name,
                 gpukit::FormatBytes(p.memory_total_bytes));
  }

  notifier->Notify(absl::StrCat(
      "STATUS=backend ",
      devices->empty() ? std::string("none")
                       : std::string(gpukit::BackendName((*devices)[0]->properties().backend)),
      ": ", devices->size(), " device(s) up; starting the server"));
  gpukit::SystemClock clock;
  auto core = gpukit::Core::Create(clock, *std::move(devices), config->core, jit);
  if (!core.ok()) return Fail(core.status());
  for (const gpukit::PartitionStatus& p : (*core)->ListPartitions()) {
    spdlog::info(
        "partition {}: device {}, memory {}, compute {}{}{}{}", p.spec.name, p.spec.device_index,
        gpukit::FormatBytes(p.spec.memory_quota_bytes), p.spec.compute_share,
        p.spec.bandwidth_cap > 0 ? absl::StrCat(", bandwidth cap ", p.spec.bandwidth_cap)
                                 : std::string(),
        p.spec.spill ? ", spills to host" : "", p.spec.reserve_sms ? ", SMs reserved" : "");
  }
  // Prometheus metrics (metricsAddress, --metrics-address): served before the gRPC server
  // starts, so the port is in the log by the time clients can connect. The RPC counters are
  // collected only while they are served.
  std::unique_ptr<gpukit::RpcMetrics> rpc_metrics;
  std::unique_ptr<gpukit::DaemonMetrics> daemon_metrics;
  std::unique_ptr<gpukit::MetricsServer> metrics_server;
  if (!config->metrics_address.empty()) {
    rpc_metrics = std::make_unique<gpukit::RpcMetrics>();
    daemon_metrics = std::make_unique<gpukit::DaemonMetrics>(
        **core, rpc_metrics.get(), gpukit::DaemonMetricsFacts{GPUKIT_VERSION_STRING, clock.Now()});
    auto metrics = gpukit::MetricsServer::Start(
        config->metrics_address, [m = daemon_metrics.get()] { return m->Render(); });
    if (!metrics.ok()) return Fail(metrics.status());
    metrics_server = *std::move(metrics);
    spdlog::info("metrics: serving {}", metrics_server->url());
  }
  gpukit::ServerOptions server_options;
  server_options.rpc_metrics = rpc_metrics.get();
  server_options.listen = config->listen;
  server_options.version = GPUKIT_VERSION_STRING;
  server_options.max_threads = config->server_max_threads;
  server_options.submit_socket = config->server_submit_socket;
  struct TlsFile {
    const char* setting;
    const std::string& path;
    std::string& pem;
  };
  for (const TlsFile& file :
       {TlsFile{"access.tls.certFile", config->tcp.cert_file, server_options.tcp.cert_pem},
        TlsFile{"access.tls.keyFile", config->tcp.key_file, server_options.tcp.key_pem},
        TlsFile{"access.tls.clientCaFile", config->tcp.client_ca_file,
                server_options.tcp.client_ca_pem}}) {
    if (file.path.empty()) continue;
    absl::StatusOr<std::string> text = gpukit::ReadSettingFile(file.setting, file.path);
    if (!text.ok()) return Fail(text.status());
    file.pem = *std::move(text);
  }
  server_options.tcp.insecure = config->tcp.insecure;
  auto access_policy = AccessPolicyFor(*config);
  if (!access_policy.ok()) return Fail(access_policy.status());
  server_options.access_policy = *std::move(access_policy);
  auto server = gpukit::Server::Start(**core, clock, server_options);
  if (!server.ok()) return Fail(server.status());
  spdlog::info("gpukitd ready");
  gpukit::Server& serving = **server;
  gpukit::Core& running_core = **core;
  auto serving_status = [&serving, &running_core] {
    return absl::StrCat("serving on ", serving.addresses().size(), " address(es); ",
                        running_core.session_count(), " session(s)");
  };
  notifier->Notify(absl::StrCat("READY=1\nSTATUS=", serving_status()));

  std::unique_ptr<gpukit::Watchdog> watchdog;
  if (std::optional<absl::Duration> interval = gpukit::SystemdNotifier::WatchdogInterval()) {
    gpukit::WatchdogOptions watchdog_options;
    watchdog_options.interval = *interval;
    // Healthy: the core's locks can be taken and gRPC answers a health check through the
    // server, within half the interval (watchdog.h).
    watchdog_options.probe = [&serving, &running_core, deadline = *interval / 2] {
      running_core.CheckLiveness();
      return serving.CheckServing(deadline);
    };
    watchdog_options.status_line = serving_status;
    absl::StatusOr<std::unique_ptr<gpukit::Watchdog>> started =
        gpukit::Watchdog::Start(*notifier, clock, watchdog_options);
    if (!started.ok()) return Fail(started.status());
    watchdog = *std::move(started);
    spdlog::info("systemd watchdog: {}, pinged every {} while healthy",
                 absl::FormatDuration(*interval), absl::FormatDuration(*interval / 2));
  }

  // SIGHUP's reload. The targets other parts of gpukitd register go here (reload.h).
  gpukit::ReloadTargets reload_targets;
  // The access block (tenants, groups, tokens, admins): requests from now on are judged by
  // the new policy; open sessions keep their owners. (access.tls and insecureTcp shape the
  // listening ports: they take effect at the next start.)
  reload_targets.on_reload.push_back([&serving](const gpukit::DaemonConfig& next) -> absl::Status {
    GPUKIT_ASSIGN_OR_RETURN(std::shared_ptr<const gpukit::AccessPolicy> policy,
                            AccessPolicyFor(next));
    serving.SetAccessPolicy(std::move(policy));
    spdlog::info("reload: access policy applied ({})",
                 next.access.has_value() ? "from access" : "the default: uid-<uid> per uid");
    return absl::OkStatus();
  });
  gpukit::ConfigReloader reloader(running_core, *flags, *config, std::move(reload_targets));

  int signal = 0;
  while (sigwait(&signals, &signal) == 0 && signal == SIGHUP) {
    spdlog::info("received SIGHUP, reloading the configuration");
    // MONOTONIC_USEC: when the reload began, which systemd 253 and later ask for with it.
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    notifier->Notify(absl::StrCat(
        "RELOADING=1\nMONOTONIC_USEC=", int64_t{now.tv_sec} * 1000000 + now.tv_nsec / 1000,
        "\nSTATUS=reloading the configuration"));
    absl::StatusOr<std::string> reloaded = reloader.Reload();
    notifier->Notify(absl::StrCat(
        "READY=1\nSTATUS=",
        reloaded.ok() ? *reloaded : absl::StrCat("reload refused: ", reloaded.status().message()),
        "; ", serving_status()));
  }
  spdlog::info("received {}, shutting down", signal == SIGTERM ? "SIGTERM" : "SIGINT");
  notifier->Notify("STOPPING=1\nSTATUS=shutting down");
  if (watchdog != nullptr) watchdog->Stop();
  (*server)->Shutdown();
  if (metrics_server != nullptr) metrics_server->Stop();
  (*core)->CloseAllSessions();
  spdlog::info("gpukitd stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
