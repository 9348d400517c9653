#include "daemon/service/unix_listener.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/server_posix.h"
#include "runtime/base/thread_name.h"
#include "spdlog/spdlog.h"
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>

namespace gpukit::service {
namespace {

absl::Status SystemError(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

std::vector<uint32_t> PeerGroups(int fd, size_t initial_capacity) {
  std::vector<gid_t> groups(initial_capacity);
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t length = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length) == 0) {
      groups.resize(length / sizeof(gid_t));
      return std::vector<uint32_t>(groups.begin(), groups.end());
    }
    if (errno != ERANGE) break;
    // The kernel said how much room it needs; the groups were fixed at connect, so the second
    // try fits.
    groups.resize(length / sizeof(gid_t));
  }
  return {};
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(const std::string& path) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("unix socket path \"", path, "\" is ",
                                                   path.size(), " bytes long; it must be 1 to ",
                                                   sizeof(address.sun_path) - 1));
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  // Non-blocking: a connection reset between poll and accept must not block the thread, and
  // gRPC's transport requires its connections non-blocking (a blocking one stalls gRPC's
  // poller before the HTTP/2 handshake: the client times out waiting for SETTINGS).
  ScopedFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return SystemError("cannot create a socket for", path);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return SystemError("cannot bind", path);
  }
  if (listen(fd.get(), SOMAXCONN) != 0) return SystemError("cannot listen on", path);
  ScopedFd stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop.valid()) return SystemError("cannot create an eventfd for", path);
  return std::unique_ptr<UnixListener>(new UnixListener(path, std::move(fd), std::move(stop)));
}

UnixListener::UnixListener(std::string path, ScopedFd listen_fd, ScopedFd stop_fd)
    : path_(std::move(path)), listen_fd_(std::move(listen_fd)), stop_fd_(std::move(stop_fd)) {}

UnixListener::~UnixListener() { Stop(); }

void UnixListener::Start(grpc::Server& server, PeerTable& peers) {
  thread_ = std::thread([this, s = &server, p = &peers] {
    NameThisThread("gk-listen");
    AcceptLoop(s, p);
  });
}

void UnixListener::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (write(stop_fd_.get(), &one, sizeof(one)) != sizeof(one)) {
      spdlog::error("cannot wake the accept thread of {}: {}", path_, std::strerror(errno));
    }
    thread_.join();
  }
  listen_fd_.Reset();
}

void UnixListener::AcceptLoop(grpc::Server* server, PeerTable* peers) {
  pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
  while (true) {
    fds[0].revents = fds[1].revents = 0;
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("accept loop of {} ends: poll: {}", path_, std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;  // Stop
    if (fds[0].revents == 0) continue;
    const int fd = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      // Out of descriptors (EMFILE, ENFILE) or memory: the connection stays in the backlog,
      // so poll would report it again at once. Wait a little (or for Stop) instead of spinning.
      spdlog::warn("cannot accept a connection on {}: {}", path_, std::strerror(errno));
      pollfd stop = {stop_fd_.get(), POLLIN, 0};
      if (poll(&stop, 1, 100) > 0) return;
      continue;
    }
    ucred cred{};
    socklen_t length = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
      spdlog::warn("refusing a connection on {}: no peer credentials: {}", path_,
                   std::strerror(errno));
      close(fd);
      continue;
    }
    // Recorded before gRPC sees the descriptor, so no request on it can run unrecorded. The
    // number was free until accept4 returned it, so no live connection's entry is replaced.
    peers->Record(fd, Principal::Local(cred.uid, cred.gid, cred.pid, PeerGroups(fd)));
    spdlog::debug("connection on {}: fd={} uid={} gid={} pid={}", path_, fd, cred.uid, cred.gid,
                  cred.pid);
    grpc::AddInsecureChannelFromFd(server, fd);  // the transport owns fd from here
  }
}

}  // namespace gpukit::service
