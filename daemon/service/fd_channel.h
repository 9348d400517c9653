// FdChannel: gpukitd's descriptor channel, the unix socket beside its gRPC socket over which
// clients hand over file descriptors (host shared memory) with SCM_RIGHTS. The wire format is
// in runtime/base/fd_channel_protocol.h; each exchange is paired with a gRPC request by the
// token that request's reply carried, and handed to `deliver` (Core::DeliverDescriptor) or
// answered by `fetch` (Core::FetchExport).
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<FdChannel> channel,
//       FdChannel::Start("/run/gpukit/gpukitd.sock.fd",
//                        [&](absl::string_view token, ScopedFd fd) {
//                          return core.DeliverDescriptor(token, std::move(fd));
//                        },
//                        [&](absl::string_view token) { return core.FetchExport(token); }));
//
// One thread accepts and serves connections one at a time; a client gets `receive_timeout`
// to send its message, so a stalled client delays others by at most that. The socket file
// has the gRPC socket's permissions: whoever may call gpukitd may use it.
//
// Thread safety: Start and the destructor from one thread; `deliver` runs on the channel's.
#ifndef GPUKIT_DAEMON_SERVICE_FD_CHANNEL_H_
#define GPUKIT_DAEMON_SERVICE_FD_CHANNEL_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/base/unix_fd.h"

namespace gpukit {

class FdChannel {
 public:
  using Deliver = std::function<absl::Status(absl::string_view token, ScopedFd fd)>;
  using Fetch = std::function<absl::StatusOr<ScopedFd>(absl::string_view token)>;

  static absl::StatusOr<std::unique_ptr<FdChannel>> Start(
      std::string path, Deliver deliver, Fetch fetch,
      absl::Duration receive_timeout = absl::Seconds(1));
  // Stops accepting, finishes the exchange in flight, removes the socket file.
  ~FdChannel();
  FdChannel(const FdChannel&) = delete;
  FdChannel& operator=(const FdChannel&) = delete;

  const std::string& path() const { return path_; }

 private:
  FdChannel(std::string path, ScopedFd listening, ScopedFd wake, Deliver deliver, Fetch fetch,
            absl::Duration receive_timeout);
  void Loop();
  void Serve(int connection);

  const std::string path_;
  const ScopedFd listening_;
  const ScopedFd wake_;  // an eventfd: written to stop the loop
  const Deliver deliver_;
  const Fetch fetch_;
  const absl::Duration receive_timeout_;
  std::thread thread_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SERVICE_FD_CHANNEL_H_
