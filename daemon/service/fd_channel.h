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
// A client keeps one connection for its session's life and makes every exchange over it
// (runtime/base/fd_channel_client.h). One thread polls the listening socket and every open
// connection and serves them in turn, one request per ready connection per round: the socket
// keeps each message whole (SOCK_SEQPACKET), so a request is read only once all of it is
// there, and a client that connects and says nothing holds no one up. Replies are sent without
// blocking: a client that lets them pile up unread (it may have one exchange outstanding) is
// dropped. End of file or an error closes that connection only. Past `max_connections` open at
// once, the least recently used is closed to admit the new one; its client reconnects at its next
// exchange. The socket file has the gRPC socket's permissions: whoever may call gpukitd may use it.
//
// Thread safety: Start and the destructor from one thread; `deliver` and `fetch` run on the
// channel's.
#ifndef GPUKIT_DAEMON_SERVICE_FD_CHANNEL_H_
#define GPUKIT_DAEMON_SERVICE_FD_CHANNEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/base/unix_fd.h"

namespace gpukit {

struct FdChannelOptions {
  // Connections open at once (one per client session that exchanged descriptors); the least
  // recently used is closed to admit one more. Each costs a descriptor of gpukitd's.
  int max_connections = 1024;
};

class FdChannel {
 public:
  using Deliver = std::function<absl::Status(absl::string_view token, ScopedFd fd)>;
  using Fetch = std::function<absl::StatusOr<ScopedFd>(absl::string_view token)>;

  // Listens at `path` (replacing an old socket file) and starts the channel's thread.
  // INVALID_ARGUMENT for max_connections < 1; the socket's errors as ListenUnixSocket gives
  // them.
  static absl::StatusOr<std::unique_ptr<FdChannel>> Start(std::string path, Deliver deliver,
                                                          Fetch fetch,
                                                          FdChannelOptions options = {});
  // Stops serving (after the request in hand), closes every connection, removes the socket
  // file.
  ~FdChannel();
  FdChannel(const FdChannel&) = delete;
  FdChannel& operator=(const FdChannel&) = delete;

  const std::string& path() const { return path_; }

 private:
  struct Connection {
    ScopedFd socket;
    uint64_t last_used = 0;  // the round it was accepted or last served in
  };

  FdChannel(std::string path, ScopedFd listening, ScopedFd wake, Deliver deliver, Fetch fetch,
            FdChannelOptions options);
  void Loop();
  // Reads one request from `connection` and answers it. False when the connection is to be
  // closed (its client hung up, sent what is not a request, or does not read its replies).
  bool Serve(int connection);
  // Takes a connection waiting on the listening socket, closing the least recently used
  // connection first when max_connections are open.
  void Accept(uint64_t round);

  const std::string path_;
  const ScopedFd listening_;
  const ScopedFd wake_;  // an eventfd: written to stop the loop
  const Deliver deliver_;
  const Fetch fetch_;
  const FdChannelOptions options_;
  std::vector<Connection> connections_;  // the channel's thread only
  std::thread thread_;
};

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SERVICE_FD_CHANNEL_H_
