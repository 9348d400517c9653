#include "runtime/base/unix_fd.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

namespace gpukit {
namespace {

constexpr size_t kMaxMessageBytes = 64 * 1024;

absl::Status ErrnoStatus(absl::string_view call, int error) {
  const std::string text = absl::StrCat(call, ": ", std::strerror(error));
  switch (error) {
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case ENOSPC:
      return absl::ResourceExhaustedError(text);
    case ENOENT:
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
      return absl::UnavailableError(text);
    case EINVAL:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(text);
    default:
      return absl::InternalError(text);
  }
}

absl::StatusOr<sockaddr_un> UnixAddress(absl::string_view path) {
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("unix socket path \"", path, "\" is empty or ",
                                                   "longer than ", sizeof(address.sun_path) - 1,
                                                   " bytes"));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

}  // namespace

void ScopedFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

absl::Status SendMessage(int socket, const void* bytes, size_t size, int fd) {
  if (size == 0 || size > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("message of ", size, " bytes"));
  }
  iovec iov = {const_cast<void*>(bytes), size};
  msghdr message = {};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  }
  for (;;) {
    const ssize_t sent = ::sendmsg(socket, &message, MSG_NOSIGNAL);
    if (sent >= 0) {
      if (static_cast<size_t>(sent) != size) {
        return absl::InternalError(absl::StrCat("sendmsg sent ", sent, " of ", size, " bytes"));
      }
      return absl::OkStatus();
    }
    if (errno != EINTR) return ErrnoStatus("sendmsg", errno);
  }
}

absl::StatusOr<ReceivedMessage> ReceiveMessage(int socket, size_t max_bytes,
                                               absl::Duration timeout) {
  if (max_bytes == 0 || max_bytes > kMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("message of up to ", max_bytes, " bytes"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (; timeout != absl::InfiniteDuration();) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms < 0) return absl::DeadlineExceededError("no message in time");
    pollfd waiting = {socket, POLLIN, 0};
    const int ready = ::poll(&waiting, 1, static_cast<int>(std::min<int64_t>(left_ms, 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return ErrnoStatus("poll", errno);
    if (ready == 0) return absl::DeadlineExceededError("no message in time");
    break;
  }
  // Into the thread's own buffer, then only what came into the message: making the message
  // max_bytes long first (tens of KiB, zero-filled, then cut) cost more than the receive.
  thread_local std::vector<char> scratch;
  if (scratch.size() < max_bytes) scratch.resize(max_bytes);
  GPUKIT_ASSIGN_OR_RETURN(ReceivedInto into,
                          ReceiveMessageInto(socket, scratch.data(), max_bytes, true));
  ReceivedMessage received;
  received.bytes.assign(scratch.data(), into.bytes);
  received.fd = std::move(into.fd);
  return received;
}

absl::StatusOr<ReceivedInto> ReceiveMessageInto(int socket, char* buffer, size_t capacity,
                                                bool wait) {
  ReceivedInto received;
  iovec iov = {buffer, capacity};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr message = {};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC | (wait ? 0 : MSG_DONTWAIT));
  } while (got < 0 && errno == EINTR);
  if (got < 0 && !wait && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    return absl::DeadlineExceededError("no message waiting");
  }
  if (got < 0) return ErrnoStatus("recvmsg", errno);
  // Take every descriptor that came, so none leaks whatever the message says.
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      if (!received.fd.valid()) {
        received.fd.Reset(fd);
      } else {
        ::close(fd);
      }
    }
  }
  if (got == 0) return absl::UnavailableError("the peer closed the connection");
  if ((message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("message longer than ", capacity, " bytes or with too many descriptors"));
  }
  received.bytes = static_cast<size_t>(got);
  return received;
}

absl::StatusOr<ScopedFd> ConnectUnixSocket(absl::string_view path, bool wait_for_room) {
  absl::StatusOr<sockaddr_un> address = UnixAddress(path);
  if (!address.ok()) return address.status();
  ScopedFd socket(
      ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | (wait_for_room ? 0 : SOCK_NONBLOCK), 0));
  if (!socket.valid()) return ErrnoStatus("socket", errno);
  if (::connect(socket.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) !=
      0) {
    return ErrnoStatus(absl::StrCat("connect(", path, ")"), errno);
  }
  if (!wait_for_room) {  // blocking from here on, as the other sockets
    const int flags = ::fcntl(socket.get(), F_GETFL);
    if (flags < 0 || ::fcntl(socket.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
      return ErrnoStatus("fcntl", errno);
    }
  }
  return socket;
}

absl::StatusOr<ScopedFd> ListenUnixSocket(absl::string_view path, int backlog) {
  absl::StatusOr<sockaddr_un> address = UnixAddress(path);
  if (!address.ok()) return address.status();
  ScopedFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!socket.valid()) return ErrnoStatus("socket", errno);
  ::unlink(std::string(path).c_str());
  if (::bind(socket.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof(*address)) != 0) {
    return ErrnoStatus(absl::StrCat("bind(", path, ")"), errno);
  }
  if (::listen(socket.get(), backlog) != 0) return ErrnoStatus("listen", errno);
  return socket;
}

absl::StatusOr<ScopedFd> CreateSharedMemory(absl::string_view name, int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("shared memory of ", bytes));
  ScopedFd fd(::memfd_create(std::string(name).c_str(), MFD_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("memfd_create", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return ErrnoStatus("ftruncate", errno);
  }
  return fd;
}

absl::StatusOr<int64_t> FileBytes(int fd) {
  struct stat info = {};
  if (::fstat(fd, &info) != 0) return ErrnoStatus("fstat", errno);
  return static_cast<int64_t>(info.st_size);
}

}  // namespace gpukit
