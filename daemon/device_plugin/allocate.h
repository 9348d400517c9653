// The kubelet's Allocate, answered: what a container that was given slots of a gpukitd
// partition gets so that its gpukit clients reach gpukitd and open sessions there.
//
//   * a mount of gpukitd's socket directory (not the socket file: a restarted gpukitd makes
//     a new socket file, which a mount of the directory shows and one of the old file does
//     not), read-only: connecting to a unix socket needs no write access to the mount;
//   * GPUKIT_ADDR: "unix://<container_socket_dir>/<socket_name>", which the clients use as
//     their default address;
//   * GPUKIT_PARTITION: the partition, which the clients use when the program names none.
//
//   SocketMount mount{.host_socket_dir = "/run/gpukit", .container_socket_dir = "/run/gpukit",
//                     .socket_name = "gpukitd.sock"};
//   GPUKIT_ASSIGN_OR_RETURN(v1beta1::AllocateResponse response,
//                           AllocateResponseFor("default", known_ids, mount, request));
//
// Thread safety: pure functions.
#ifndef GPUKIT_DAEMON_DEVICE_PLUGIN_ALLOCATE_H_
#define GPUKIT_DAEMON_DEVICE_PLUGIN_ALLOCATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "k8s/deviceplugin/v1beta1/api.pb.h"

namespace gpukit::device_plugin {

struct SocketMount {
  // gpukitd's socket directory as the kubelet's host sees it (the mount's source).
  std::string host_socket_dir;
  // Where it appears in the container.
  std::string container_socket_dir = "/run/gpukit";
  // gpukitd's socket file name in that directory.
  std::string socket_name = "gpukitd.sock";
};

// "unix://<container_socket_dir>/<socket_name>": GPUKIT_ADDR in the container.
std::string ContainerAddress(const SocketMount& mount);

// One container response per container request, each with the mount and the two variables.
// INVALID_ARGUMENT naming the id if a request names a device id not in `known_ids` (the
// kubelet only passes ids the plugin listed, so this is a kubelet that kept an old list),
// or if a container request names no device.
absl::StatusOr<v1beta1::AllocateResponse> AllocateResponseFor(
    absl::string_view partition, const std::vector<std::string>& known_ids,
    const SocketMount& mount, const v1beta1::AllocateRequest& request);

}  // namespace gpukit::device_plugin

#endif  // GPUKIT_DAEMON_DEVICE_PLUGIN_ALLOCATE_H_
