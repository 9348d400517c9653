#include "daemon/service/fd_channel.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime/base/fd_channel_protocol.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/thread_name.h"
#include "spdlog/spdlog.h"
#include <sys/eventfd.h>
#include <sys/socket.h>

namespace gpukit {

absl::StatusOr<std::unique_ptr<FdChannel>> FdChannel::Start(std::string path, Deliver deliver,
                                                            Fetch fetch, FdChannelOptions options) {
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "descriptor channel max_connections = ", options.max_connections, " must be >= 1"));
  }
  GPUKIT_ASSIGN_OR_RETURN(ScopedFd listening, ListenUnixSocket(path, 64));
  ScopedFd wake(::eventfd(0, EFD_CLOEXEC));
  if (!wake.valid()) return absl::InternalError("eventfd failed");
  std::unique_ptr<FdChannel> channel(new FdChannel(std::move(path), std::move(listening),
                                                   std::move(wake), std::move(deliver),
                                                   std::move(fetch), options));
  channel->thread_ = std::thread([raw = channel.get()] {
    NameThisThread("gk-fd-channel");
    raw->Loop();
  });
  spdlog::info("descriptor channel on {}", channel->path_);
  return channel;
}

FdChannel::FdChannel(std::string path, ScopedFd listening, ScopedFd wake, Deliver deliver,
                     Fetch fetch, FdChannelOptions options)
    : path_(std::move(path)),
      listening_(std::move(listening)),
      wake_(std::move(wake)),
      deliver_(std::move(deliver)),
      fetch_(std::move(fetch)),
      options_(options) {}

FdChannel::~FdChannel() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof(one)) != sizeof(one)) {
    spdlog::warn("descriptor channel: cannot wake its thread");
  }
  if (thread_.joinable()) thread_.join();
  ::unlink(path_.c_str());
}

void FdChannel::Loop() {
  std::vector<pollfd> waiting;
  for (uint64_t round = 1;; ++round) {
    waiting.clear();
    waiting.push_back({wake_.get(), POLLIN, 0});
    waiting.push_back({listening_.get(), POLLIN, 0});
    for (const Connection& connection : connections_) {
      waiting.push_back({connection.socket.get(), POLLIN, 0});
    }
    if (::poll(waiting.data(), waiting.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("descriptor channel: poll failed ({}); it stops", errno);
      return;
    }
    if ((waiting[0].revents & POLLIN) != 0) return;
    // One request per ready connection, in the order they were accepted; a connection whose
    // client hung up (POLLHUP without a request left) or failed is closed.
    size_t kept = 0;
    for (size_t i = 0; i < connections_.size(); ++i) {
      const short events = waiting[i + 2].revents;
      bool keep = true;
      if ((events & POLLIN) != 0) {
        keep = Serve(connections_[i].socket.get());
        connections_[i].last_used = round;
      } else if ((events & (POLLHUP | POLLERR | POLLNVAL)) != 0) {
        keep = false;
      }
      if (keep) {
        if (kept != i) connections_[kept] = std::move(connections_[i]);
        ++kept;
      }
    }
    connections_.resize(kept);
    if ((waiting[1].revents & POLLIN) != 0) Accept(round);
  }
}

void FdChannel::Accept(uint64_t round) {
  // Non-blocking: a reply the client does not read must not stop the thread (Serve).
  ScopedFd connection(::accept4(listening_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!connection.valid()) return;  // the client went away before we took it
  if (connections_.size() >= static_cast<size_t>(options_.max_connections)) {
    auto oldest = std::min_element(
        connections_.begin(), connections_.end(),
        [](const Connection& a, const Connection& b) { return a.last_used < b.last_used; });
    spdlog::debug("descriptor channel: {} connections open; closing the least recently used",
                  connections_.size());
    connections_.erase(oldest);
  }
  connections_.push_back(Connection{std::move(connection), round});
}

bool FdChannel::Serve(int connection) {
  // The poll said a message is there: taking it does not wait.
  absl::StatusOr<ReceivedMessage> message = ReceiveMessage(connection, 256, absl::ZeroDuration());
  if (!message.ok()) {
    // UNAVAILABLE: the client hung up; DEADLINE_EXCEEDED: nothing after all; anything else
    // (a message too long): the connection is not worth keeping either way.
    if (!absl::IsUnavailable(message.status())) {
      spdlog::debug("descriptor channel: {}", message.status().ToString());
    }
    return absl::IsDeadlineExceeded(message.status());
  }
  absl::StatusOr<FdChannelRequest> request = DecodeFdChannelRequest(message->bytes);
  absl::Status status = request.status();
  ScopedFd reply_fd;  // what a fetch sends back
  if (status.ok() && request->op == FdChannelOp::kDeliver) {
    status = message->fd.valid()
                 ? deliver_(request->token, std::move(message->fd))
                 : absl::InvalidArgumentError("descriptor channel request without a descriptor");
  } else if (status.ok()) {
    absl::StatusOr<ScopedFd> fetched = fetch_(request->token);
    status = fetched.status();
    if (fetched.ok()) reply_fd = *std::move(fetched);
  }
  if (!status.ok()) spdlog::debug("descriptor channel: {}", status.ToString());
  const std::string reply = EncodeFdChannelReply(status);
  // A client has one exchange outstanding at most, so its replies never fill the socket: one
  // that would not go out at once (EAGAIN) or at all (the client hung up) ends the connection.
  absl::Status sent = SendMessage(connection, reply.data(), reply.size(), reply_fd.get());
  if (!sent.ok()) {
    spdlog::debug("descriptor channel: a reply not sent ({}); the connection is closed",
                  sent.ToString());
    return false;
  }
  return true;
}

}  // namespace gpukit
