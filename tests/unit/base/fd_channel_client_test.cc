// The client's end of the descriptor channel (runtime/base/fd_channel_client.h) against a
// scripted server on a real unix socket: one connection for every exchange, a new one only
// when the server closed the old, and no reuse of a connection whose reply did not come.
#include "runtime/base/fd_channel_client.h"

#include <poll.h>

#include <string>
#include <thread>
#include <utility>

#include "absl/time/time.h"
#include "gtest/gtest.h"
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

constexpr absl::Duration kDeadline = absl::Seconds(30);  // only against hanging forever
const std::string kToken(kFdChannelTokenBytes, 't');

// Accepts one connection on `listening` and answers `exchanges` requests on it with OK (a
// fetch with a descriptor); closes the connection after them.
void ServeOneConnection(int listening, int exchanges) {
  ScopedFd connection(::accept(listening, nullptr, nullptr));
  ASSERT_TRUE(connection.valid());
  for (int i = 0; i < exchanges; ++i) {
    absl::StatusOr<ReceivedMessage> request = ReceiveMessage(connection.get(), 256, kDeadline);
    ASSERT_TRUE(request.ok()) << request.status();
    GPUKIT_ASSERT_OK_AND_ASSIGN(FdChannelRequest decoded, DecodeFdChannelRequest(request->bytes));
    ScopedFd reply_fd;
    if (decoded.op == FdChannelOp::kFetch) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(reply_fd, CreateSharedMemory("fetched", 64));
    }
    const std::string reply = EncodeFdChannelReply(absl::OkStatus());
    GPUKIT_ASSERT_OK(SendMessage(connection.get(), reply.data(), reply.size(), reply_fd.get()));
  }
}

// Whether a connection waits on `listening` to be accepted.
bool ConnectionWaiting(int listening) {
  pollfd waiting = {listening, POLLIN, 0};
  return ::poll(&waiting, 1, 0) == 1;
}

class FdChannelClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/gpukitd.sock.fd";
    GPUKIT_ASSERT_OK_AND_ASSIGN(listening_, ListenUnixSocket(path_, 8));
  }
  absl::Status Deliver(FdChannelClient& client, absl::Duration timeout = kDeadline) {
    GPUKIT_ASSIGN_OR_RETURN(ScopedFd memory, CreateSharedMemory("delivered", 64));
    return client.Exchange(path_, FdChannelOp::kDeliver, kToken, memory.get(), timeout).status();
  }

  ScopedTempDir dir_;
  std::string path_;
  ScopedFd listening_;
};

TEST_F(FdChannelClientTest, MakesEveryExchangeOverOneConnection) {
  std::thread server([this] { ServeOneConnection(listening_.get(), 3); });
  FdChannelClient client;
  GPUKIT_EXPECT_OK(Deliver(client));
  GPUKIT_EXPECT_OK(Deliver(client));
  absl::StatusOr<ScopedFd> fetched =
      client.Exchange(path_, FdChannelOp::kFetch, kToken, -1, kDeadline);
  GPUKIT_EXPECT_OK(fetched.status());
  EXPECT_TRUE(fetched.ok() && fetched->valid());
  server.join();
  EXPECT_FALSE(ConnectionWaiting(listening_.get())) << "a second connection was made";
}

TEST_F(FdChannelClientTest, ReconnectsWhenTheServerClosedItsConnection) {
  std::thread server([this] {
    ServeOneConnection(listening_.get(), 1);  // then closes it, as gpukitd past its cap
    ServeOneConnection(listening_.get(), 1);
  });
  FdChannelClient client;
  GPUKIT_EXPECT_OK(Deliver(client));
  GPUKIT_EXPECT_OK(Deliver(client));
  server.join();
  EXPECT_TRUE(client.connected());
}

TEST_F(FdChannelClientTest, DropsAConnectionWhoseReplyDidNotCome) {
  FdChannelClient client;
  // Connected (the listening socket queues it) but never answered.
  EXPECT_THAT(Deliver(client, absl::Milliseconds(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_FALSE(client.connected());
  EXPECT_THAT(
      client.Exchange(dir_.path() + "/nothing.fd", FdChannelOp::kFetch, kToken, -1, kDeadline),
      StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace gpukit
