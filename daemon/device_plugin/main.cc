// gpukit-device-plugin: parses flags, wires the plugin to gpukitd and the kubelet, and runs
// its loop until SIGTERM or SIGINT.
#include <csignal>
#include <cstdio>
#include <thread>

#include "absl/synchronization/notification.h"
#include "daemon/device_plugin/device_plugin.h"
#include "daemon/device_plugin/partition_source.h"
#include "daemon/device_plugin/plugin_flags.h"
#include "runtime/base/mutex_mode.h"
#include "spdlog/spdlog.h"

namespace {

int Run(int argc, char** argv) {
  gpukit::UseFastMutexes();
  using namespace gpukit::device_plugin;
  absl::StatusOr<PluginCommandLine> flags = ParsePluginCommandLine(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "gpukit-device-plugin: %s\n",
                 std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help) {
    std::fputs(PluginUsage().c_str(), stdout);
    return 0;
  }
  if (flags->version) {
    std::printf("gpukit-device-plugin %s\n", GPUKIT_VERSION_STRING);
    return 0;
  }
  std::string address;
  absl::StatusOr<PluginOptions> options = ResolvePluginOptions(*flags, &address);
  if (!options.ok()) {
    std::fprintf(stderr, "gpukit-device-plugin: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(flags->log_level));

  // Block the stop signals in every thread (gRPC's too); one thread takes them with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  absl::Notification stop;
  std::thread signal_thread([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    spdlog::info("received {}, stopping", signal == SIGTERM ? "SIGTERM" : "SIGINT");
    stop.Notify();
  });

  spdlog::info(
      "gpukit-device-plugin {}: gpukitd at {}, kubelet plugin directory {}, containers "
      "get {} at {}",
      GPUKIT_VERSION_STRING, address, options->plugin_dir, options->mount.host_socket_dir,
      options->mount.container_socket_dir);
  std::unique_ptr<GpukitdPartitionSource> source =
      GpukitdPartitionSource::Create({.address = address});
  {
    DevicePlugin plugin(*options, *source);
    plugin.Run(stop, flags->poll_interval);
  }  // every endpoint stops and removes its socket
  signal_thread.join();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
