// SubmitSocket: the submit socket, a unix SOCK_SEQPACKET socket beside gpukitd's gRPC socket
// on which local clients run the Submit protocol (ComputeService.Submit's messages, one
// serialized SubmitRequest or SubmitResponse per datagram) without gRPC: the fast path of a
// synchronous client, whose every op is a round trip.
//
// Why: a gRPC round trip crosses several threads on each side, and each that slept through
// the pause before the call pays a wake-up that grows with the pause; after a large op's 1.5
// ms a RunOp took 420 us where it took 140-170 us back to back (docs/benchmarks.md, "Where a
// synchronous op's time goes outside the daemon"). Here one thread per connection reads the
// requests, answers them and writes the responses itself; it polls the socket for a while
// after each message (a synchronous client's next request follows its reply within its own
// cycle), and the client's caller polls for its reply (client/cpp/submit_socket_client.h).
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<SubmitSocket> socket,
//       SubmitSocket::Start("/run/gpukit/gpukitd.sock.submit", core, guard));
//   session_service.set_submit_socket(socket->path());  // told to local callers
//
// Protocol: a connection is one Submit stream (submit_session.h): its first request names the
// session, which the connecting process (SO_PEERCRED, as on the gRPC socket) must be allowed
// to use; each request is answered as on the gRPC stream, a response above the datagram
// limit split into several (their results in order; the last one carries `synced` and
// `error`). Where the gRPC call would end with an error status, gpukitd sends a last
// response with `ended` set and closes the connection: a request that breaks the protocol or
// does not parse (INVALID_ARGUMENT), a refused session (NOT_FOUND), a second stream of it
// (FAILED_PRECONDITION). The client closing its end is its going away, as a cancelled gRPC
// stream: the ops queued run to their end, an op waiting for admission is cancelled, requests
// not yet read are dropped. Datagrams carry at most kMaxSubmitSocketMessageBytes.
//
// Failure: a client that dies or hangs up ends its connection only; one that sends garbage
// gets `ended` and is dropped; one that never reads its answers blocks its own connection's
// thread only; one that names no session within kFirstRequestTimeout is closed. Past
// `max_connections` open at once (bounded by a quarter of RLIMIT_NOFILE), or a quarter of
// that for one uid, a new connection is refused (closed at once; the client falls back to
// gRPC). A thread that cannot be started refuses its connection. Ended connections are joined
// and closed at once (the thread rings `reap_`). The socket file has the gRPC socket's mode.
//
// Thread safety: Start and the destructor from one thread; one thread per connection.
#ifndef GPUKIT_DAEMON_SERVICE_SUBMIT_SOCKET_H_
#define GPUKIT_DAEMON_SERVICE_SUBMIT_SOCKET_H_

#include <atomic>
#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/core.h"
#include "daemon/metrics/rpc_metrics.h"
#include "daemon/service/access_guard.h"
#include "daemon/session/principal.h"
#include "runtime/base/unix_fd.h"

namespace gpukit::service {

// The largest datagram either side of the submit socket sends.
inline constexpr size_t kMaxSubmitSocketMessageBytes = 60 * 1024;
// How long a new connection may take to send its first request (naming its session).
inline constexpr absl::Duration kFirstRequestTimeout = absl::Seconds(5);

// The method name under which each request of the socket is counted in RpcMetrics (its code:
// OK, or the stream's end; its latency: from its datagram read to its answer sent).
inline constexpr absl::string_view kSubmitSocketMethod = "gpukit.v1.SubmitSocket/Request";

struct SubmitSocketOptions {
  // Connections served at once (a thread each); more are refused.
  int max_connections = 1024;
  // Where requests are counted (as kSubmitSocketMethod), or null. Must outlive the socket.
  RpcMetrics* metrics = nullptr;
};

class SubmitSocket {
 public:
  // Listens at `path` (replacing an old socket file) and starts accepting. `core` and `guard`
  // must outlive the socket. INVALID_ARGUMENT for max_connections < 1; the socket's errors as
  // ListenUnixSocket gives them.
  static absl::StatusOr<std::unique_ptr<SubmitSocket>> Start(std::string path, Core& core,
                                                             const AccessGuard& guard,
                                                             SubmitSocketOptions options = {});
  // Stops accepting, shuts every connection down (their ops queued run to their end), joins
  // the threads and removes the socket file.
  ~SubmitSocket();
  SubmitSocket(const SubmitSocket&) = delete;
  SubmitSocket& operator=(const SubmitSocket&) = delete;

  const std::string& path() const { return path_; }

 private:
  struct Connection {
    ScopedFd socket;
    Principal peer;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  SubmitSocket(std::string path, ScopedFd listening, ScopedFd wake, ScopedFd reap, Core& core,
               const AccessGuard& guard, SubmitSocketOptions options);
  void AcceptLoop();
  // Takes one connection waiting on the listening socket, or refuses it (closes it at once).
  void Accept();
  // One connection's stream, until it ends.
  void Serve(Connection& connection);
  // Joins the threads of connections that ended.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const ScopedFd listening_;
  const ScopedFd wake_;  // an eventfd: written to stop the accept loop
  const ScopedFd reap_;  // an eventfd: a connection's thread ended, join it
  Core& core_;
  const AccessGuard& guard_;
  const SubmitSocketOptions options_;
  // options_.max_connections within a quarter of RLIMIT_NOFILE, and a quarter of that per uid.
  const int max_connections_;
  const int max_connections_per_uid_;
  std::thread acceptor_;

  mutable absl::Mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  // Set by the destructor: an op waiting for admission is cancelled, so no connection's thread
  // holds the shutdown up.
  std::atomic<bool> stopping_{false};
};

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_SUBMIT_SOCKET_H_
