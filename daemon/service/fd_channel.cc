#include "daemon/service/fd_channel.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <utility>

#include "runtime/base/fd_channel_protocol.h"
#include "runtime/base/status_macros.h"
#include "spdlog/spdlog.h"
#include <sys/eventfd.h>
#include <sys/socket.h>

namespace gpukit {

absl::StatusOr<std::unique_ptr<FdChannel>> FdChannel::Start(std::string path, Deliver deliver,
                                                            Fetch fetch,
                                                            absl::Duration receive_timeout) {
  GPUKIT_ASSIGN_OR_RETURN(ScopedFd listening, ListenUnixSocket(path, 64));
  ScopedFd wake(::eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) return absl::InternalError("eventfd failed");
  std::unique_ptr<FdChannel> channel(new FdChannel(std::move(path), std::move(listening),
                                                   std::move(wake), std::move(deliver),
                                                   std::move(fetch), receive_timeout));
  channel->thread_ = std::thread([raw = channel.get()] { raw->Loop(); });
  spdlog::info("descriptor channel on {}", channel->path_);
  return channel;
}

FdChannel::FdChannel(std::string path, ScopedFd listening, ScopedFd wake, Deliver deliver,
                     Fetch fetch, absl::Duration receive_timeout)
    : path_(std::move(path)),
      listening_(std::move(listening)),
      wake_(std::move(wake)),
      deliver_(std::move(deliver)),
      fetch_(std::move(fetch)),
      receive_timeout_(receive_timeout) {}

FdChannel::~FdChannel() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof(one)) != sizeof(one)) {
    spdlog::warn("descriptor channel: cannot wake its thread");
  }
  if (thread_.joinable()) thread_.join();
  ::unlink(path_.c_str());
}

void FdChannel::Loop() {
  for (;;) {
    pollfd waiting[2] = {{listening_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(waiting, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("descriptor channel: poll failed ({}); it stops", errno);
      return;
    }
    if ((waiting[1].revents & POLLIN) != 0) return;
    ScopedFd connection(::accept4(listening_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection.valid()) continue;  // the client went away before we took it
    Serve(connection.get());
  }
}

void FdChannel::Serve(int connection) {
  absl::StatusOr<ReceivedMessage> message = ReceiveMessage(connection, 256, receive_timeout_);
  absl::Status status = message.status();
  ScopedFd reply_fd;  // what a fetch sends back
  if (status.ok()) {
    absl::StatusOr<FdChannelRequest> request = DecodeFdChannelRequest(message->bytes);
    status = request.status();
    if (status.ok() && request->op == FdChannelOp::kDeliver) {
      status = message->fd.valid()
                   ? deliver_(request->token, std::move(message->fd))
                   : absl::InvalidArgumentError("descriptor channel request without a descriptor");
    } else if (status.ok()) {
      absl::StatusOr<ScopedFd> fetched = fetch_(request->token);
      status = fetched.status();
      if (fetched.ok()) reply_fd = *std::move(fetched);
    }
  }
  if (!status.ok()) spdlog::debug("descriptor channel: {}", status.ToString());
  if (absl::IsUnavailable(message.status())) return;  // nobody to answer
  const std::string reply = EncodeFdChannelReply(status);
  SendMessage(connection, reply.data(), reply.size(), reply_fd.get()).IgnoreError();
}

}  // namespace gpukit
