// gpukitd's submit socket (daemon/service/submit_socket.h) against the real daemon, with a
// raw SOCK_SEQPACKET connection: a local caller is told its path; a connection runs the Submit
// protocol (prefix first, results prefix + index, sync points, a refused op with its index);
// an answer above the datagram limit comes in parts; every kind of bad input (garbage bytes,
// a datagram too long, a descriptor, an unknown or foreign session, a second stream of the
// session, a protocol break) ends that connection only, with `ended` saying why, and the
// daemon serves on; a client that hangs up with ops in flight leaves nothing running; gpukitd
// stops with a connection open.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cpp/submit_socket_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/unix_fd.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/integration/submit_requests.h"
#include "tests/testing/status_matchers.h"
#include <sys/socket.h>

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int kOk = 0;
constexpr int kInvalidArgument = static_cast<int>(absl::StatusCode::kInvalidArgument);
constexpr int kNotFound = static_cast<int>(absl::StatusCode::kNotFound);
constexpr int kFailedPrecondition = static_cast<int>(absl::StatusCode::kFailedPrecondition);

class SubmitSocketTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    session_ = OpenSession(&socket_path_);
  }

  // Opens a session over gRPC; its submit socket's path into *path.
  std::string OpenSession(std::string* path) {
    v1::OpenSessionRequest request;
    request.set_tenant("submit-socket");
    absl::StatusOr<v1::OpenSessionResponse> opened = api().Open(request);
    EXPECT_THAT(opened, IsOk());
    if (!opened.ok()) return "";
    if (path != nullptr) *path = opened->submit_socket();
    return opened->session_id();
  }

  ScopedFd Connect() {
    absl::StatusOr<ScopedFd> socket = ConnectUnixSocket(socket_path_);
    EXPECT_THAT(socket, IsOk());
    if (!socket.ok()) return ScopedFd();
    // No test waits forever for an answer that does not come.
    timeval timeout = {30, 0};
    ::setsockopt(socket->get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    return *std::move(socket);
  }

  static void Send(int socket, const v1::SubmitRequest& request) {
    const std::string bytes = request.SerializeAsString();
    ASSERT_THAT(SendMessage(socket, bytes.data(), bytes.size()), IsOk());
  }

  // The next datagram as a SubmitResponse; nullopt once the daemon closed the connection.
  static std::optional<v1::SubmitResponse> Read(int socket) {
    absl::StatusOr<ReceivedMessage> message =
        ReceiveMessage(socket, 64 << 10, absl::InfiniteDuration());
    if (!message.ok()) return std::nullopt;
    v1::SubmitResponse response;
    EXPECT_TRUE(response.ParseFromString(message->bytes));
    return response;
  }

  // Sends the first request (the session alone) and reads the prefix.
  std::string OpenStream(int socket, const std::string& session) {
    v1::SubmitRequest first;
    first.set_session_id(session);
    Send(socket, first);
    std::optional<v1::SubmitResponse> opened = Read(socket);
    EXPECT_TRUE(opened.has_value());
    return opened.has_value() ? opened->handle_prefix() : "";
  }

  // Reads until the daemon's last response and the connection's end: the `ended` status.
  static v1::OpResult ReadEnd(int socket) {
    v1::OpResult ended;
    while (std::optional<v1::SubmitResponse> response = Read(socket)) {
      if (response->has_ended()) ended = response->ended();
    }
    return ended;
  }

  std::string Array(const std::vector<float>& values) {
    absl::StatusOr<v1::ArrayInfo> info = api().CreateWithBytes(
        session_, {static_cast<int64_t>(values.size())}, v1::DTYPE_FLOAT32, FloatBytes(values));
    EXPECT_THAT(info, IsOk());
    return info.ok() ? info->handle() : "";
  }

  // The session still runs ops over a new connection (the stream before it ended).
  // (A stream that ended holds the session's pipeline until its thread has closed it, a
  // moment later: a new one is refused with FAILED_PRECONDITION until then.)
  void ExpectSessionServesANewConnection() {
    const std::string x = Array({1, 2});
    ScopedFd socket;
    std::string prefix;
    EXPECT_TRUE(PollUntil(
        [&] {
          socket = Connect();
          prefix = OpenStream(socket.get(), session_);
          return !prefix.empty();
        },
        absl::Seconds(10)));
    ASSERT_THAT(prefix, StartsWith("a-"));
    Send(socket.get(), SubmitRequestOf({RunOf("add", {x, x})}, 1));
    std::optional<v1::SubmitResponse> response = Read(socket.get());
    ASSERT_TRUE(response.has_value());
    ASSERT_EQ(response->results_size(), 1);
    EXPECT_EQ(response->results(0).code(), kOk) << response->results(0).message();
    EXPECT_EQ(response->synced(), 1u);
  }

  std::string session_;
  std::string socket_path_;
  // A connection left open while TearDown stops the daemon (a member outlives TearDown).
  ScopedFd held_;
};

TEST_F(SubmitSocketTest, LocalCallerIsToldThePathBesideTheGrpcSocket) {
  EXPECT_EQ(socket_path_, daemon().socket_path() + ".submit");
}

TEST_F(SubmitSocketTest, RunsTheSubmitProtocol) {
  const std::string x = Array({1, 2, 3, 4});
  const std::string y = Array({1, 2, 3});  // does not broadcast with x
  ScopedFd socket = Connect();
  const std::string prefix = OpenStream(socket.get(), session_);
  ASSERT_THAT(prefix, StartsWith("a-"));

  // Each op names the one before it; the sync point's answer comes once they ran.
  Send(socket.get(),
       SubmitRequestOf({RunOf("add", {x, x}), RunOf("mul", {prefix + "0", x})}, /*sync=*/5));
  std::optional<v1::SubmitResponse> response = Read(socket.get());
  ASSERT_TRUE(response.has_value());
  ASSERT_EQ(response->results_size(), 2);
  EXPECT_EQ(response->results(1).index(), 1u);
  EXPECT_EQ(response->results(1).output().handle(), prefix + "1");
  EXPECT_EQ(response->synced(), 5u);
  EXPECT_EQ(response->error().code(), kOk);
  absl::StatusOr<std::string> bytes = api().DownloadAll(session_, prefix + "1");
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(Floats(*bytes), (std::vector<float>{2, 8, 18, 32}));

  // A refused op is answered with its index and code; the sync point names it; the stream
  // goes on.
  Send(socket.get(), SubmitRequestOf({RunOf("add", {x, y})}, /*sync=*/6));
  response = Read(socket.get());
  ASSERT_TRUE(response.has_value());
  ASSERT_EQ(response->results_size(), 1);
  EXPECT_EQ(response->results(0).index(), 2u);
  EXPECT_EQ(response->results(0).code(), kInvalidArgument);
  EXPECT_EQ(response->error().index(), 2u);
  Send(socket.get(), SubmitRequestOf({RunOf("add", {x, x})}, /*sync=*/7));
  response = Read(socket.get());
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->results(0).code(), kOk) << response->results(0).message();

  // Closing the connection is the half-close: the results stay in the session.
  socket.Reset();
  EXPECT_THAT(api().Describe(session_, prefix + "3"), IsOk());
}

TEST_F(SubmitSocketTest, AnAnswerAboveTheDatagramLimitComesInPartsInOrder) {
  const std::string x = Array({1});
  ScopedFd socket = Connect();
  ASSERT_THAT(OpenStream(socket.get(), session_), StartsWith("a-"));
  // An unknown op with a 250-byte name, then 400 ops that each get ABORTED "not run: op #0
  // (<that name>) failed before it": about 120 KiB of results for a request of 20.
  std::vector<v1::PipelinedOp> ops = {RunOf(std::string(250, 'q'), {x})};
  for (int i = 0; i < 400; ++i) ops.push_back(RunOf("add", {x}));
  Send(socket.get(), SubmitRequestOf(ops, /*sync=*/9));
  uint64_t next = 0;
  int parts = 0;
  for (;;) {
    std::optional<v1::SubmitResponse> response = Read(socket.get());
    ASSERT_TRUE(response.has_value());
    ++parts;
    for (const v1::OpResult& result : response->results()) {
      EXPECT_EQ(result.index(), next++);
      EXPECT_NE(result.code(), kOk);
    }
    if (response->synced() != 0) {
      EXPECT_EQ(response->synced(), 9u);
      break;
    }
  }
  EXPECT_EQ(next, 401u);
  EXPECT_GE(parts, 2);
}

TEST_F(SubmitSocketTest, GarbageEndsThatConnectionOnlyWithInvalidArgument) {
  ScopedFd socket = Connect();
  const std::string garbage = "\xff\xff\xff\xff not a protobuf";
  ASSERT_THAT(SendMessage(socket.get(), garbage.data(), garbage.size()), IsOk());
  v1::OpResult ended = ReadEnd(socket.get());
  EXPECT_EQ(ended.code(), kInvalidArgument);
  EXPECT_THAT(ended.message(), HasSubstr("not a SubmitRequest"));
  ExpectSessionServesANewConnection();
  ExpectDaemonServesAnotherClient();
}

TEST_F(SubmitSocketTest, ADatagramTooLongEndsThatConnection) {
  ScopedFd socket = Connect();
  int buffer = 1 << 20;
  ::setsockopt(socket.get(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  v1::SubmitRequest request;
  request.set_session_id(std::string(100 << 10, 's'));  // 100 KiB
  const std::string bytes = request.SerializeAsString();
  if (::send(socket.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) {
    GTEST_SKIP() << "this host's socket buffer takes no 100 KiB datagram: " << std::strerror(errno);
  }
  v1::OpResult ended = ReadEnd(socket.get());
  EXPECT_EQ(ended.code(), kInvalidArgument);
  EXPECT_THAT(ended.message(), HasSubstr("at most"));
  ExpectSessionServesANewConnection();
}

TEST_F(SubmitSocketTest, ADescriptorEndsThatConnection) {
  ScopedFd socket = Connect();
  v1::SubmitRequest first;
  first.set_session_id(session_);
  const std::string bytes = first.SerializeAsString();
  ASSERT_THAT(SendMessage(socket.get(), bytes.data(), bytes.size(), STDIN_FILENO), IsOk());
  v1::OpResult ended = ReadEnd(socket.get());
  EXPECT_EQ(ended.code(), kInvalidArgument);
  EXPECT_THAT(ended.message(), HasSubstr("no descriptors"));
  ExpectSessionServesANewConnection();
}

TEST_F(SubmitSocketTest, UnknownSessionIsNotFoundAndAMissingOneInvalid) {
  {
    ScopedFd socket = Connect();
    v1::SubmitRequest first;
    first.set_session_id("s-0000000000000000000000000000dead");
    Send(socket.get(), first);
    v1::OpResult ended = ReadEnd(socket.get());
    EXPECT_EQ(ended.code(), kNotFound);
  }
  {
    ScopedFd socket = Connect();
    Send(socket.get(), SubmitRequestOf({RunOf("add", {"x", "x"})}, 1));  // no session named
    v1::OpResult ended = ReadEnd(socket.get());
    EXPECT_EQ(ended.code(), kInvalidArgument);
    EXPECT_THAT(ended.message(), HasSubstr("must name the session"));
  }
  ExpectSessionServesANewConnection();
}

TEST_F(SubmitSocketTest, AnotherSessionsIdLaterBreaksTheProtocol) {
  const std::string other = OpenSession(nullptr);
  ScopedFd socket = Connect();
  OpenStream(socket.get(), session_);
  v1::SubmitRequest request = SubmitRequestOf({}, 1);
  request.set_session_id(other);
  Send(socket.get(), request);
  v1::OpResult ended = ReadEnd(socket.get());
  EXPECT_EQ(ended.code(), kInvalidArgument);
  EXPECT_THAT(ended.message(), HasSubstr("differs from the stream's session"));
}

TEST_F(SubmitSocketTest, ASecondStreamOfTheSessionIsRefused) {
  ScopedFd first = Connect();
  ASSERT_THAT(OpenStream(first.get(), session_), StartsWith("a-"));
  ScopedFd second = Connect();
  v1::SubmitRequest request;
  request.set_session_id(session_);
  Send(second.get(), request);
  v1::OpResult ended = ReadEnd(second.get());
  EXPECT_EQ(ended.code(), kFailedPrecondition);
  // The first goes on.
  const std::string x = Array({3});
  Send(first.get(), SubmitRequestOf({RunOf("add", {x, x})}, 2));
  std::optional<v1::SubmitResponse> response = Read(first.get());
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->results(0).code(), kOk) << response->results(0).message();
}

// The daemon's descriptors now, from /proc.
int DescriptorsOf(pid_t pid) {
  int count = 0;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), error)) {
    (void)entry;
    ++count;
  }
  return count;
}

TEST_F(SubmitSocketTest, AConnectionThatNamesNoSessionIsClosedAfterFiveSeconds) {
  ScopedFd idle = Connect();
  const absl::Time start = absl::Now();
  EXPECT_FALSE(Read(idle.get()).has_value());  // the end, not an answer
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Seconds(4));
  EXPECT_LT(waited, absl::Seconds(20));
}

TEST_F(SubmitSocketTest, EndedConnectionsGiveTheirDescriptorsBackAtOnce) {
  const int before = DescriptorsOf(daemon().pid());
  ASSERT_GT(before, 0);
  for (int i = 0; i < 40; ++i) {
    ScopedFd socket = Connect();
    v1::SubmitRequest first;
    first.set_session_id("s-not-a-session");
    Send(socket.get(), first);
    ReadEnd(socket.get());  // NOT_FOUND, then the end
  }
  // No further connection comes to make gpukitd reap them: it does so by itself.
  EXPECT_TRUE(
      PollUntil([&] { return DescriptorsOf(daemon().pid()) <= before + 2; }, absl::Seconds(10)))
      << DescriptorsOf(daemon().pid()) << " descriptors, " << before << " before";
}

TEST_F(SubmitSocketTest, OneUidMayHoldAQuarterOfTheConnections) {
  // gpukitd's limits follow its RLIMIT_NOFILE: connections at most min(1024, soft / 4), a
  // quarter of those per uid (and this test's uid is the only one here).
  std::ifstream limits(absl::StrCat("/proc/", daemon().pid(), "/limits"));
  std::string line;
  int64_t soft = -1;
  while (std::getline(limits, line)) {
    if (line.rfind("Max open files", 0) == 0) {
      std::istringstream fields(line.substr(std::string("Max open files").size()));
      std::string value;
      fields >> value;
      soft = value == "unlimited" ? -1 : std::stoll(value);
    }
  }
  const int max_connections = soft < 0 ? 1024 : std::max<int>(1, std::min<int64_t>(1024, soft / 4));
  const int per_uid = std::max(1, max_connections / 4);
  if (per_uid > 300) GTEST_SKIP() << "a per-uid cap of " << per_uid << " is too many to open";
  std::vector<ScopedFd> held;
  for (int i = 0; i < per_uid; ++i) held.push_back(Connect());
  // Each is served (it would be closed after 5 s without a request); one more is closed at once.
  ScopedFd refused = Connect();
  const absl::Time start = absl::Now();
  EXPECT_FALSE(Read(refused.get()).has_value());
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  // A connection of the cap is still served: it opens its stream.
  EXPECT_THAT(OpenStream(held.back().get(), session_), StartsWith("a-"));
}

TEST_F(SubmitSocketTest, TheDaemonStopsWithAConnectionOpenAndOpsSent) {
  const std::string x = Array(std::vector<float>(1 << 16, 1.0f));
  held_ = Connect();
  ASSERT_THAT(OpenStream(held_.get(), session_), StartsWith("a-"));
  std::vector<v1::PipelinedOp> ops;
  for (int i = 0; i < 100; ++i) ops.push_back(RunOf("add", {x, x}));
  Send(held_.get(), SubmitRequestOf(ops));
  // TearDown stops the daemon with the connection open: it must exit 0 within its timeout.
}

TEST_F(SubmitSocketTest, AClientThatHangsUpWithOpsInFlightLeavesNothingRunning) {
  const std::string x = Array(std::vector<float>(1 << 16, 1.0f));
  {
    ScopedFd socket = Connect();
    OpenStream(socket.get(), session_);
    std::vector<v1::PipelinedOp> ops;
    for (int i = 0; i < 200; ++i) ops.push_back(RunOf("add", {x, x}));
    Send(socket.get(), SubmitRequestOf(ops));
  }  // gone without reading an answer
  ASSERT_TRUE(PollUntil(
      [&] {
        absl::StatusOr<v1::PartitionStatus> partition = api().GetPartition("default");
        return partition.ok() && partition->running_tasks() == 0;
      },
      absl::Seconds(30)));
  ExpectSessionServesANewConnection();
  ASSERT_THAT(api().Close(session_), IsOk());
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(30)));
}

// libgpukit's synchronous session over the socket (client/cpp/submit_socket_client.h),
// against one with use_submit_socket off (gRPC calls): the same results and errors.
class SubmitSocketClientTest : public DaemonTest {
 protected:
  std::unique_ptr<Client> ConnectWith(bool use_submit_socket, ClientOptions options = {}) {
    ClientOptions defaults = ClientOptionsFor("submit-socket-client");
    defaults.resources = options.resources;
    defaults.use_submit_socket = use_submit_socket;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(defaults);
    EXPECT_THAT(client, IsOk());
    return client.ok() ? *std::move(client) : nullptr;
  }
};

// A pipeline's result is named "<prefix>.<index>", a unary RunOp's has no dot: which way the
// op went.
bool CameThroughTheSocket(const Array& array) {
  return array.handle().find('.') != std::string::npos;
}

TEST_F(SubmitSocketClientTest, OpsGiveTheSameResultsAndErrorsAsOverGrpc) {
  std::unique_ptr<Client> fast = ConnectWith(true);
  std::unique_ptr<Client> grpc = ConnectWith(false);
  ASSERT_NE(fast, nullptr);
  ASSERT_NE(grpc, nullptr);
  for (Client* client : {fast.get(), grpc.get()}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<float>({1, 2, 3, 4}, {2, 2}));
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client->Add(a, a));
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array c, client->Sum(b, std::optional<int64_t>(0)));
    EXPECT_EQ(CameThroughTheSocket(c), client == fast.get());
    EXPECT_THAT(c.ToVector<float>(), IsOkAndHolds(::testing::ElementsAre(8, 12)));
  }
  // A refused op: the same code, message and reason either way.
  absl::Status errors[2];
  for (int i = 0; i < 2; ++i) {
    Client* client = i == 0 ? fast.get() : grpc.get();
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, client->FromVector<float>({1, 2, 3}, {3}));
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array y, client->FromVector<float>({1, 2}, {2}));
    errors[i] = client->Add(x, y).status();
  }
  EXPECT_EQ(errors[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(errors[0].code(), errors[1].code());
  EXPECT_EQ(errors[0].message(), errors[1].message());
  EXPECT_EQ(RejectReason(errors[0]), RejectReason(errors[1]));
  // The session goes on after the refusal.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array z, fast->FromVector<int32_t>({5}, {1}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array w, fast->Add(z, 1));
  EXPECT_THAT(w.ToVector<int32_t>(), IsOkAndHolds(::testing::ElementsAre(6)));
}

TEST_F(SubmitSocketClientTest, AFreeIsAppliedBeforeTheNextOp) {
  // Room for three arrays of 256 KiB, not four: the fourth fits only once the free of the
  // second was applied, which the client did not wait for.
  ClientOptions options;
  options.resources.memory_limit_bytes = (3 << 18) + (64 << 10);
  options.resources.memory_request_bytes = options.resources.memory_limit_bytes;
  std::unique_ptr<Client> client = ConnectWith(true, options);
  ASSERT_NE(client, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a,
                              client->FromVector<float>(std::vector<float>(1 << 16, 1), {1 << 16}));
  std::optional<Array> b;
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array made, client->Add(a, a));
    b = std::move(made);
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array c, client->Add(*b, a));
  ASSERT_TRUE(CameThroughTheSocket(c));
  b.reset();  // the free goes out without a wait
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array d, client->Add(c, a));
  EXPECT_THAT(d.ToVector<float>(), IsOkAndHolds(::testing::Each(4.0f)));
  // And a unary call after a free waits for it when it needs the room.
  d.Free().IgnoreError();
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array e, client->Empty({1 << 16}, DType::kFloat32));
  EXPECT_THAT(client->Sync(), IsOk());
}

TEST_F(SubmitSocketClientTest, AFailedFreeIsReportedBySync) {
  std::unique_ptr<Client> client = ConnectWith(true);
  ASSERT_NE(client, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<float>({1}, {1}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client->Add(a, a));
  ASSERT_TRUE(CameThroughTheSocket(b));
  // Freed behind the client's back: its own free then fails on the daemon.
  ASSERT_THAT(api().Free(client->session_id(), b.handle()), IsOk());
  EXPECT_THAT(b.Free(), IsOk());  // sent, not waited for
  // The next op is not refused for it...
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array c, client->Add(a, 1));
  EXPECT_THAT(c.ToVector<float>(), IsOkAndHolds(::testing::ElementsAre(2)));
  // ...and Sync reports it once.
  EXPECT_THAT(client->Sync(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(client->Sync(), IsOk());
}

TEST(SubmitSocketClientConnectTest, AConnectionClosedAtOnceFailsConnectNotAnOp) {
  // What a client past gpukitd's connection limit meets: accepted, then closed.
  ScopedTempDir dir;
  const std::string path = dir.path() + "/closing.submit";
  absl::StatusOr<ScopedFd> listening = ListenUnixSocket(path, 4);
  ASSERT_THAT(listening, IsOk());
  std::thread closer([&] { ScopedFd accepted(::accept(listening->get(), nullptr, nullptr)); });
  absl::StatusOr<std::unique_ptr<gpukit::internal::SubmitSocketClient>> client =
      gpukit::internal::SubmitSocketClient::Connect(path, "s-any", absl::Seconds(10));
  closer.join();
  EXPECT_THAT(client, StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(SubmitSocketClientTest, AfterACallPastItsDeadlineTheSessionGoesOnOverGrpc) {
  ClientOptions options = ClientOptionsFor("submit-socket-client");
  options.call_timeout = absl::Milliseconds(200);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Connect(options));
  // A matmul that takes the CPU backend well over 200 ms.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array big, client->Empty({1536, 1536}, DType::kFloat32));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array small, client->FromVector<float>({1, 2}, {2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array warm, client->Add(small, small));
  ASSERT_TRUE(CameThroughTheSocket(warm));
  absl::StatusOr<Array> late = client->Matmul(big, big);
  if (late.ok()) GTEST_SKIP() << "the matmul took less than 200 ms here";
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  // The broken socket is not a failed free, and later ops go over gRPC.
  EXPECT_THAT(client->Sync(), IsOk());
  // (The device still runs the matmul for a while: the next op waits behind it.)
  std::optional<Array> later;
  ASSERT_TRUE(PollUntil(
      [&] {
        absl::StatusOr<Array> added = client->Add(small, 1);
        if (added.ok()) later = *std::move(added);
        return added.ok();
      },
      absl::Seconds(60), absl::Milliseconds(100)));
  Array after = *std::move(later);
  EXPECT_FALSE(CameThroughTheSocket(after));
  EXPECT_THAT(after.ToVector<float>(), IsOkAndHolds(::testing::ElementsAre(2, 3)));
  EXPECT_THAT(client->Sync(), IsOk());
}

class SubmitSocketOffTest : public SubmitSocketClientTest {
 protected:
  std::string DaemonConfigJson() const override { return R"({"server": {"submitSocket": false}})"; }
};

TEST_F(SubmitSocketOffTest, ADaemonWithoutTheSocketTellsNoPathAndClientsUseGrpc) {
  v1::OpenSessionRequest request;
  request.set_tenant("submit-socket");
  absl::StatusOr<v1::OpenSessionResponse> opened = api().Open(request);
  ASSERT_THAT(opened, IsOk());
  EXPECT_EQ(opened->submit_socket(), "");
  std::unique_ptr<Client> client = ConnectWith(true);
  ASSERT_NE(client, nullptr);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<float>({1, 2}, {2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client->Add(a, a));
  EXPECT_FALSE(CameThroughTheSocket(b));
  EXPECT_THAT(b.ToVector<float>(), IsOkAndHolds(::testing::ElementsAre(2, 4)));
}

}  // namespace
}  // namespace gpukit::testing
