#include "daemon/server.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/metrics/rpc_interceptor.h"
#include "daemon/service/convert.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

namespace gpukit {

absl::StatusOr<std::string> PrepareUnixSocket(absl::string_view address) {
  if (!absl::StartsWith(address, "unix://")) return std::string();
  const std::string path(address.substr(7));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!std::filesystem::exists(dir, error)) {
    std::filesystem::create_directories(dir, error);
    if (error) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create socket directory ", dir.string(), ": ", error.message()));
    }
    chmod(dir.c_str(), absl::StartsWith(dir.string(), "/tmp/") ? 0700 : 0755);
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return path;  // nothing there
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket; refusing to replace it"));
  }
  // A socket file: live if someone accepts a connection on it.
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof(sa.sun_path) - 1);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  close(fd);
  if (live) {
    return absl::FailedPreconditionError(
        absl::StrCat("another process is listening on ", path, " (is gpukitd running?)"));
  }
  spdlog::info("removing stale socket {}", path);
  unlink(path.c_str());
  return path;
}

bool IsLoopbackAddress(absl::string_view address) {
  const absl::string_view host = address.substr(0, address.rfind(':'));
  return host == "localhost" || host == "[::1]" || absl::StartsWith(host, "127.");
}

namespace {

// The credentials for the TCP address `address`, or why it may not be served.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(
    absl::string_view address, const ServerOptions::TcpSecurity& tcp) {
  if (!tcp.cert_pem.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        tcp.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                  : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = tcp.client_ca_pem;
    ssl.pem_key_cert_pairs.push_back({tcp.key_pem, tcp.cert_pem});
    spdlog::info("TLS on {}{}", std::string(address),
                 tcp.client_ca_pem.empty() ? "" : ", client certificates required");
    return grpc::SslServerCredentials(ssl);
  }
  if (!tcp.insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "listen address ", address,
        " is TCP: set access.tls (certFile, keyFile) to serve it with TLS, or for a loopback "
        "address in tests --insecure-tcp (access.insecureTcp)"));
  }
  if (!IsLoopbackAddress(address)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--insecure-tcp (access.insecureTcp) serves loopback addresses only, not ", address,
        ": bearer tokens would cross the network in clear text; set access.tls"));
  }
  spdlog::warn("TCP address {} is served WITHOUT TLS (--insecure-tcp): for tests on this host only",
               std::string(address));
  return grpc::InsecureServerCredentials();
}

}  // namespace

Server::Server(Core& core, const Clock& clock, const ServerOptions& options)
    : core_(core),
      guard_(core, peers_,
             options.access_policy != nullptr
                 ? options.access_policy
                 : std::make_shared<const AccessPolicy>(static_cast<uint32_t>(geteuid()))),
      stream_workers_(options.max_threads, options.stream_worker_idle_timeout),
      unary_workers_(options.max_threads, options.stream_worker_idle_timeout),
      session_service_(core, guard_, unary_workers_, options.inline_unary_calls),
      array_service_(core, guard_, stream_workers_),
      compute_service_(core, guard_, unary_workers_, options.inline_unary_calls),
      admin_service_(core, guard_, clock,
                     service::AdminFacts{options.version, clock.Now(), options.listen}),
      clock_(clock) {}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(Core& core, const Clock& clock,
                                                      const ServerOptions& options) {
  if (options.listen.empty()) return absl::InvalidArgumentError("no listen address");
  if (options.max_threads < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.maxThreads = ", options.max_threads,
                     " must be >= 2: one thread waits for requests while the others run them"));
  }
  std::unique_ptr<Server> server(new Server(core, clock, options));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS, options.sync_server_max_pollers);
  grpc::ResourceQuota quota("gpukitd");
  quota.SetMaxThreads(options.max_threads);
  builder.SetResourceQuota(quota);
  if (options.rpc_metrics != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::make_unique<RpcMetricsInterceptorFactory>(*options.rpc_metrics));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  std::vector<int> ports(options.listen.size(), 0);
  for (size_t i = 0; i < options.listen.size(); ++i) {
    absl::StatusOr<std::string> path = PrepareUnixSocket(options.listen[i]);
    if (!path.ok()) return path.status();
    if (path->empty()) {
      absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
          TcpCredentials(options.listen[i], options.tcp);
      if (!credentials.ok()) return credentials.status();
      builder.AddListeningPort(options.listen[i], *credentials, &ports[i]);
      continue;
    }
    // Our own accept loop, for the peer's credentials (see the top of server.h).
    absl::StatusOr<std::unique_ptr<service::UnixListener>> listener =
        service::UnixListener::Bind(*path);
    if (!listener.ok()) return listener.status();
    server->socket_paths_.push_back(*path);
    server->listeners_.push_back(*std::move(listener));
  }
  if (!server->socket_paths_.empty()) {
    absl::StatusOr<std::unique_ptr<FdChannel>> channel = FdChannel::Start(
        server->socket_paths_.front() + ".fd",
        [&core](absl::string_view token, ScopedFd fd) {
          return core.DeliverDescriptor(token, std::move(fd));
        },
        [&core](absl::string_view token) { return core.FetchExport(token); });
    if (channel.ok()) {
      server->fd_channel_ = *std::move(channel);
      server->array_service_.set_fd_channel(server->fd_channel_->path());
    } else {
      spdlog::warn("no descriptor channel, so no host shared memory: {}",
                   std::string(channel.status().message()));
    }
  }
  if (!server->socket_paths_.empty() && options.submit_socket) {
    absl::StatusOr<std::unique_ptr<service::SubmitSocket>> submit = service::SubmitSocket::Start(
        server->socket_paths_.front() + ".submit", core, server->guard_,
        service::SubmitSocketOptions{.metrics = options.rpc_metrics});
    if (submit.ok()) {
      server->submit_socket_ = *std::move(submit);
      server->session_service_.set_submit_socket(server->submit_socket_->path());
    } else {
      spdlog::warn("no submit socket, so local clients submit over gRPC: {}",
                   std::string(submit.status().message()));
    }
  }
  builder.RegisterService(&server->session_service_);
  builder.RegisterService(&server->array_service_);
  builder.RegisterService(&server->compute_service_);
  builder.RegisterService(&server->admin_service_);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen on every address of ",
                                               absl::StrJoin(options.listen, ", "),
                                               " (in use, or no permission)"));
  }
  for (const auto& listener : server->listeners_) {
    listener->Start(*server->server_, server->peers_);
  }
  for (size_t i = 0; i < options.listen.size(); ++i) {
    const std::string& address = options.listen[i];
    if (absl::StartsWith(address, "unix://")) {
      server->addresses_.push_back(address);
    } else {
      // Report the bound port, which differs from the request for "host:0".
      server->addresses_.push_back(
          absl::StrCat(address.substr(0, address.rfind(':')), ":", ports[i]));
    }
    spdlog::info("listening on {}", server->addresses_.back());
  }
  const std::shared_ptr<const AccessPolicy> policy = server->guard_.policy();
  spdlog::info(
      "sessions belong to their opener; admins: local callers with uid 0 or {}{}; tenants: {}",
      policy->daemon_uid(), policy->configured() ? " and those access names" : "",
      policy->configured() ? "from access, else uid-<uid>" : "uid-<uid> for each local uid");
  // The first reap's time is fixed here, not when the thread first runs: a clock that moves
  // past it before then (a test's FakeClock) still finds the reaper due.
  server->reaper_ = std::thread(
      [s = server.get(), interval = options.reap_interval,
       first = server->clock_.Now() + options.reap_interval] { s->ReapLoop(interval, first); });
  return server;
}

absl::Status Server::CheckServing(absl::Duration deadline) {
  if (server_ == nullptr) return absl::UnavailableError("the gRPC server is not running");
  grpc::GenericStub stub(server_->InProcessChannel(grpc::ChannelArguments()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(deadline));
  grpc::CompletionQueue cq;
  grpc::ByteBuffer response;
  grpc::Status status;
  // An empty HealthCheckRequest (service "": the whole server) is zero bytes.
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  call->Finish(&response, &status, &cq);
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);  // the call's deadline bounds it
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("health check: ", status.error_message()));
  }
  // HealthCheckResponse{status: SERVING (1)} is field 1, varint 1.
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  if (bytes != std::string("\x08\x01", 2)) {
    return absl::UnavailableError("health check: the server does not answer SERVING");
  }
  return absl::OkStatus();
}

void Server::ReapLoop(absl::Duration interval, absl::Time first) {
  for (absl::Time next = first;
       !clock_.AwaitUntil(reaper_mu_, absl::Condition(&stop_reaper_), next);
       next = clock_.Now() + interval) {
    core_.ExpireLeases();
  }
}

void Server::Shutdown(absl::Duration grace) {
  // No connection may be handed to the server once it shuts down; the submit socket's
  // connections end now too (an op of theirs waiting for admission is cancelled).
  for (const auto& listener : listeners_) listener->Stop();
  submit_socket_.reset();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
    server_->Wait();
    server_.reset();
  }
  {
    absl::MutexLock lock(&reaper_mu_);
    stop_reaper_ = true;
  }
  if (reaper_.joinable()) reaper_.join();
  fd_channel_.reset();
  for (const std::string& path : socket_paths_) unlink(path.c_str());
  socket_paths_.clear();
}

Server::~Server() { Shutdown(absl::ZeroDuration()); }

}  // namespace gpukit
