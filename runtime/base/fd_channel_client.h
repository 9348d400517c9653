// FdChannelClient: a client's end of gpukitd's descriptor channel (the wire format is in
// fd_channel_protocol.h, gpukitd's end in daemon/service/fd_channel.h). It opens one
// connection at the first exchange and keeps it for its own life (a client session's), so an
// exchange costs one message each way, not a connect and an accept as well.
//
//   FdChannelClient channel;  // one per session
//   GPUKIT_ASSIGN_OR_RETURN(ScopedFd none,
//       channel.Exchange(response.fd_channel(), FdChannelOp::kDeliver, response.token(),
//                        memfd.get(), absl::Seconds(30)));
//
// Thread safety: thread-safe; exchanges from several threads take turns on the connection.
#ifndef GPUKIT_RUNTIME_BASE_FD_CHANNEL_CLIENT_H_
#define GPUKIT_RUNTIME_BASE_FD_CHANNEL_CLIENT_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/base/fd_channel_protocol.h"
#include "runtime/base/unix_fd.h"

namespace gpukit {

class FdChannelClient {
 public:
  FdChannelClient() = default;
  FdChannelClient(const FdChannelClient&) = delete;
  FdChannelClient& operator=(const FdChannelClient&) = delete;

  // One exchange with gpukitd at `path`: `op` with `token`, and `fd` attached when >= 0
  // (deliver). Returns the descriptor the reply carried (fetch), or an invalid one. Connects
  // at the first exchange, when `path` differs from the last one's, and after the connection
  // broke. A kept connection that gpukitd has closed (it closes the least recently used one
  // when too many are open, or it restarted) is found at once, by the send or by the end of
  // file instead of a reply, and the exchange is made again on a new one: gpukitd reads a
  // request only on a connection it keeps open, so nothing is done twice.
  // Errors: UNAVAILABLE when the channel cannot be reached or closes again; DEADLINE_EXCEEDED
  // when no reply comes within `timeout` (the connection is dropped, or a late reply would
  // answer the next exchange); the reply's status; INTERNAL for a fetch answered without a
  // descriptor.
  absl::StatusOr<ScopedFd> Exchange(absl::string_view path, FdChannelOp op, absl::string_view token,
                                    int fd, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether a connection is open (for tests).
  bool connected() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One request and its reply on connection_. UNAVAILABLE when gpukitd had closed it.
  absl::StatusOr<ReceivedMessage> RoundTrip(absl::string_view request, int fd,
                                            absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::string path_ ABSL_GUARDED_BY(mu_);
  ScopedFd connection_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_FD_CHANNEL_CLIENT_H_
