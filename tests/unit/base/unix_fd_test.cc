// Passing file descriptors over unix sockets, and the shared memory they carry.
#include "runtime/base/unix_fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include <sys/mman.h>
#include <sys/socket.h>

namespace gpukit {
namespace {

using ::gpukit::testing::IsOk;
using ::gpukit::testing::StatusIs;

struct SocketPair {
  SocketPair() {
    int fds[2] = {-1, -1};
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    a.Reset(fds[0]);
    b.Reset(fds[1]);
  }
  ScopedFd a, b;
};

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(UnixFdTest, ScopedFdClosesWhatItOwnsOnceAndMovesOwnership) {
  SocketPair pair;
  const int raw = pair.a.get();
  ScopedFd moved = std::move(pair.a);
  EXPECT_FALSE(pair.a.valid());
  EXPECT_TRUE(IsOpen(raw));
  moved.Reset();
  EXPECT_FALSE(IsOpen(raw));
}

TEST(UnixFdTest, SharedMemorySentOverASocketIsTheSameMemoryOnTheOtherSide) {
  SocketPair pair;
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd memory, CreateSharedMemory("test", 1 << 20));
  EXPECT_THAT(FileBytes(memory.get()), ::gpukit::testing::IsOkAndHolds(1 << 20));
  const char hello[] = "take this";
  GPUKIT_ASSERT_OK(SendMessage(pair.a.get(), hello, sizeof(hello), memory.get()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ReceivedMessage got,
                              ReceiveMessage(pair.b.get(), 64, absl::Seconds(5)));
  EXPECT_EQ(got.bytes, std::string(hello, sizeof(hello)));
  ASSERT_TRUE(got.fd.valid());
  EXPECT_NE(got.fd.get(), memory.get());
  void* mine = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, memory.get(), 0);
  void* theirs = ::mmap(nullptr, 1 << 20, PROT_READ, MAP_SHARED, got.fd.get(), 0);
  ASSERT_NE(mine, MAP_FAILED);
  ASSERT_NE(theirs, MAP_FAILED);
  std::memcpy(static_cast<char*>(mine) + 12345, "written here", 12);
  EXPECT_EQ(std::memcmp(static_cast<char*>(theirs) + 12345, "written here", 12), 0);
  ::munmap(mine, 1 << 20);
  ::munmap(theirs, 1 << 20);
}

TEST(UnixFdTest, MessageWithoutADescriptorArrivesWithNone) {
  SocketPair pair;
  GPUKIT_ASSERT_OK(SendMessage(pair.a.get(), "x", 1));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ReceivedMessage got,
                              ReceiveMessage(pair.b.get(), 8, absl::Seconds(5)));
  EXPECT_EQ(got.bytes, "x");
  EXPECT_FALSE(got.fd.valid());
}

TEST(UnixFdTest, ReceiveReportsTimeoutsClosedPeersAndOversizedMessages) {
  SocketPair pair;
  EXPECT_THAT(ReceiveMessage(pair.b.get(), 8, absl::Milliseconds(20)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  GPUKIT_ASSERT_OK(SendMessage(pair.a.get(), "0123456789", 10));
  EXPECT_THAT(ReceiveMessage(pair.b.get(), 4, absl::Seconds(5)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  pair.a.Reset();
  EXPECT_THAT(ReceiveMessage(pair.b.get(), 8, absl::Seconds(5)).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(SendMessage(pair.b.get(), "", 0), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(UnixFdTest, ReceiveIntoABufferWaitsOrAnswersAtOnce) {
  SocketPair pair;
  char buffer[16];
  // Without waiting: nothing there yet is DEADLINE_EXCEEDED, at once.
  EXPECT_THAT(ReceiveMessageInto(pair.b.get(), buffer, sizeof(buffer), /*wait=*/false).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd memory, CreateSharedMemory("into", 4096));
  GPUKIT_ASSERT_OK(SendMessage(pair.a.get(), "first", 5, memory.get()));
  GPUKIT_ASSERT_OK(SendMessage(pair.a.get(), "second", 6));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ReceivedInto first,
                              ReceiveMessageInto(pair.b.get(), buffer, sizeof(buffer), false));
  EXPECT_EQ(std::string(buffer, first.bytes), "first");
  ASSERT_TRUE(first.fd.valid());
  EXPECT_THAT(FileBytes(first.fd.get()), ::gpukit::testing::IsOkAndHolds(4096));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ReceivedInto second,
                              ReceiveMessageInto(pair.b.get(), buffer, sizeof(buffer), true));
  EXPECT_EQ(std::string(buffer, second.bytes), "second");
  EXPECT_FALSE(second.fd.valid());
  // A message longer than the buffer is refused, not cut silently.
  GPUKIT_ASSERT_OK(SendMessage(pair.a.get(), "0123456789abcdefXYZ", 19));
  EXPECT_THAT(ReceiveMessageInto(pair.b.get(), buffer, sizeof(buffer), false).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  pair.a.Reset();
  EXPECT_THAT(ReceiveMessageInto(pair.b.get(), buffer, sizeof(buffer), false).status(),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(UnixFdTest, ListenAndConnectByPath) {
  ::gpukit::testing::ScopedTempDir dir;
  const std::string path = dir.path() + "/fd.sock";
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd listening, ListenUnixSocket(path, 4));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd client, ConnectUnixSocket(path));
  ScopedFd server(::accept4(listening.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(server.valid());
  GPUKIT_ASSERT_OK(SendMessage(client.get(), "hi", 2));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ReceivedMessage got,
                              ReceiveMessage(server.get(), 8, absl::Seconds(5)));
  EXPECT_EQ(got.bytes, "hi");
  EXPECT_THAT(ConnectUnixSocket(dir.path() + "/nobody.sock").status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(ConnectUnixSocket(std::string(200, 'x')).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gpukit
