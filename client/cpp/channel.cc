#include "client/cpp/channel.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/default_address.h"

namespace gpukit {

std::string DefaultClientTarget() { return DefaultClientAddress(); }

std::string SessionPartition(const std::string& requested) {
  if (!requested.empty()) return requested;
  const char* from_env = std::getenv("GPUKIT_PARTITION");
  return from_env != nullptr ? from_env : "";
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectChannel(const std::string& target,
                                                              absl::Duration timeout) {
  // A socket file that does not exist will not appear by waiting: say so at once instead of
  // retrying until the timeout.
  if (absl::StartsWith(target, "unix://") && access(target.c_str() + 7, F_OK) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to gpukitd at ", target,
                     ": no such socket (is gpukitd running? pass --addr or set GPUKIT_ADDR)"));
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 absl::ToChronoMilliseconds(timeout))) {
    return absl::UnavailableError(absl::StrCat("cannot connect to gpukitd at ", target,
                                               " (is it running? pass --addr or set GPUKIT_ADDR)"));
  }
  return channel;
}

absl::Status FromGrpc(const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto it = trailers.find("gpukit-reason"); it != trailers.end()) {
    out.SetPayload(kReasonPayloadUrl,
                   absl::Cord(absl::string_view(it->second.data(), it->second.size())));
  }
  return out;
}

}  // namespace gpukit
