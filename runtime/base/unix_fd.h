// File descriptors: an owning wrapper, and messages that carry one across a unix socket.
//
// gpukitd and its clients pass memory between processes as file descriptors (a memfd of host
// shared memory, a VMM allocation exported by the CUDA driver) over a unix socket, with
// SCM_RIGHTS: the receiving process gets its own descriptor of the same open file. These
// helpers do that for small messages, one descriptor at most per message, over SOCK_SEQPACKET
// sockets, which keep each message whole (a stream socket would not say where one ends).
//
//   GPUKIT_ASSIGN_OR_RETURN(ScopedFd memory, CreateSharedMemory("upload", bytes));
//   GPUKIT_RETURN_IF_ERROR(SendMessage(socket.get(), header, sizeof(header), memory.get()));
//   GPUKIT_ASSIGN_OR_RETURN(ReceivedMessage reply, ReceiveMessage(socket.get(), 64, timeout));
//
// Thread safety: functions are thread-safe; a ScopedFd is a value.
#ifndef GPUKIT_RUNTIME_BASE_UNIX_FD_H_
#define GPUKIT_RUNTIME_BASE_UNIX_FD_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gpukit {

// Owns a file descriptor and closes it. -1 holds nothing.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A message read from a socket, and the descriptor that came with it (if any).
struct ReceivedMessage {
  std::string bytes;
  ScopedFd fd;
};

// Sends `bytes` (at most 64 KiB) as one message, with `fd` attached when it is >= 0.
absl::Status SendMessage(int socket, const void* bytes, size_t size, int fd = -1);
// Receives one message of at most `max_bytes`, waiting at most `timeout` (forever when it is
// absl::InfiniteDuration()). DEADLINE_EXCEEDED
// when nothing comes in time, UNAVAILABLE when the peer closed the connection. Descriptors
// beyond the first that a peer attached are closed. Costs a copy of the message out of a
// buffer of max_bytes that each calling thread keeps (the largest it asked for) until it ends.
absl::StatusOr<ReceivedMessage> ReceiveMessage(int socket, size_t max_bytes,
                                               absl::Duration timeout);

// What ReceiveMessageInto read: the message's size (its bytes are at the buffer's start) and
// the descriptor that came with it (if any).
struct ReceivedInto {
  size_t bytes = 0;
  ScopedFd fd;
};
// Receives one message into `buffer` (at most `capacity` bytes), for a reader that keeps one
// buffer for every message. With `wait` it sleeps until a message comes; without, it returns
// at once: DEADLINE_EXCEEDED when none is waiting. Other errors as ReceiveMessage's.
absl::StatusOr<ReceivedInto> ReceiveMessageInto(int socket, char* buffer, size_t capacity,
                                                bool wait);

// A unix SOCK_SEQPACKET socket connected to `path`. UNAVAILABLE when nothing listens there.
// Without `wait_for_room`, a listener whose backlog is full fails the connect at once
// (UNAVAILABLE) instead of making it wait until the listener accepts.
absl::StatusOr<ScopedFd> ConnectUnixSocket(absl::string_view path, bool wait_for_room = true);
// A unix SOCK_SEQPACKET socket listening at `path` (an old socket file there is replaced).
absl::StatusOr<ScopedFd> ListenUnixSocket(absl::string_view path, int backlog);

// An anonymous shared memory file of `bytes` (memfd_create, close-on-exec), named `name` for
// /proc's listings. RESOURCE_EXHAUSTED when the system cannot provide it.
absl::StatusOr<ScopedFd> CreateSharedMemory(absl::string_view name, int64_t bytes);
// The size of the file behind `fd` (fstat).
absl::StatusOr<int64_t> FileBytes(int fd);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_UNIX_FD_H_
