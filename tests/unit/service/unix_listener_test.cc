// gpukitd's own accept loop on a unix socket (daemon/service/unix_listener.h) and the peer
// identity that handlers read back (daemon/service/access_guard.h's PrincipalOfPeer): a
// real gRPC server whose one generic handler answers with the caller it identified.
#include "daemon/service/unix_listener.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/server.h"
#include "daemon/service/access_guard.h"
#include "daemon/service/peer_table.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel_posix.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "runtime/base/unix_fd.h"
#include "runtime/jit/sha256.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

namespace gpukit::service {
namespace {

using ::gpukit::testing::ScopedTempDir;
using ::gpukit::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// Answers every call with UNIMPLEMENTED carrying "<peer string>|<Principal::Describe()>".
class WhoAmIService : public grpc::CallbackGenericService {
 public:
  explicit WhoAmIService(const PeerTable& peers) : peers_(peers) {}

 private:
  class Reactor : public grpc::ServerGenericBidiReactor {
   public:
    Reactor(grpc::GenericCallbackServerContext* context, const PeerTable& peers) {
      const std::string peer = context->peer();
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          absl::StrCat(peer, "|", PrincipalOfPeer(peer, peers).Describe())));
    }
    void OnDone() override { delete this; }
  };
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    return new Reactor(context, peers_);
  }
  const PeerTable& peers_;
};

// One unary call on `channel`; returns the status.
grpc::Status CallOnce(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue queue;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  grpc::Status status;
  auto call = stub.PrepareUnaryCall(&context, "/test.WhoAmI/Ask", request, &queue);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  EXPECT_TRUE(queue.Next(&tag, &ok));
  return status;
}

// One unary call on a fresh channel to `address`; returns the status.
grpc::Status CallOnce(const std::string& address) {
  return CallOnce(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// The connection's entry in `peers`, from a WhoAmI answer "fd:<n>|...".
std::optional<Principal> PeerOfAnswer(const grpc::Status& answer, const PeerTable& peers) {
  const std::string& message = answer.error_message();
  int fd = -1;
  if (!absl::StartsWith(message, "fd:") ||
      !absl::SimpleAtoi(message.substr(3, message.find('|') - 3), &fd)) {
    ADD_FAILURE() << "not a WhoAmI answer: " << message;
    return std::nullopt;
  }
  return peers.Lookup(fd);
}

// Supplementary groups for a connecting process, more than PeerGroups' first try has room for
// (64), so that reading them takes its ERANGE path too.
std::vector<gid_t> KnownGroups() {
  std::vector<gid_t> groups;
  for (gid_t g = 54000; g < 54070; ++g) groups.push_back(g);
  return groups;
}

// A process with `groups` as its supplementary groups connects to the unix socket at `path`:
// a forked child sets them (setgroups needs root; the test checks first), connects, hands
// the connected descriptor back over a socketpair and exits. Returns that descriptor; the
// peer the server sees is the child (its pid in `child_pid`), with exactly these groups.
ScopedFd ConnectFromChildWithGroups(const std::string& path, const std::vector<gid_t>& groups,
                                    pid_t* child_pid) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    ADD_FAILURE() << "socketpair: " << std::strerror(errno);
    return ScopedFd();
  }
  ScopedFd mine(pair[0]), theirs(pair[1]);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  const pid_t pid = fork();
  if (pid == 0) {
    // The child of a threaded process: system calls only, then _exit. The raw setgroups
    // changes this (only) thread's credentials, which are what connect records.
    if (syscall(SYS_setgroups, groups.size(), groups.data()) != 0) _exit(2);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      _exit(3);
    }
    // SendMessage's success path is one sendmsg, fit for a forked child.
    _exit(SendMessage(theirs.get(), "c", 1, fd).ok() ? 0 : 4);
  }
  theirs.Reset();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return ScopedFd();
  }
  *child_pid = pid;
  absl::StatusOr<ReceivedMessage> received = ReceiveMessage(mine.get(), 1, absl::Seconds(30));
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child failed at step " << WEXITSTATUS(status) << " (2 setgroups, 3 connect, 4 send)";
  if (!received.ok()) {
    ADD_FAILURE() << received.status();
    return ScopedFd();
  }
  return std::move(received->fd);
}

class UnixListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.path() + "/test.sock";
    absl::StatusOr<std::unique_ptr<UnixListener>> listener = UnixListener::Bind(path_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    grpc::ServerBuilder builder;
    builder.RegisterCallbackGenericService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    listener_->Start(*server_, peers_);
  }
  void TearDown() override {
    listener_->Stop();
    server_->Shutdown();
  }

  ScopedTempDir dir_;
  std::string path_;
  PeerTable peers_;
  WhoAmIService service_{peers_};
  std::unique_ptr<UnixListener> listener_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(UnixListenerTest, HandlersSeeTheConnectingProcessesCredentials) {
  const std::string me = absl::StrCat("uid=", getuid(), " gid=", getgid(), " pid=", getpid());
  const grpc::Status first = CallOnce("unix://" + path_);
  ASSERT_EQ(first.error_code(), grpc::StatusCode::UNIMPLEMENTED) << first.error_message();
  // gRPC 1.51 names a connection added from a descriptor "fd:<n>"; AccessGuard relies on it.
  EXPECT_THAT(first.error_message(), MatchesRegex("fd:[0-9]+\\|.*"));
  EXPECT_THAT(first.error_message(), HasSubstr("|" + me));
  // A second connection is identified the same way.
  const grpc::Status second = CallOnce("unix://" + path_);
  EXPECT_THAT(second.error_message(), HasSubstr("|" + me));
}

TEST_F(UnixListenerTest, SocketFileHasTheUmasksMode) {
  // As gRPC made it: 0777 less the umask.
  const mode_t umask_bits = umask(0);
  umask(umask_bits);
  struct stat st {};
  ASSERT_EQ(lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0777 & ~umask_bits);
}

TEST_F(UnixListenerTest, StopRefusesNewConnections) {
  listener_->Stop();
  listener_->Stop();  // idempotent
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
  EXPECT_NE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  close(fd);
}

TEST(UnixListenerBind, RefusesAPathTooLongForASocketAddress) {
  EXPECT_THAT(UnixListener::Bind("/tmp/" + std::string(200, 'x')).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bytes long")));
}

TEST(UnixListenerBind, RefusesAPathInUse) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/taken.sock";
  absl::StatusOr<std::unique_ptr<UnixListener>> first = UnixListener::Bind(path);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(UnixListener::Bind(path).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot bind " + path)));
}

TEST_F(UnixListenerTest, RecordsTheConnectingProcessesSupplementaryGroups) {
  // The connecting side needs supplementary groups the test knows: a process without any
  // (as in many containers) would pass a check that the listener records none.
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the connecting process known groups";
  pid_t child = -1;
  ScopedFd connection = ConnectFromChildWithGroups(path_, KnownGroups(), &child);
  ASSERT_TRUE(connection.valid());
  const grpc::Status status =
      CallOnce(grpc::CreateInsecureChannelFromFd("child", connection.release()));
  ASSERT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  const std::optional<Principal> peer = PeerOfAnswer(status, peers_);
  ASSERT_TRUE(peer.has_value());
  EXPECT_EQ(peer->pid, static_cast<int64_t>(child)) << "the connecting child, not this process";
  std::vector<uint32_t> recorded = peer->groups;
  std::sort(recorded.begin(), recorded.end());
  const std::vector<gid_t> known = KnownGroups();
  EXPECT_EQ(recorded, std::vector<uint32_t>(known.begin(), known.end()))
      << "SO_PEERGROUPS: the connecting process's supplementary groups";
}

// PeerGroups' second try: the first has less room than the peer's groups need.
TEST(PeerGroupsTest, ReadsEveryGroupWhenTheFirstTryHasTooLittleRoom) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the connecting process known groups";
  ScopedTempDir dir;
  const std::string path = dir.path() + "/groups.sock";
  ScopedFd listening(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(listening.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listening.get(), 4), 0);
  const std::vector<gid_t> groups = {54001, 54002, 54003};
  pid_t child = -1;
  ScopedFd client = ConnectFromChildWithGroups(path, groups, &child);
  ASSERT_TRUE(client.valid());
  ScopedFd server(accept4(listening.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(server.valid()) << std::strerror(errno);
  const std::vector<uint32_t> expected(groups.begin(), groups.end());
  for (size_t capacity : {0, 1, 2, 3, 64}) {
    std::vector<uint32_t> read = PeerGroups(server.get(), capacity);
    std::sort(read.begin(), read.end());
    EXPECT_EQ(read, expected) << "first try with room for " << capacity;
  }
}

TEST(PeerGroupsTest, NotASocketHasNoGroups) {
  ScopedFd not_a_socket(eventfd(0, EFD_CLOEXEC));
  ASSERT_TRUE(not_a_socket.valid());
  EXPECT_TRUE(PeerGroups(not_a_socket.get()).empty());
}

TEST(PrincipalOfPeer, MapsEachTransportsPeerString) {
  PeerTable peers;
  peers.Record(7, Principal::Local(1000, 100, 4242));
  EXPECT_EQ(PrincipalOfPeer("fd:7", peers).Describe(), "uid=1000 gid=100 pid=4242");
  peers.Record(7, Principal::Local(1001, 101, 4343));  // the number reused by a new connection
  EXPECT_EQ(PrincipalOfPeer("fd:7", peers).Describe(), "uid=1001 gid=101 pid=4343");
  EXPECT_TRUE(PrincipalOfPeer("ipv4:10.0.0.2:5000", peers).network());
  EXPECT_TRUE(PrincipalOfPeer("ipv6:[::1]:5000", peers).network());
  for (const char* unknown : {"fd:8", "fd:", "fd:x7", "unix:/run/gpukit/gpukitd.sock", ""}) {
    const Principal p = PrincipalOfPeer(unknown, peers);
    EXPECT_EQ(p.kind, Principal::Kind::kUnidentified) << unknown;
  }
}

TEST(PrincipalOfPeer, TcpCarriesTheHashOfItsBearerTokenOnly) {
  PeerTable peers;
  peers.Record(7, Principal::Local(1000, 100, 4242));
  const std::string hash = Sha256Hex("s3cret-token");
  EXPECT_EQ(PrincipalOfPeer("ipv4:10.0.0.2:5000", peers, "Bearer s3cret-token").token_sha256, hash);
  EXPECT_EQ(PrincipalOfPeer("ipv6:[::1]:5000", peers, "bearer  s3cret-token ").token_sha256, hash);
  for (const char* not_bearer : {"", "Bearer ", "Bearer", "Basic s3cret-token", "s3cret-token"}) {
    const Principal p = PrincipalOfPeer("ipv4:10.0.0.2:5000", peers, not_bearer);
    EXPECT_TRUE(p.network());
    EXPECT_EQ(p.token_sha256, "") << not_bearer;
  }
  // On the unix socket the socket's identity is the caller's; a token changes nothing.
  const Principal local = PrincipalOfPeer("fd:7", peers, "Bearer s3cret-token");
  EXPECT_TRUE(local.local());
  EXPECT_EQ(local.token_sha256, "");
  // Logs show a prefix of the hash, never the token.
  EXPECT_THAT(PrincipalOfPeer("ipv4:10.0.0.2:5000", peers, "Bearer s3cret-token").Describe(),
              ::testing::AllOf(HasSubstr("token=" + hash.substr(0, 12)),
                               ::testing::Not(HasSubstr("s3cret"))));
}

TEST(IsLoopbackAddress, OnlyLoopbackHosts) {
  for (const char* loopback : {"127.0.0.1:0", "127.1.2.3:7070", "[::1]:7070", "localhost:1"}) {
    EXPECT_TRUE(IsLoopbackAddress(loopback)) << loopback;
  }
  for (const char* network : {"0.0.0.0:7070", "[::]:7070", "10.0.0.2:1", "gpu-host:7070",
                              "128.0.0.1:1", "localhost.example.com:1", "[::2]:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(network)) << network;
  }
}

}  // namespace
}  // namespace gpukit::service
