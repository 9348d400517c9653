// gpukitd's descriptor channel (daemon/service/fd_channel.h) on a real unix socket: clients
// keep their connection and make several exchanges over it; a client that stalls, stops
// reading or hangs up costs only its own connection; past max_connections the least recently
// used connection is closed and its client reconnects. Nothing here waits for time: every
// receive has a generous deadline only so that a broken channel fails instead of hanging.
#include "daemon/service/fd_channel.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/fd_channel_client.h"
#include "runtime/base/fd_channel_protocol.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include <sys/socket.h>

namespace gpukit {
namespace {

using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;

constexpr absl::Duration kDeadline = absl::Seconds(30);  // only against hanging forever

// A 32-character token starting with `name`.
std::string Token(const std::string& name) {
  std::string token = name;
  token.resize(kFdChannelTokenBytes, '.');
  return token;
}

class FdChannelTest : public ::testing::Test {
 protected:
  void Start(FdChannelOptions options = {}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(
        channel_, FdChannel::Start(
                      dir_.path() + "/gpukitd.sock.fd",
                      [this](absl::string_view token, ScopedFd fd) {
                        absl::MutexLock lock(&mu_);
                        delivered_.push_back(std::string(token.substr(0, token.find('.'))));
                        return fd.valid() ? absl::OkStatus()
                                          : absl::InvalidArgumentError("no descriptor");
                      },
                      [](absl::string_view token) -> absl::StatusOr<ScopedFd> {
                        if (token.substr(0, 7) != "unknown") {
                          return CreateSharedMemory("fetched", 4096);
                        }
                        return absl::NotFoundError("no export with that token");
                      },
                      options));
  }

  // A raw connection to the channel (a client that does what the test says, nothing more).
  ScopedFd Connect() {
    absl::StatusOr<ScopedFd> connection = ConnectUnixSocket(channel_->path());
    EXPECT_TRUE(connection.ok()) << connection.status();
    return connection.ok() ? *std::move(connection) : ScopedFd();
  }

  // One request on `connection`; `fd` attached when >= 0. Returns the reply's status.
  static absl::Status Exchange(int connection, FdChannelOp op, const std::string& name,
                               int fd = -1) {
    const std::string request = EncodeFdChannelRequest({op, Token(name)});
    GPUKIT_RETURN_IF_ERROR(SendMessage(connection, request.data(), request.size(), fd));
    GPUKIT_ASSIGN_OR_RETURN(ReceivedMessage reply,
                            ReceiveMessage(connection, kFdChannelMaxReplyBytes, kDeadline));
    return DecodeFdChannelReply(reply.bytes);
  }

  static ScopedFd Memory() {
    absl::StatusOr<ScopedFd> memory = CreateSharedMemory("delivered", 4096);
    EXPECT_TRUE(memory.ok()) << memory.status();
    return memory.ok() ? *std::move(memory) : ScopedFd();
  }

  std::vector<std::string> delivered() {
    absl::MutexLock lock(&mu_);
    return delivered_;
  }

  ScopedTempDir dir_;
  std::unique_ptr<FdChannel> channel_;
  absl::Mutex mu_;
  std::vector<std::string> delivered_ ABSL_GUARDED_BY(mu_);
};

TEST_F(FdChannelTest, ServesSeveralExchangesOverOneConnection) {
  Start();
  ScopedFd connection = Connect();
  ScopedFd memory = Memory();
  GPUKIT_EXPECT_OK(Exchange(connection.get(), FdChannelOp::kDeliver, "first", memory.get()));
  GPUKIT_EXPECT_OK(Exchange(connection.get(), FdChannelOp::kDeliver, "second", memory.get()));
  // A failed exchange leaves the connection serving.
  EXPECT_THAT(Exchange(connection.get(), FdChannelOp::kFetch, "unknown"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Exchange(connection.get(), FdChannelOp::kDeliver, "without-descriptor"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  GPUKIT_EXPECT_OK(Exchange(connection.get(), FdChannelOp::kDeliver, "third", memory.get()));
  EXPECT_THAT(delivered(), ElementsAre("first", "second", "third"));
}

TEST_F(FdChannelTest, AClientKeepsItsConnectionForEveryExchange) {
  Start();
  FdChannelClient client;
  ScopedFd memory = Memory();
  for (const char* name : {"one", "two", "three"}) {
    GPUKIT_ASSERT_OK(
        client
            .Exchange(channel_->path(), FdChannelOp::kDeliver, Token(name), memory.get(), kDeadline)
            .status());
    EXPECT_TRUE(client.connected());
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      ScopedFd fetched,
      client.Exchange(channel_->path(), FdChannelOp::kFetch, Token("export"), -1, kDeadline));
  EXPECT_TRUE(fetched.valid());
  EXPECT_THAT(
      client.Exchange(channel_->path(), FdChannelOp::kFetch, Token("unknown"), -1, kDeadline),
      StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(client.connected());
  EXPECT_THAT(delivered(), ElementsAre("one", "two", "three"));
}

// A client connected before the others that says nothing for as long as they exchange holds
// none of them up, and is itself served when it speaks at last (it was not timed out).
TEST_F(FdChannelTest, AStalledConnectionDelaysNoOtherClient) {
  Start();
  ScopedFd stalled = Connect();
  ScopedFd memory = Memory();
  for (const char* name : {"a", "b", "c"}) {
    ScopedFd other = Connect();
    GPUKIT_EXPECT_OK(Exchange(other.get(), FdChannelOp::kDeliver, name, memory.get()));
  }
  EXPECT_THAT(delivered(), ElementsAre("a", "b", "c"));
  GPUKIT_EXPECT_OK(Exchange(stalled.get(), FdChannelOp::kDeliver, "late", memory.get()));
  EXPECT_THAT(delivered(), ElementsAre("a", "b", "c", "late"));
}

// Clients that hang up without a word, hang up after a request without reading its reply, or
// send requests without reading the replies are dropped; the others are served.
TEST_F(FdChannelTest, ClientsThatHangUpOrStopReadingAreDroppedAndOthersServed) {
  Start();
  ScopedFd memory = Memory();
  ScopedFd kept = Connect();
  GPUKIT_ASSERT_OK(Exchange(kept.get(), FdChannelOp::kDeliver, "before", memory.get()));
  {
    ScopedFd silent = Connect();  // closes at once
  }
  {
    ScopedFd hasty = Connect();
    const std::string request = EncodeFdChannelRequest({FdChannelOp::kDeliver, Token("hasty")});
    GPUKIT_ASSERT_OK(SendMessage(hasty.get(), request.data(), request.size(), memory.get()));
  }
  // Requests without reading a reply: the channel's replies to it pile up until the socket
  // takes no more, so it is dropped (and this client's sends fail from then on). 10000 is far
  // more than a socket's queue holds.
  ScopedFd flooding = Connect();
  const std::string request = EncodeFdChannelRequest({FdChannelOp::kFetch, Token("flood")});
  int sent = 0;
  while (sent < 10000 && SendMessage(flooding.get(), request.data(), request.size()).ok()) {
    ++sent;
  }
  ASSERT_GT(sent, 0);
  ASSERT_LT(sent, 10000) << "the flooding client was never dropped";
  // Read what came back: replies, then the end of the connection.
  int replies = 0;
  for (;;) {
    absl::StatusOr<ReceivedMessage> reply =
        ReceiveMessage(flooding.get(), kFdChannelMaxReplyBytes, kDeadline);
    if (!reply.ok()) {
      EXPECT_THAT(reply.status(), StatusIs(absl::StatusCode::kUnavailable));
      break;
    }
    ++replies;
  }
  EXPECT_LT(replies, sent) << "the flooding client was served to the end";

  GPUKIT_EXPECT_OK(Exchange(kept.get(), FdChannelOp::kDeliver, "after", memory.get()));
  ScopedFd fresh = Connect();
  GPUKIT_EXPECT_OK(Exchange(fresh.get(), FdChannelOp::kDeliver, "fresh", memory.get()));
  // The hasty client's request was read before it was dropped (it came before the flood).
  EXPECT_THAT(delivered(), ElementsAre("before", "hasty", "after", "fresh"));
}

// Past max_connections, the least recently used connection is closed; a FdChannelClient
// whose connection was closed so reconnects at its next exchange.
TEST_F(FdChannelTest, ClosesTheLeastRecentlyUsedConnectionPastTheCap) {
  Start({.max_connections = 2});
  ScopedFd memory = Memory();
  ScopedFd oldest = Connect();
  GPUKIT_ASSERT_OK(Exchange(oldest.get(), FdChannelOp::kDeliver, "oldest", memory.get()));
  ScopedFd recent = Connect();
  GPUKIT_ASSERT_OK(Exchange(recent.get(), FdChannelOp::kDeliver, "recent", memory.get()));
  GPUKIT_ASSERT_OK(Exchange(oldest.get(), FdChannelOp::kDeliver, "oldest-again", memory.get()));
  // A third: `recent` is now the least recently used, and goes.
  FdChannelClient client;
  GPUKIT_ASSERT_OK(client
                       .Exchange(channel_->path(), FdChannelOp::kDeliver, Token("third"),
                                 memory.get(), kDeadline)
                       .status());
  EXPECT_THAT(ReceiveMessage(recent.get(), kFdChannelMaxReplyBytes, kDeadline),
              StatusIs(absl::StatusCode::kUnavailable));
  GPUKIT_EXPECT_OK(Exchange(oldest.get(), FdChannelOp::kDeliver, "oldest-kept", memory.get()));
  // Another takes the client's place; the client reconnects and is served.
  ScopedFd another = Connect();
  GPUKIT_ASSERT_OK(Exchange(another.get(), FdChannelOp::kDeliver, "another", memory.get()));
  GPUKIT_EXPECT_OK(client
                       .Exchange(channel_->path(), FdChannelOp::kDeliver, Token("reconnected"),
                                 memory.get(), kDeadline)
                       .status());
  EXPECT_THAT(delivered(), ElementsAre("oldest", "recent", "oldest-again", "third", "oldest-kept",
                                       "another", "reconnected"));
}

TEST_F(FdChannelTest, RefusesAZeroConnectionCap) {
  EXPECT_THAT(FdChannel::Start(dir_.path() + "/zero.fd", nullptr, nullptr, {.max_connections = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gpukit
