#include "daemon/device_plugin/kubelet_client.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "client/cpp/channel.h"
#include "grpcpp/grpcpp.h"
#include "k8s/deviceplugin/v1beta1/api.grpc.pb.h"
#include <sys/stat.h>

namespace gpukit::device_plugin {

std::optional<FileId> SocketFileId(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return FileId{.device = st.st_dev,
                .inode = st.st_ino,
                .change_time_ns = int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec};
}

absl::Status RegisterWithKubelet(const std::string& kubelet_socket_path,
                                 const v1beta1::RegisterRequest& request, absl::Duration timeout) {
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::StrCat("unix://", kubelet_socket_path), grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 absl::ToChronoMilliseconds(timeout))) {
    return absl::UnavailableError(absl::StrCat("registering ", request.resource_name(),
                                               ": no kubelet accepts at ", kubelet_socket_path));
  }
  std::unique_ptr<v1beta1::Registration::Stub> registration =
      v1beta1::Registration::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  v1beta1::Empty response;
  absl::Status status = FromGrpc(registration->Register(&context, request, &response), context);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("registering ", request.resource_name(),
                                                    " with the kubelet at ", kubelet_socket_path,
                                                    ": ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace gpukit::device_plugin
