#include "daemon/device_plugin/allocate.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpukit::device_plugin {

std::string ContainerAddress(const SocketMount& mount) {
  return absl::StrCat("unix://", mount.container_socket_dir, "/", mount.socket_name);
}

absl::StatusOr<v1beta1::AllocateResponse> AllocateResponseFor(
    absl::string_view partition, const std::vector<std::string>& known_ids,
    const SocketMount& mount, const v1beta1::AllocateRequest& request) {
  v1beta1::AllocateResponse response;
  for (int i = 0; i < request.container_requests_size(); ++i) {
    const v1beta1::ContainerAllocateRequest& container = request.container_requests(i);
    if (container.devices_ids_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("container_requests[", i, "] names no device"));
    }
    for (const std::string& id : container.devices_ids()) {
      if (std::find(known_ids.begin(), known_ids.end(), id) == known_ids.end()) {
        return absl::InvalidArgumentError(absl::StrCat("container_requests[", i, "]: device \"", id,
                                                       "\" is not one of partition ", partition,
                                                       "'s devices"));
      }
    }
    v1beta1::ContainerAllocateResponse* out = response.add_container_responses();
    v1beta1::Mount* socket_dir = out->add_mounts();
    socket_dir->set_host_path(mount.host_socket_dir);
    socket_dir->set_container_path(mount.container_socket_dir);
    socket_dir->set_read_only(true);
    (*out->mutable_envs())["GPUKIT_ADDR"] = ContainerAddress(mount);
    (*out->mutable_envs())["GPUKIT_PARTITION"] = std::string(partition);
  }
  return response;
}

}  // namespace gpukit::device_plugin
