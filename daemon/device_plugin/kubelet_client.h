// The plugin's side of the kubelet's Registration service, and how it tells that the kubelet
// restarted.
//
// A kubelet serves Registration on <plugin dir>/kubelet.sock. When it restarts it deletes
// every socket in that directory and makes kubelet.sock anew, and forgets every plugin: each
// must serve again and register again. KubeletSocketId tells one kubelet.sock from the next.
//
//   GPUKIT_RETURN_IF_ERROR(RegisterWithKubelet(dir + "/kubelet.sock", request, absl::Seconds(5)));
//
// Thread safety: pure functions (each call makes its own channel).
#ifndef GPUKIT_DAEMON_DEVICE_PLUGIN_KUBELET_CLIENT_H_
#define GPUKIT_DAEMON_DEVICE_PLUGIN_KUBELET_CLIENT_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "k8s/deviceplugin/v1beta1/api.pb.h"
#include <sys/types.h>

namespace gpukit::device_plugin {

// The kubelet's socket file name in its plugin directory.
inline constexpr char kKubeletSocketName[] = "kubelet.sock";

// Which file a path names now: a new file at the same path has another id (the inode
// number alone could be reused at once, so its change time comes with it).
struct FileId {
  dev_t device = 0;
  ino_t inode = 0;
  int64_t change_time_ns = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
};

// The id of the socket at `path`; nullopt if there is no socket there. One stat call.
std::optional<FileId> SocketFileId(const std::string& path);

// One Registration.Register call to the kubelet at `kubelet_socket_path`. UNAVAILABLE naming
// the path if nothing accepts within `timeout`; otherwise the kubelet's answer (it refuses
// an unsupported version or a resource name another plugin holds).
absl::Status RegisterWithKubelet(const std::string& kubelet_socket_path,
                                 const v1beta1::RegisterRequest& request, absl::Duration timeout);

}  // namespace gpukit::device_plugin

#endif  // GPUKIT_DAEMON_DEVICE_PLUGIN_KUBELET_CLIENT_H_
