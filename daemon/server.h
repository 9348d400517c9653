// Server: the gRPC server of gpukitd (the four gpukit.v1 services, grpc.health.v1 and
// server reflection) on its listen addresses, plus the lease reaper.
//
// TCP addresses are gRPC's own listening ports. Unix sockets gpukitd binds itself and
// accepts on with a UnixListener each, which records every connection's peer credentials
// (SO_PEERCRED) in a PeerTable before handing it to gRPC; the services' AccessGuard reads
// them to decide who may name which session and who is an admin (see
// daemon/session/access_policy.h).
//
//   GPUKIT_ASSIGN_OR_RETURN(std::unique_ptr<Server> server,
//                           Server::Start(*core, clock, options));
//   ... until a signal ...
//   server->Shutdown();  // stops taking requests, finishes those in flight
//
// Thread safety: Start and Shutdown from one thread (main); SetAccessPolicy from any.
#ifndef GPUKIT_DAEMON_SERVER_H_
#define GPUKIT_DAEMON_SERVER_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/core.h"
#include "daemon/metrics/rpc_metrics.h"
#include "daemon/service/access_guard.h"
#include "daemon/service/fd_channel.h"
#include "daemon/service/peer_table.h"
#include "daemon/service/services.h"
#include "daemon/service/submit_socket.h"
#include "daemon/service/unix_listener.h"
#include "grpcpp/grpcpp.h"

namespace gpukit {

struct ServerOptions {
  std::vector<std::string> listen;  // must not be empty
  std::string version;
  // How often lapsed leases are collected, on the server's Clock; a dead client's memory is
  // free within lease + this.
  absl::Duration reap_interval = absl::Seconds(1);
  // Most threads of gRPC's synchronous server that wait for requests at once (the
  // handlers run on them); gRPC's default is 2. With 2, every gpukit handler costs more
  // than the health-check ping, which gRPC serves on its own callback threads; with 4, on
  // the 2-core build machine, a KeepAlive measured 0.84-0.90x the ping instead of
  // 1.01-1.03x, and RunOp 126 us instead of 161-178 us (docs/notes/rpc_latency.md).
  // Idle pollers cost a thread each and no CPU.
  int sync_server_max_pollers = 4;
  // How TCP addresses are served; unix sockets are not affected. With cert_pem and key_pem,
  // TLS (and with client_ca_pem, client certificates signed by it are required). Without
  // them, Start fails with FAILED_PRECONDITION for a TCP address, unless `insecure` is set
  // and the address is a loopback one (127.0.0.0/8, [::1], localhost); `insecure` with any
  // other address fails too, so bearer tokens never cross a network in clear text.
  struct TcpSecurity {
    std::string cert_pem;
    std::string key_pem;
    std::string client_ca_pem;
    bool insecure = false;
  } tcp;
  // Who may do what (daemon/session/access_policy.h). Null: the default policy with
  // gpukitd's effective uid as the admin uid besides root.
  std::shared_ptr<const AccessPolicy> access_policy;
  // Most threads the synchronous server may have, waiting or running a handler
  // (grpc::ResourceQuota::SetMaxThreads; config key server.maxThreads). A unary request
  // holds one while it runs, also while it waits in its partition's queue; one always waits
  // for requests, so up to max_threads - 1 handlers run at once. A request that finds none
  // free is answered at once, without running, with RESOURCE_EXHAUSTED "Server Threadpool
  // Exhausted" (gRPC's text), which a client may retry. Without a cap, slow clients could
  // make gpukitd start threads without bound. Streams (Upload, Download) and gRPC's health
  // service use the callback API and take none of these. Default 256: far above what the
  // request path needs (a partition runs at most 64 tasks at once by default), far below
  // what strains a host (each thread reserves an 8 MiB stack of address space and uses a
  // few pages of it). Must be >= 2. The same number caps the threads that run streams'
  // chunk transfers (service::WorkerPool), which start only as chunks wait at once, and
  // those that run RunOp, LaunchKernel and KeepAlive (callback methods; beyond the inline
  // ones, see inline_unary_calls), which answer RESOURCE_EXHAUSTED with the same text.
  int max_threads = 256;
  // How long a thread of the streams' WorkerPool waits for work before it ends. A burst of
  // chunks (5000 streams each sending one at once) may start up to max_threads of them; they
  // are gone this long after it.
  absl::Duration stream_worker_idle_timeout = absl::Seconds(2);
  // How many RunOp, LaunchKernel and KeepAlive calls may run at once on gRPC's callback
  // threads (service::InlineUnary): the rest run on the streams' WorkerPool. Default: one per
  // 8 cores, 0 under 8 (service::DefaultInlineUnaryLimit).
  int inline_unary_calls = service::DefaultInlineUnaryLimit();
  // Where every call's method, status code and latency are recorded (an interceptor sees each
  // call of every service); null: none. Must outlive the server.
  RpcMetrics* rpc_metrics = nullptr;
  // Whether to serve the submit socket ("<first unix socket>.submit", submit_socket.h), the
  // fast path of local synchronous clients (config key server.submitSocket).
  bool submit_socket = true;
};

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Start(Core& core, const Clock& clock,
                                                       const ServerOptions& options);
  ~Server();

  // Stops accepting connections and requests, waits up to `grace` for those in flight, then
  // cancels them, and removes the unix socket files. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(5));

  const std::vector<std::string>& addresses() const { return addresses_; }

  // For the service manager's watchdog (daemon/systemd/watchdog.h): one grpc.health.v1 Check
  // through the server itself, on an in-process channel (so neither a socket nor credentials
  // are involved), answered only while gRPC's threads and completion queues run. OK when it
  // answers SERVING within `deadline`; else UNAVAILABLE (or gRPC's code) with gRPC's message.
  // Call between Start and Shutdown only (the watchdog stops before Shutdown).
  absl::Status CheckServing(absl::Duration deadline);

  // Replaces the access policy for requests that start from now on (a configuration
  // reload); open sessions keep their owners. `policy` must not be null. Thread-safe.
  void SetAccessPolicy(std::shared_ptr<const AccessPolicy> policy) {
    guard_.SetPolicy(std::move(policy));
  }

 private:
  Server(Core& core, const Clock& clock, const ServerOptions& options);
  // Expires lapsed leases at `first`, then every `interval`, until Shutdown.
  void ReapLoop(absl::Duration interval, absl::Time first);

  Core& core_;
  std::vector<std::string> addresses_;
  std::vector<std::string> socket_paths_;  // unix sockets to remove at shutdown
  service::PeerTable peers_;               // declared before the listeners that write to it
  // One per unix socket address; they accept until Shutdown.
  std::vector<std::unique_ptr<service::UnixListener>> listeners_;
  service::AccessGuard guard_;
  // Beside the first unix socket ("<path>.fd"); null when gpukitd listens on TCP only.
  std::unique_ptr<FdChannel> fd_channel_;
  // Beside the first unix socket ("<path>.submit"); null when gpukitd listens on TCP only or
  // ServerOptions::submit_socket is off.
  std::unique_ptr<service::SubmitSocket> submit_socket_;
  // The streams' chunk transfers; outlives server_, whose Wait returns once every stream
  // has finished (each stream's last work here finishes it).
  service::WorkerPool stream_workers_;
  service::WorkerPool unary_workers_;  // RunOp, LaunchKernel, KeepAlive beyond the inline ones
  service::SessionServiceImpl session_service_;
  service::ArrayServiceImpl array_service_;
  service::ComputeServiceImpl compute_service_;
  service::AdminServiceImpl admin_service_;
  std::unique_ptr<grpc::Server> server_;
  const Clock& clock_;
  absl::Mutex reaper_mu_;
  bool stop_reaper_ ABSL_GUARDED_BY(reaper_mu_) = false;
  std::thread reaper_;
};

// For a "unix:///path" address: creates the socket's directory if missing (mode 0755, or
// 0700 under /tmp) and removes a stale socket file left by a daemon that died. Fails with
// FAILED_PRECONDITION if another process is listening there. Returns the path ("" for
// TCP addresses).
absl::StatusOr<std::string> PrepareUnixSocket(absl::string_view address);

// Whether a "host:port" address is a loopback one: 127.0.0.0/8, [::1] or localhost.
bool IsLoopbackAddress(absl::string_view address);

}  // namespace gpukit

#endif  // GPUKIT_DAEMON_SERVER_H_
