// Pipelined submission through libgpukit (ClientOptions::pipeline), end to end against the
// real gpukitd, on both transports of the stream (the submit socket and ComputeService.Submit):
// a long chain of dependent ops, a burst above the socket's datagram, an error in the middle
// of a chain reported at the sync point with its op, a result used before its producer ran,
// frees of arrays that queued ops still use, frees that never wait for the daemon, a close
// that lets queued ops run, and a client that dies with ops in flight.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/binary_path.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr int64_t kLeaseMs = 500;
// The reaper runs once a second: a lapsed session is gone within lease + 1 s.
constexpr absl::Duration kReapSlack = absl::Seconds(5);

class PipelineFixture : public DaemonTest {
 protected:
  std::string DaemonConfigJson() const override { return R"({"sessions": {"minLease": "200ms"}})"; }

  // Whether the pipelined stream goes over gpukitd's submit socket (else gRPC).
  virtual bool OverSocket() const { return true; }

  absl::StatusOr<std::unique_ptr<Client>> ConnectPipelined(const std::string& tenant,
                                                           bool pipeline = true,
                                                           ClientOptions options = {}) {
    ClientOptions defaults = ClientOptionsFor(tenant);
    defaults.partition = options.partition;
    defaults.pipeline = pipeline;
    defaults.use_submit_socket = OverSocket();
    return Client::Connect(defaults);
  }

  // The daemon's count of the session's arrays, or -1 when it lists no such session.
  int64_t ArraysOf(const std::string& session_id) {
    absl::StatusOr<v1::ListSessionsResponse> sessions = api().ListSessions();
    if (!sessions.ok()) return -1;
    for (const v1::SessionInfo& session : sessions->sessions()) {
      if (session.session_id() == session_id) return session.arrays();
    }
    return -1;
  }

  // Tasks of the daemon that are waiting or running.
  int64_t UnfinishedTasks() {
    int64_t count = 0;
    for (v1::TaskState state : {v1::TASK_STATE_PENDING, v1::TASK_STATE_QUEUED,
                                v1::TASK_STATE_ADMITTED, v1::TASK_STATE_RUNNING}) {
      v1::ListTasksRequest request;
      request.set_state(state);
      absl::StatusOr<v1::ListTasksResponse> tasks = api().ListTasks(request);
      if (!tasks.ok()) return -1;
      count += tasks->tasks_size();
    }
    return count;
  }
};

// What a pipelined session's stream travels on (ClientOptions::use_submit_socket): the tests
// of the stream's semantics run on both.
enum class Transport { kSubmitSocket, kGrpc };

std::string TransportName(const ::testing::TestParamInfo<Transport>& info) {
  return info.param == Transport::kSubmitSocket ? "SubmitSocket" : "Grpc";
}

class PipelineTest : public PipelineFixture, public ::testing::WithParamInterface<Transport> {
 protected:
  bool OverSocket() const override { return GetParam() == Transport::kSubmitSocket; }
};

// n x n float32 values that are small integers, so that matmul sums are exact in float32.
std::vector<float> SmallIntegers(int64_t n, int64_t salt) {
  std::vector<float> values(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n * n; ++i) values[i] = static_cast<float>((i * 7 + salt) % 5) - 2.0f;
  return values;
}

std::vector<float> MatmulHere(const std::vector<float>& a, const std::vector<float>& b, int64_t n) {
  std::vector<float> c(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += double{a[i * n + k]} * double{b[k * n + j]};
      c[i * n + j] = static_cast<float>(sum);
    }
  }
  return c;
}

TEST_P(PipelineTest, ChainOfTwoHundredDependentAddsGivesTheValuesComputedHere) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectPipelined("chain"));
  std::vector<float> x_here(16), step_here(16);
  for (int i = 0; i < 16; ++i) {
    x_here[i] = 0.1f * static_cast<float>(i) - 0.7f;
    step_here[i] = 0.37f + 0.013f * static_cast<float>(i);
  }
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, client->FromVector<float>(x_here, {16}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array step, client->FromVector<float>(step_here, {16}));
  for (int round = 0; round < 200; ++round) {
    // Each add names the previous one's result, which the daemon may not have answered yet;
    // the assignment frees that previous result through the stream.
    GPUKIT_ASSERT_OK_AND_ASSIGN(x, client->Add(x, step));
    for (int i = 0; i < 16; ++i) x_here[i] += step_here[i];
  }
  GPUKIT_ASSERT_OK(client->Sync());
  EXPECT_THAT(x.shape(), ElementsAreArray({16}));
  EXPECT_EQ(x.dtype(), DType::kFloat32);
  EXPECT_THAT(x.ToVector<float>(), IsOkAndHolds(ElementsAreArray(x_here)));
  // The 199 intermediate results were freed on the stream: only x and step are left.
  EXPECT_EQ(ArraysOf(client->session_id()), 2);
}

TEST_P(PipelineTest, ErrorInTheMiddleOfAChainIsReportedBySyncWithItsOpAndTheStreamRecovers) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectPipelined("chain-error"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array ones,
                              client->FromVector<float>(std::vector<float>(16, 1), {16}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array three, client->FromVector<float>({1, 2, 3}, {3}));
  // Ops #0 to #4 add 1 each; #5 adds shapes that do not broadcast; #6 to #8 come after it.
  std::vector<Array> chain;
  for (int i = 0; i < 5; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array next, client->Add(i == 0 ? ones : chain.back(), 1.0f));
    chain.push_back(std::move(next));
  }
  // Writing the bad op succeeds: the daemon's refusal comes later.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array bad, client->Add(chain.back(), three));
  std::vector<Array> after;
  for (int i = 0; i < 3; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array next,
                                client->Add(i == 0 ? chain.back() : after.back(), 1.0f));
    after.push_back(std::move(next));
  }

  // The refused op's array reports the refusal, names the op, and has no layout.
  EXPECT_THAT(bad.status(),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("op #5 (add): ")));
  EXPECT_THAT(bad.shape(), IsEmpty());
  // The ops after it were not run.
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_THAT(after[i].status(),
                StatusIs(absl::StatusCode::kAborted,
                         AllOf(StartsWith(absl::StrCat("op #", 6 + i, " (add): ")),
                               HasSubstr("op #5 (add)"))));
  }
  // Sync names the first failure since the previous sync point, with its code.
  EXPECT_THAT(client->Sync(),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("op #5 (add): ")));
  EXPECT_THAT(chain[0].ToVector<float>(),
              IsOkAndHolds(ElementsAreArray(std::vector<float>(16, 2))));
  EXPECT_THAT(bad.ToVector<float>(),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("op #5 (add): ")));
  // After the sync point the stream takes ops again, on the results made before the error.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array again, client->Add(chain.back(), 10.0f));
  GPUKIT_ASSERT_OK(client->Sync());
  EXPECT_THAT(again.ToVector<float>(), IsOkAndHolds(ElementsAreArray(std::vector<float>(16, 16))));
  // Refused arrays were never made: destroying them frees nothing and fails nothing.
  after.clear();
  { Array gone = std::move(bad); }
  GPUKIT_EXPECT_OK(client->Sync());
}

TEST_P(PipelineTest, UnaryCallAfterARefusedOpReturnsTheFailureOnceAsASyncPoint) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectPipelined("read-error"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<int32_t>({1, 2, 3, 4}, {2, 2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client->Add(a, 1));          // op #0
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array bad, client->Reshape(b, {3}));  // op #1
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array not_run, client->Add(b, 1));    // op #2
  // The read of a fine array waits for the ops' answers, finds the refusal and returns it.
  EXPECT_THAT(a.ToVector<int32_t>(),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("op #1 (reshape): ")));
  // That was a sync point: the next read works, Sync has nothing more to say.
  EXPECT_THAT(b.ToVector<int32_t>(), IsOkAndHolds(ElementsAreArray({2, 3, 4, 5})));
  GPUKIT_EXPECT_OK(client->Sync());
  EXPECT_THAT(not_run.ToVector<int32_t>(),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("not run")));
  EXPECT_THAT(bad.ToVector<int32_t>(),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("op #1 (reshape): ")));
  // The stream takes ops again.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array c, client->Mul(b, 10));
  EXPECT_THAT(c.ToVector<int32_t>(), IsOkAndHolds(ElementsAreArray({20, 30, 40, 50})));
  GPUKIT_EXPECT_OK(client->Sync());
}

TEST_P(PipelineTest, ResultUsedBeforeItsProducerRanGivesTheRightValues) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectPipelined("early-handle"));
  constexpr int64_t n = 256;
  const std::vector<float> a_here = SmallIntegers(n, 1), b_here = SmallIntegers(n, 3);
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<float>(a_here, {n, n}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client->FromVector<float>(b_here, {n, n}));
  // The add names the matmul's result at once, while the matmul is queued or running.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array c, client->Matmul(a, b));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array d, client->Add(c, a));
  std::vector<float> expected = MatmulHere(a_here, b_here, n);
  for (int64_t i = 0; i < n * n; ++i) expected[i] += a_here[i];
  // No Sync: the read is ordered after the ops on the session's stream.
  EXPECT_THAT(d.ToVector<float>(), IsOkAndHolds(ElementsAreArray(expected)));
  EXPECT_THAT(c.shape(), ElementsAreArray({n, n}));
  GPUKIT_EXPECT_OK(client->Sync());
}

TEST_P(PipelineTest, FreesOfArraysThatQueuedOpsUseKeepTheirValues) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectPipelined("free-in-use"));
  constexpr int64_t n = 256;
  const std::vector<float> a_here = SmallIntegers(n, 2), b_here = SmallIntegers(n, 4);
  std::optional<Array> a, b, c;
  GPUKIT_ASSERT_OK_AND_ASSIGN(a, client->FromVector<float>(a_here, {n, n}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(b, client->FromVector<float>(b_here, {n, n}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(c, client->Matmul(*a, *b));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array d, client->Matmul(*c, *a));
  // Every input is freed while the ops that read it may still be queued.
  GPUKIT_ASSERT_OK(c->Free());
  a.reset();
  b.reset();
  GPUKIT_ASSERT_OK(client->Sync());
  EXPECT_THAT(d.ToVector<float>(),
              IsOkAndHolds(ElementsAreArray(MatmulHere(MatmulHere(a_here, b_here, n), a_here, n))));
  EXPECT_EQ(ArraysOf(client->session_id()), 1);
  // A freed Array refuses calls and keeps its layout.
  EXPECT_THAT(c->ToVector<float>(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(c->shape(), ElementsAreArray({n, n}));
}

TEST_P(PipelineTest, ABurstLargerThanADatagramRunsWholeAndInOrder) {
  // Thousands of ops written faster than the daemon answers them gather into requests of up
  // to 1024 ops, above the submit socket's datagram (60 KiB): each goes as several.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectPipelined("long-burst"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, client->FromVector<int32_t>({0, 1, 2, 3}, {4}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array one, client->FromVector<int32_t>({1, 1, 1, 1}, {4}));
  constexpr int kOps = 3000;
  for (int i = 0; i < kOps; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(x, client->Add(x, one));
  }
  GPUKIT_ASSERT_OK(client->Sync());
  EXPECT_THAT(x.ToVector<int32_t>(),
              IsOkAndHolds(ElementsAreArray({kOps, kOps + 1, kOps + 2, kOps + 3})));
  EXPECT_EQ(ArraysOf(client->session_id()), 2);
}

TEST_P(PipelineTest, AnOpAboveADatagramIsRefusedAloneAndTheStreamGoesOn) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectPipelined("big-op"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, client->FromVector<int32_t>({1, 2}, {2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array y, client->Add(x, 1));
  // A shape of 12,000 dimensions of 2^40: about 80 KiB of attributes, refused either way (over
  // the socket before it is sent, over gRPC by the daemon).
  absl::StatusOr<Array> big = client->Reshape(y, std::vector<int64_t>(12000, int64_t{1} << 40));
  absl::Status refused = big.ok() ? big->status() : big.status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  if (OverSocket()) {
    EXPECT_THAT(refused.message(), HasSubstr("submit socket")) << refused;
  } else {
    // The daemon's refusal is the sync point's too.
    EXPECT_THAT(client->Sync(), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  // The ops before and after it run.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array z, client->Add(y, 1));
  GPUKIT_ASSERT_OK(client->Sync());
  EXPECT_THAT(z.ToVector<int32_t>(), IsOkAndHolds(ElementsAreArray({3, 4})));
}

INSTANTIATE_TEST_SUITE_P(BothTransports, PipelineTest,
                         ::testing::Values(Transport::kSubmitSocket, Transport::kGrpc),
                         TransportName);

// A partition that runs one task at a time: each op of a burst waits for the one before it,
// which must not be held back in the burst's batch meanwhile; and the end of the stream lets
// every op sent run, even those still waiting for admission (closing is not the client's
// going away, which cancels them).
class PipelineCloseTest : public PipelineTest {
 protected:
  std::string DaemonConfigJson() const override {
    return R"({"sessions": {"minLease": "200ms"},
               "partitions": [{"name": "one", "memory": "256MiB", "compute": 0.5,
                               "maxRunningTasks": 1}]})";
  }
};

TEST_P(PipelineCloseTest, OpsThatWaitForTheOpsBeforeThemInTheirBatchRunAtOnce) {
  ClientOptions options;
  options.partition = "one";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client,
                              ConnectPipelined("one-at-a-time", true, options));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array x, client->FromVector<int32_t>({0, 1}, {2}));
  const absl::Time start = absl::Now();
  for (int i = 0; i < 40; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(x, client->Add(x, 1));
  }
  GPUKIT_ASSERT_OK(client->Sync());
  EXPECT_THAT(x.ToVector<int32_t>(), IsOkAndHolds(ElementsAreArray({40, 41})));
  // Held, the second op waited for the first until a timeout (10 s) cancelled it.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_P(PipelineCloseTest, ClosingLetsOpsWaitingForAdmissionRun) {
  ClientOptions options;
  options.partition = "one";
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client,
                              ConnectPipelined("close-runs-all", true, options));
  constexpr int64_t n = 192;
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<float>(SmallIntegers(n, 5), {n, n}));
  const std::string session_id = client->session_id();
  {
    std::vector<Array> products;
    for (int i = 0; i < 20; ++i) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(Array c, client->Matmul(a, a));
      products.push_back(std::move(c));
    }
  }
  client.reset();  // closes the stream at once, then the session
  v1::ListTasksRequest request;
  request.set_limit(100);
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ListTasksResponse tasks, api().ListTasks(request));
  int succeeded = 0;
  for (const v1::TaskInfo& task : tasks.tasks()) {
    if (task.session_id() != session_id || task.name() != "matmul") continue;
    EXPECT_EQ(task.state(), v1::TASK_STATE_SUCCEEDED) << task.ShortDebugString();
    succeeded += task.state() == v1::TASK_STATE_SUCCEEDED ? 1 : 0;
  }
  EXPECT_EQ(succeeded, 20);
}

INSTANTIATE_TEST_SUITE_P(BothTransports, PipelineCloseTest,
                         ::testing::Values(Transport::kSubmitSocket, Transport::kGrpc),
                         TransportName);

// Which way the stream went, from gpukitd's debug log: each transport logs the stream's end.
class PipelineTransportLogTest : public PipelineTest {
 protected:
  void ConfigureDaemon(DaemonOptions& options) const override {
    options.extra_args = {"--log-level", "debug"};
  }
};

TEST_P(PipelineTransportLogTest, TheStreamTravelsOnTheSubmitSocketUnlessTurnedOff) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, ConnectPipelined("transport"));
  const std::string session_id = client->session_id();
  {
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<int32_t>({1}, {1}));
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client->Add(a, 1));
    EXPECT_THAT(b.ToVector<int32_t>(), IsOkAndHolds(ElementsAreArray({2})));
  }
  client.reset();
  const std::string socket_end = absl::StrCat("closed its stream (session ", session_id, ")");
  const std::string grpc_end = absl::StrCat("submit stream ends: session=", session_id, " ");
  auto logged = [&](const std::string& line) {
    return daemon().Log().find(line) != std::string::npos;
  };
  ASSERT_TRUE(PollUntil([&] { return logged(socket_end) || logged(grpc_end); }, absl::Seconds(10)))
      << daemon().Log();
  EXPECT_EQ(logged(socket_end), OverSocket());
  EXPECT_EQ(logged(grpc_end), !OverSocket());
}

INSTANTIATE_TEST_SUITE_P(BothTransports, PipelineTransportLogTest,
                         ::testing::Values(Transport::kSubmitSocket, Transport::kGrpc),
                         TransportName);

class DestructorFreeTest : public PipelineFixture, public ::testing::WithParamInterface<bool> {};

TEST_P(DestructorFreeTest, DestroyedArraysAreGoneAfterSync) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client,
                              ConnectPipelined("destructor-free", /*pipeline=*/GetParam()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array kept, client->FromVector<int32_t>({1, 2, 3, 4}, {4}));
  {
    std::vector<Array> doomed;
    for (int i = 0; i < 20; ++i) {
      GPUKIT_ASSERT_OK_AND_ASSIGN(Array sum, client->Add(kept, i));
      doomed.push_back(std::move(sum));
    }
    GPUKIT_ASSERT_OK_AND_ASSIGN(Array uploaded, client->FromVector<int32_t>({5, 6}, {2}));
    doomed.push_back(std::move(uploaded));
    GPUKIT_ASSERT_OK(client->Sync());
    EXPECT_EQ(ArraysOf(client->session_id()), 22);
  }  // 21 destructors queue their frees on the stream
  GPUKIT_ASSERT_OK(client->Sync());
  EXPECT_EQ(ArraysOf(client->session_id()), 1);
  EXPECT_THAT(kept.ToVector<int32_t>(), IsOkAndHolds(ElementsAreArray({1, 2, 3, 4})));
}

INSTANTIATE_TEST_SUITE_P(BothModes, DestructorFreeTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Pipelined") : std::string("Unary");
                         });

TEST_F(PipelineFixture, SynchronousModeStillReturnsTheErrorAtTheCall) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client,
                              ConnectPipelined("unary", /*pipeline=*/false));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array a, client->FromVector<float>({1, 2}, {2}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array b, client->FromVector<float>({1, 2, 3}, {3}));
  EXPECT_THAT(client->Add(a, b), StatusIs(absl::StatusCode::kInvalidArgument));
  GPUKIT_EXPECT_OK(client->Sync());  // nothing was pipelined
}

TEST_F(PipelineFixture, ClientThatDiesWithOpsInFlightLeavesNothingBehind) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      Subprocess worker,
      Subprocess::Spawn({{WorkerPath(), "--addr", daemon().address(), "--mode", "pipeline-exit",
                          "--ops", "64", "--lease-ms", absl::StrCat(kLeaseMs)},
                         absl::StrCat(temp_dir(), "/worker.out"),
                         ""}));
  GPUKIT_ASSERT_OK_AND_ASSIGN(int code, worker.WaitForExitCode(absl::Seconds(60)));
  EXPECT_EQ(code, 0) << ReadFileOrEmpty(absl::StrCat(temp_dir(), "/worker.out"));
  EXPECT_THAT(ReadFileOrEmpty(absl::StrCat(temp_dir(), "/worker.out")), HasSubstr("submitted 64"));
  // Its lease lapses; the ops it queued run out, and the session's arrays go with it.
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Milliseconds(kLeaseMs) + absl::Seconds(60)));
  EXPECT_TRUE(PollUntil([&] { return UnfinishedTasks() == 0; }, kReapSlack));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::StatusResponse status, api().Status());
  EXPECT_EQ(status.arrays(), 0);
  ExpectDaemonServesAnotherClient();
}

}  // namespace
}  // namespace gpukit::testing
