// gpukit-device-plugin's command line, and the PluginOptions it resolves to.
//
//   GPUKIT_ASSIGN_OR_RETURN(PluginCommandLine flags, ParsePluginCommandLine(argc, argv));
//   GPUKIT_ASSIGN_OR_RETURN(PluginOptions options, ResolvePluginOptions(flags));
//
// Flags are "--name value" or "--name=value"; PluginUsage() lists them with their defaults.
//
// Thread safety: pure functions (ResolvePluginOptions reads $GPUKIT_ADDR and the default
// socket's rule when --gpukit-addr is not given).
#ifndef GPUKIT_DAEMON_DEVICE_PLUGIN_PLUGIN_FLAGS_H_
#define GPUKIT_DAEMON_DEVICE_PLUGIN_PLUGIN_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/device_plugin/device_plugin.h"

namespace gpukit::device_plugin {

struct PluginCommandLine {
  bool help = false;
  bool version = false;
  // gpukitd's address, "unix:///path/gpukitd.sock"; empty: $GPUKIT_ADDR, else the default
  // socket (as for every gpukit client).
  std::string gpukit_address;
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  // How often gpukitd and the kubelet's socket are looked at.
  absl::Duration poll_interval = absl::Seconds(5);
  // Slots of a partition without max_sessions.
  int32_t devices_per_partition = 16;
  // Where containers see gpukitd's socket directory.
  std::string container_socket_dir = "/run/gpukit";
  // gpukitd's socket directory on the host; empty: the directory of the --gpukit-addr socket
  // (right when the plugin sees the host's path, as in deploy/kubernetes/).
  std::string host_socket_dir;
  std::string log_level = "info";
};

// INVALID_ARGUMENT naming the flag for an unknown flag, a missing or bad value (a duration
// such as "5s" for --poll-interval, an integer >= 1 for --devices-per-partition, absolute
// paths for the directories).
absl::StatusOr<PluginCommandLine> ParsePluginCommandLine(int argc, const char* const* argv);

// The options of `flags`. INVALID_ARGUMENT if gpukitd's address is not a unix socket: a
// container is given gpukitd by a mount of its socket directory.
absl::StatusOr<PluginOptions> ResolvePluginOptions(const PluginCommandLine& flags,
                                                   std::string* gpukit_address);

// The --help text.
std::string PluginUsage();

}  // namespace gpukit::device_plugin

#endif  // GPUKIT_DAEMON_DEVICE_PLUGIN_PLUGIN_FLAGS_H_
