#include "daemon/service/submit_socket.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/service/convert.h"
#include "daemon/service/submit_session.h"
#include "daemon/service/unix_listener.h"
#include "gpukit/v1/compute.pb.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/thread_name.h"
#include "runtime/executor/spin_wait.h"
#include "spdlog/spdlog.h"
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>

namespace gpukit::service {

namespace {

// Connections that poll for their next request at once: one per 4 cores on hosts that spin
// at all (4 on 16 cores), none on small hosts.
SpinSlots& PollSlots() {
  static SpinSlots slots(SpinSlots::PerCores(4));
  return slots;
}

// Reads the next request into `request`. While `activity` is Recent() it polls the socket
// without sleeping (a synchronous client's next request follows its reply within
// microseconds); otherwise it sleeps in recvmsg. OK, or the end: UNAVAILABLE when the client
// closed its end, INVALID_ARGUMENT for a datagram that is too long, carries a descriptor or
// does not parse.
absl::Status ReceiveRequest(int socket, char* buffer, size_t capacity,
                            const RecentActivity& activity, v1::SubmitRequest& request) {
  absl::StatusOr<ReceivedInto> received =
      ReceiveMessageInto(socket, buffer, capacity, /*wait=*/false);
  // Polls only with one of a few slots, so that many busy sessions cost gpukitd a few cores,
  // not one each; the others sleep in recvmsg.
  if (absl::IsDeadlineExceeded(received.status()) && activity.Recent() &&
      PollSlots().TryAcquire()) {
    while (absl::IsDeadlineExceeded(received.status()) && activity.Recent()) {
      for (int i = 0; i < 32; ++i) CpuRelax();
      received = ReceiveMessageInto(socket, buffer, capacity, /*wait=*/false);
    }
    PollSlots().Release();
  }
  if (absl::IsDeadlineExceeded(received.status())) {
    received = ReceiveMessageInto(socket, buffer, capacity, /*wait=*/true);
  }
  if (!received.ok()) {
    if (absl::IsUnavailable(received.status())) return received.status();
    return absl::InvalidArgumentError(
        absl::StrCat("the submit socket takes SubmitRequest datagrams of at most ",
                     kMaxSubmitSocketMessageBytes, " bytes: ", received.status().message()));
  }
  if (received->fd.valid()) {
    return absl::InvalidArgumentError("the submit socket takes no descriptors");
  }
  if (!request.ParseFromArray(buffer, static_cast<int>(received->bytes))) {
    return absl::InvalidArgumentError(
        absl::StrCat("a datagram of ", received->bytes, " bytes is not a SubmitRequest"));
  }
  return absl::OkStatus();
}

absl::Status SendWhole(int socket, const v1::SubmitResponse& response, std::string& bytes) {
  bytes.clear();
  response.SerializeToString(&bytes);
  return SendMessage(socket, bytes.data(), bytes.size());
}

// Sends `response`, split into datagrams of at most kMaxSubmitSocketMessageBytes: the
// results in order, `synced` and `error` with the last. UNAVAILABLE once the client is gone.
absl::Status SendResponse(int socket, v1::SubmitResponse& response, std::string& bytes) {
  if (response.ByteSizeLong() <= kMaxSubmitSocketMessageBytes) {
    return SendWhole(socket, response, bytes);
  }
  // A part's results stay well under the limit (an OpResult's message is capped far below).
  constexpr size_t kPartBytes = kMaxSubmitSocketMessageBytes / 2;
  v1::SubmitResponse part;
  for (v1::OpResult& result : *response.mutable_results()) {
    if (part.results_size() > 0 && part.ByteSizeLong() + result.ByteSizeLong() > kPartBytes) {
      GPUKIT_RETURN_IF_ERROR(SendWhole(socket, part, bytes));
      part.clear_results();
    }
    part.add_results()->Swap(&result);
  }
  part.set_synced(response.synced());
  if (response.has_error()) part.mutable_error()->Swap(response.mutable_error());
  return SendWhole(socket, part, bytes);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SubmitSocket>> SubmitSocket::Start(std::string path, Core& core,
                                                                  const AccessGuard& guard,
                                                                  SubmitSocketOptions options) {
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("submit socket max_connections = ", options.max_connections, " must be >= 1"));
  }
  GPUKIT_ASSIGN_OR_RETURN(ScopedFd listening, ListenUnixSocket(path, 64));
  ScopedFd wake(::eventfd(0, EFD_CLOEXEC));
  ScopedFd reap(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid() || !reap.valid()) return absl::InternalError("eventfd failed");
  std::unique_ptr<SubmitSocket> socket(new SubmitSocket(std::move(path), std::move(listening),
                                                        std::move(wake), std::move(reap), core,
                                                        guard, options));
  socket->acceptor_ = std::thread([raw = socket.get()] {
    NameThisThread("gk-sock-accept");
    raw->AcceptLoop();
  });
  spdlog::info("submit socket on {} (at most {} connections, {} per uid)", socket->path_,
               socket->max_connections_, socket->max_connections_per_uid_);
  return socket;
}

namespace {

// A quarter of the descriptors gpukitd may open (RLIMIT_NOFILE's soft limit), so that the
// socket's connections never starve the gRPC socket, the descriptor channel and the devices.
int ConnectionsWithinDescriptorLimit(int wanted) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return wanted;
  return std::max(1, std::min(wanted, static_cast<int>(limit.rlim_cur / 4)));
}

}  // namespace

SubmitSocket::SubmitSocket(std::string path, ScopedFd listening, ScopedFd wake, ScopedFd reap,
                           Core& core, const AccessGuard& guard, SubmitSocketOptions options)
    : path_(std::move(path)),
      listening_(std::move(listening)),
      wake_(std::move(wake)),
      reap_(std::move(reap)),
      core_(core),
      guard_(guard),
      options_(options),
      max_connections_(ConnectionsWithinDescriptorLimit(options.max_connections)),
      max_connections_per_uid_(std::max(1, max_connections_ / 4)) {}

SubmitSocket::~SubmitSocket() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof(one)) != sizeof(one)) {
    spdlog::warn("submit socket: cannot wake its accept thread");
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::list<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    stopping_.store(true, std::memory_order_release);
    connections.swap(connections_);
  }
  // A connection's thread waits in recvmsg or sendmsg, or for the device: shutdown ends the
  // first two at once, and the device's work ends by itself.
  for (const auto& connection : connections) ::shutdown(connection->socket.get(), SHUT_RDWR);
  for (const auto& connection : connections) {
    if (connection->thread.joinable()) connection->thread.join();
  }
  ::unlink(path_.c_str());
}

void SubmitSocket::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done.load(std::memory_order_acquire)) {
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void SubmitSocket::AcceptLoop() {
  pollfd fds[3] = {
      {listening_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}, {reap_.get(), POLLIN, 0}};
  for (;;) {
    fds[0].revents = fds[1].revents = fds[2].revents = 0;
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("submit socket: poll failed ({}); it accepts no more", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[2].revents != 0) {
      // Connections ended: their threads are joined and their descriptors closed now, not at
      // the next accept (which may never come while descriptors run out).
      uint64_t ended = 0;
      [[maybe_unused]] const ssize_t n = ::read(reap_.get(), &ended, sizeof(ended));
      absl::MutexLock lock(&mu_);
      ReapLocked();
    }
    if (fds[0].revents != 0) Accept();
  }
}

void SubmitSocket::Accept() {
  ScopedFd socket(::accept4(listening_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!socket.valid()) {
    if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) return;
    // Out of descriptors or memory: the connection stays in the backlog. Wait a little (or
    // for the stop) instead of spinning on it.
    spdlog::warn("submit socket: cannot accept a connection: {}", std::strerror(errno));
    pollfd stop = {wake_.get(), POLLIN, 0};
    ::poll(&stop, 1, 100);
    return;
  }
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (::getsockopt(socket.get(), SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
    spdlog::warn("submit socket: refusing a connection without peer credentials: {}",
                 std::strerror(errno));
    return;
  }
  absl::MutexLock lock(&mu_);
  ReapLocked();
  int of_uid = 0;
  for (const auto& connection : connections_) of_uid += connection->peer.uid == cred.uid ? 1 : 0;
  if (static_cast<int>(connections_.size()) >= max_connections_ ||
      of_uid >= max_connections_per_uid_) {
    spdlog::warn(
        "submit socket: {} connections open, {} of uid {}; refusing one from pid {} "
        "(it uses gRPC instead)",
        connections_.size(), of_uid, cred.uid, cred.pid);
    return;  // closed
  }
  auto connection = std::make_unique<Connection>();
  connection->peer = Principal::Local(cred.uid, cred.gid, cred.pid, PeerGroups(socket.get()));
  connection->socket = std::move(socket);
  Connection& raw = *connection;
  connections_.push_back(std::move(connection));
  try {
    raw.thread = std::thread([this, &raw] {
      NameThisThread("gk-sock-conn");
      Serve(raw);
      raw.done.store(true, std::memory_order_release);
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(reap_.get(), &one, sizeof(one));
    });
  } catch (const std::system_error& e) {
    // No thread to be had (a pids cgroup, RLIMIT_NPROC, address space): this connection is
    // refused, gpukitd goes on.
    spdlog::warn("submit socket: no thread for a connection from pid {}: {}", cred.pid, e.what());
    connections_.pop_back();
  }
}

void SubmitSocket::Serve(Connection& connection) {
  const int socket = connection.socket.get();
  // Polls for the next request while the last message either way is recent: what a
  // synchronous client sends next follows its reply by its own cycle (the executor channel's
  // window, ChannelSpinTime; none on small hosts).
  RecentActivity activity;
  // An op waiting for admission gives up when gpukitd stops or the client hangs up (as a
  // cancelled gRPC call's does); the scheduler asks every few milliseconds.
  auto cancelled = [this, socket] {
    if (stopping_.load(std::memory_order_acquire)) return true;
    pollfd hangup = {socket, POLLRDHUP, 0};
    return ::poll(&hangup, 1, 0) > 0 && (hangup.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  };
  SubmitSession session(
      core_,
      [this, &connection](absl::string_view session_id) {
        return guard_.CheckSessionOf(connection.peer, session_id);
      },
      /*context=*/nullptr, cancelled);
  // A connection that names no session in time is closed: an idle one would hold a thread and
  // a descriptor of gpukitd's for nothing.
  pollfd first = {socket, POLLIN, 0};
  if (::poll(&first, 1, static_cast<int>(absl::ToInt64Milliseconds(kFirstRequestTimeout))) <= 0) {
    spdlog::debug("submit socket: pid {} sent nothing in {}; closed", connection.peer.pid,
                  absl::FormatDuration(kFirstRequestTimeout));
    ::shutdown(socket, SHUT_RDWR);
    return;
  }
  std::unique_ptr<char[]> buffer(new char[kMaxSubmitSocketMessageBytes + 1]);
  std::string bytes;  // a response's serialization
  bool client_gone = false;
  auto send = [&](v1::SubmitResponse response) {
    if (client_gone) return;
    client_gone = !SendResponse(socket, response, bytes).ok();
  };
  v1::SubmitRequest request;
  v1::SubmitResponse response;
  absl::Status end;
  for (;;) {
    // Work is held while more requests wait: their ops go to a device executor together.
    pollfd readable = {socket, POLLIN, 0};
    if (::poll(&readable, 1, 0) == 0) session.EndBurst();
    request.Clear();
    end = ReceiveRequest(socket, buffer.get(), kMaxSubmitSocketMessageBytes + 1, activity, request);
    if (!end.ok()) break;
    const absl::Time read_at = absl::Now();
    absl::StatusOr<bool> answer = session.Answer(request, response, send);
    // Counted before the answer goes out, so a client that reads /metrics after its answer
    // sees it; a request that gets no answer (the stream's opening) is not counted.
    if (options_.metrics != nullptr && (!answer.ok() || *answer)) {
      options_.metrics->Record(kSubmitSocketMethod, static_cast<int>(answer.status().code()),
                               absl::Now() - read_at);
    }
    if (!answer.ok()) {
      end = answer.status();
      break;
    }
    if (*answer) {
      send(std::move(response));
      // The client's next request follows this answer within its cycle: poll for it.
      activity.Touch();
    }
    if (client_gone) break;
  }
  const std::string session_id = session.session_id();
  session.Close();
  if (absl::IsUnavailable(end) || client_gone) {
    spdlog::debug("submit socket: pid {} closed its stream (session {})", connection.peer.pid,
                  session_id);
  } else {
    spdlog::debug("submit socket: the stream of pid {} ends: {}", connection.peer.pid,
                  end.ToString());
    v1::SubmitResponse last;
    ToProto(end, last.mutable_ended());
    send(std::move(last));
  }
  ::shutdown(socket, SHUT_RDWR);
}

}  // namespace gpukit::service
