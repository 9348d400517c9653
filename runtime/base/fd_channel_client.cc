#include "runtime/base/fd_channel_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"

namespace gpukit {

absl::StatusOr<ReceivedMessage> FdChannelClient::RoundTrip(absl::string_view request, int fd,
                                                           absl::Duration timeout) {
  absl::Status sent = SendMessage(connection_.get(), request.data(), request.size(), fd);
  if (!sent.ok()) {
    // EPIPE, ECONNRESET: the peer closed the connection.
    return absl::UnavailableError(absl::StrCat("descriptor channel: ", sent.message()));
  }
  return ReceiveMessage(connection_.get(), kFdChannelMaxReplyBytes, timeout);
}

absl::StatusOr<ScopedFd> FdChannelClient::Exchange(absl::string_view path, FdChannelOp op,
                                                   absl::string_view token, int fd,
                                                   absl::Duration timeout) {
  const std::string request = EncodeFdChannelRequest({op, std::string(token)});
  absl::MutexLock lock(&mu_);
  if (path_ != path) {
    connection_.Reset();
    path_ = std::string(path);
  }
  absl::StatusOr<ReceivedMessage> reply;
  // At most twice: on the kept connection, and on a new one if gpukitd had closed that.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool kept = connection_.valid();
    if (!kept) {
      absl::StatusOr<ScopedFd> connected = ConnectUnixSocket(path_);
      if (!connected.ok()) {
        return absl::UnavailableError(absl::StrCat("cannot reach gpukitd's descriptor channel at ",
                                                   path_, ": ", connected.status().message()));
      }
      connection_ = *std::move(connected);
    }
    reply = RoundTrip(request, fd, timeout);
    if (reply.ok()) break;
    connection_.Reset();  // broken, or a reply may still come: never reused
    if (!kept || !absl::IsUnavailable(reply.status())) return reply.status();
  }
  if (!reply.ok()) return reply.status();
  GPUKIT_RETURN_IF_ERROR(DecodeFdChannelReply(reply->bytes));
  if (op == FdChannelOp::kFetch && !reply->fd.valid()) {
    return absl::InternalError("gpukitd sent no descriptor");
  }
  return std::move(reply->fd);
}

bool FdChannelClient::connected() const {
  absl::MutexLock lock(&mu_);
  return connection_.valid();
}

}  // namespace gpukit
