#include "daemon/device_plugin/plugin_flags.h"

#include <filesystem>
#include <functional>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/default_address.h"

namespace gpukit::device_plugin {
namespace {

absl::Status AbsolutePath(absl::string_view flag, absl::string_view value, std::string& out) {
  if (!absl::StartsWith(value, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " = \"", value, "\" must be an absolute path"));
  }
  out = std::string(value);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PluginCommandLine> ParsePluginCommandLine(int argc, const char* const* argv) {
  PluginCommandLine flags;
  using Setter = std::function<absl::Status(absl::string_view)>;
  const std::map<std::string, Setter, std::less<>> setters = {
      {"gpukit-addr",
       [&](absl::string_view v) {
         if (v.empty()) return absl::InvalidArgumentError("--gpukit-addr must not be empty");
         flags.gpukit_address = std::string(v);
         return absl::OkStatus();
       }},
      {"plugin-dir",
       [&](absl::string_view v) { return AbsolutePath("plugin-dir", v, flags.plugin_dir); }},
      {"container-socket-dir",
       [&](absl::string_view v) {
         return AbsolutePath("container-socket-dir", v, flags.container_socket_dir);
       }},
      {"host-socket-dir",
       [&](absl::string_view v) {
         return AbsolutePath("host-socket-dir", v, flags.host_socket_dir);
       }},
      {"poll-interval",
       [&](absl::string_view v) {
         absl::Duration d;
         if (!absl::ParseDuration(v, &d) || d <= absl::ZeroDuration()) {
           return absl::InvalidArgumentError(absl::StrCat(
               "--poll-interval = \"", v, "\" must be a positive duration such as 5s or 500ms"));
         }
         flags.poll_interval = d;
         return absl::OkStatus();
       }},
      {"devices-per-partition",
       [&](absl::string_view v) {
         int32_t n = 0;
         if (!absl::SimpleAtoi(v, &n) || n < 1) {
           return absl::InvalidArgumentError(
               absl::StrCat("--devices-per-partition = \"", v, "\" must be an integer >= 1"));
         }
         flags.devices_per_partition = n;
         return absl::OkStatus();
       }},
      {"log-level",
       [&](absl::string_view v) {
         for (absl::string_view level :
              {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
           if (v == level) {
             flags.log_level = std::string(v);
             return absl::OkStatus();
           }
         }
         return absl::InvalidArgumentError(absl::StrCat(
             "--log-level = \"", v, "\" must be trace, debug, info, warn, error, critical or off"));
       }},
  };
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      flags.help = true;
      continue;
    }
    if (arg == "--version") {
      flags.version = true;
      continue;
    }
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\""));
    }
    arg.remove_prefix(2);
    absl::string_view name = arg;
    std::string value;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = std::string(arg.substr(eq + 1));
    } else {
      auto it = setters.find(name);
      if (it != setters.end()) {
        if (i + 1 >= argc) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        }
        value = argv[++i];
      }
    }
    auto it = setters.find(name);
    if (it == setters.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (absl::Status status = it->second(value); !status.ok()) return status;
  }
  return flags;
}

absl::StatusOr<PluginOptions> ResolvePluginOptions(const PluginCommandLine& flags,
                                                   std::string* gpukit_address) {
  const std::string address =
      flags.gpukit_address.empty() ? DefaultClientAddress() : flags.gpukit_address;
  if (!absl::StartsWith(address, "unix://") || address.size() <= 7 || address[7] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpukitd's address ", address,
        " is not a unix socket (unix:///path): containers are given gpukitd by a mount of its "
        "socket directory"));
  }
  const std::filesystem::path socket_path(address.substr(7));
  PluginOptions options;
  options.plugin_dir = flags.plugin_dir;
  options.devices.devices_per_partition = flags.devices_per_partition;
  options.mount.host_socket_dir =
      flags.host_socket_dir.empty() ? socket_path.parent_path().string() : flags.host_socket_dir;
  options.mount.container_socket_dir = flags.container_socket_dir;
  options.mount.socket_name = socket_path.filename().string();
  if (gpukit_address != nullptr) *gpukit_address = address;
  return options;
}

std::string PluginUsage() {
  return R"(Usage: gpukit-device-plugin [flags]

Advertises gpukitd's partitions to the kubelet as extended resources gpukit.io/<partition>
(device plugin API v1beta1). A container given one gets gpukitd's socket directory mounted
and GPUKIT_ADDR / GPUKIT_PARTITION set. See docs/operations.md, "Kubernetes".

Flags:
  --gpukit-addr unix:///PATH      gpukitd's socket (default: $GPUKIT_ADDR, else the default
                                  socket, e.g. /run/gpukit/gpukitd.sock)
  --plugin-dir DIR                the kubelet's plugin directory, where kubelet.sock is and
                                  the plugin's sockets go (default /var/lib/kubelet/device-plugins)
  --poll-interval DURATION        how often gpukitd's partitions and the kubelet's socket are
                                  looked at (default 5s)
  --devices-per-partition N       devices (slots) of a partition without max_sessions; a
                                  partition with max_sessions has that many (default 16)
  --container-socket-dir DIR      where containers see gpukitd's socket directory
                                  (default /run/gpukit)
  --host-socket-dir DIR           gpukitd's socket directory on the host (default: the
                                  directory of --gpukit-addr's socket)
  --log-level LEVEL               trace, debug, info, warn, error, critical or off (default info)
  --version                       print the version and exit
  --help                          print this text and exit
)";
}

}  // namespace gpukit::device_plugin
