// UnixListener: gpukitd's own accept loop for a unix socket, so that each connection's peer
// credentials (SO_PEERCRED: uid, gid, pid) are known before gRPC serves it.
//
// gRPC 1.51 binds unix sockets itself and tells handlers nothing about the peer but the
// socket's path. Instead gpukitd binds and listens, and a thread accepts each connection,
// reads its credentials into a PeerTable under the connection's descriptor, and hands the
// descriptor to the running gRPC server (grpc::AddInsecureChannelFromFd), which serves it
// like any other connection and names its peer "fd:<n>".
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<UnixListener> listener,
//                           UnixListener::Bind("/run/gpukit/gpukitd.sock"));
//   ... build and start the grpc::Server ...
//   listener->Start(*server, peers);
//   ...
//   listener->Stop();  // before the server shuts down
//
// The socket file gets the mode gRPC gave it (0777 less the process's umask: 0755 under the
// usual 022, so only the daemon's uid, or whoever an operator chmods it for, may connect).
// The caller removes a stale socket first (PrepareUnixSocket) and the file at the end.
//
// Thread safety: Bind, Start and Stop from one thread; the accept thread only reads the
// listener's descriptors and writes to the PeerTable (thread-safe).
#ifndef GPUKIT_DAEMON_SERVICE_UNIX_LISTENER_H_
#define GPUKIT_DAEMON_SERVICE_UNIX_LISTENER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/service/peer_table.h"
#include "grpcpp/server.h"
#include "runtime/base/unix_fd.h"

namespace gpukit::service {

class UnixListener {
 public:
  // Creates a stream socket bound to `path` and listening. INVALID_ARGUMENT for a path too
  // long for a socket address (107 bytes), UNAVAILABLE if socket/bind/listen fail (in use,
  // no permission), with the system's reason.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Bind(const std::string& path);
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;
  // Stops the accept thread and closes the listening socket (not the connections).
  ~UnixListener();

  // Starts the accept thread: connections go to `server` (started, and alive until Stop
  // returns) with their peers recorded in `peers` (alive as long). Call once.
  void Start(grpc::Server& server, PeerTable& peers);
  // Stops accepting and joins the thread; connections already handed over stay served.
  // Idempotent. Connections waiting in the backlog are refused when the socket closes.
  void Stop();

  const std::string& path() const { return path_; }

 private:
  UnixListener(std::string path, ScopedFd listen_fd, ScopedFd stop_fd);
  void AcceptLoop(grpc::Server* server, PeerTable* peers);

  const std::string path_;
  ScopedFd listen_fd_;  // non-blocking
  ScopedFd stop_fd_;    // an eventfd: readable once Stop wants the thread to end
  std::thread thread_;
};

// The supplementary groups of the process at the other end of the unix socket `fd`, as they
// were when it connected (SO_PEERGROUPS, Linux 4.13); empty if the kernel cannot tell, in
// which case only the primary gid counts for group rules (access.gids, access.adminGids).
// The first getsockopt has room for `initial_capacity` groups; for a peer with more, the
// kernel answers ERANGE with the room it needs and a second call reads them all (tests pass
// a small capacity to take that path). Cost: one or two system calls.
std::vector<uint32_t> PeerGroups(int fd, size_t initial_capacity = 64);

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_UNIX_LISTENER_H_
