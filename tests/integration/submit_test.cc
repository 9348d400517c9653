// ComputeService.Submit against the real daemon, with the raw stub (a blocking
// ClientReaderWriter on the test's thread): the stream's first answer is its handle prefix,
// results are named prefix + index and usable by the next op at once, ops run in order, a
// refused op is reported with its index (and fails later ops) until the sync point, after
// which the stream is clean; one stream per session; a stream without a session fails; a
// cancelled stream with ops in flight leaves no task running and its session usable.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/integration/submit_requests.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using SubmitStream = grpc::ClientReaderWriter<v1::SubmitRequest, v1::SubmitResponse>;

constexpr int kOk = 0;
constexpr int kInvalidArgument = static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT);
constexpr int kAborted = static_cast<int>(grpc::StatusCode::ABORTED);

class SubmitTest : public DaemonTest {
 protected:
  // Small enough for an op's result to be refused with a reason.
  std::string DaemonConfigJson() const override {
    return R"({"limits": {"maxArraySize": "4MiB"}})";
  }

  void SetUp() override {
    DaemonTest::SetUp();
    compute_ = v1::ComputeService::NewStub(api().channel());
    absl::StatusOr<std::string> session = api().OpenSession("submit");
    ASSERT_THAT(session, IsOk());
    session_ = *session;
  }

  void TearDown() override {
    // The stub shares the fixture's channel: an open channel holds the daemon's shutdown
    // for its grace period.
    compute_.reset();
    DaemonTest::TearDown();  // stops the daemon: it must exit 0
    if (held_stream_ != nullptr) {
      held_context_.TryCancel();
      held_stream_->Finish();
      held_stream_.reset();
    }
  }

  std::unique_ptr<SubmitStream> Open(grpc::ClientContext& context) {
    return compute_->Submit(&context);
  }

  // Opens a stream on the session and reads its first answer; returns the handle prefix.
  std::string OpenAndReadPrefix(SubmitStream& stream) {
    v1::SubmitRequest first;
    first.set_session_id(session_);
    EXPECT_TRUE(stream.Write(first));
    v1::SubmitResponse opened;
    EXPECT_TRUE(stream.Read(&opened));
    EXPECT_EQ(opened.results_size(), 0);
    return opened.handle_prefix();
  }

  std::string Array(const std::vector<float>& values) {
    absl::StatusOr<v1::ArrayInfo> info = api().CreateWithBytes(
        session_, {static_cast<int64_t>(values.size())}, v1::DTYPE_FLOAT32, FloatBytes(values));
    EXPECT_THAT(info, IsOk());
    return info.ok() ? info->handle() : "";
  }

  int RunningTasks() {
    absl::StatusOr<v1::PartitionStatus> partition = api().GetPartition("default");
    return partition.ok() ? partition->running_tasks() : -1;
  }

  std::unique_ptr<v1::ComputeService::Stub> compute_;
  std::string session_;
  // A stream left open while TearDown stops the daemon.
  grpc::ClientContext held_context_;
  std::unique_ptr<SubmitStream> held_stream_;
};

TEST_F(SubmitTest, ResultsAreNamedPrefixPlusIndexAndRunInOrder) {
  const std::string x = Array({1, 2, 3, 4});
  grpc::ClientContext context;
  std::unique_ptr<SubmitStream> stream = Open(context);
  // The first request may carry ops already; the prefix comes first, alone.
  v1::SubmitRequest first = SubmitRequestOf({RunOf("add", {x, x})});
  first.set_session_id(session_);
  ASSERT_TRUE(stream->Write(first));
  v1::SubmitResponse opened;
  ASSERT_TRUE(stream->Read(&opened));
  const std::string prefix = opened.handle_prefix();
  EXPECT_THAT(prefix, StartsWith("a-"));
  EXPECT_EQ(opened.results_size(), 0);
  v1::SubmitResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).code(), kOk);
  EXPECT_EQ(response.results(0).output().handle(), prefix + "0");

  // Each op names the one before it by prefix + index, in the same request; op 3 frees
  // op 1's result, which op 2 still reads.
  ASSERT_TRUE(stream->Write(SubmitRequestOf(
      {RunOf("add", {prefix + "0", x}), RunOf("mul", {prefix + "1", x}), FreeOf(prefix + "1")},
      /*sync=*/7)));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.results_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(response.results(i).index(), static_cast<uint64_t>(i + 1));
    EXPECT_EQ(response.results(i).code(), kOk) << response.results(i).message();
  }
  EXPECT_EQ(response.results(0).op(), "add");
  EXPECT_EQ(response.results(1).op(), "mul");
  EXPECT_EQ(response.results(2).op(), "free");
  EXPECT_EQ(response.results(1).output().handle(), prefix + "2");
  EXPECT_EQ(response.synced(), 7u);
  EXPECT_EQ(response.error().code(), kOk);
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&response));
  grpc::Status finished = stream->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();

  // ((x + x) + x) * x, from handles the client named before anything ran.
  absl::StatusOr<std::string> bytes = api().DownloadAll(session_, prefix + "2");
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(Floats(*bytes), (std::vector<float>{3, 12, 27, 48}));
  EXPECT_THAT(api().Describe(session_, prefix + "1"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(SubmitTest, RefusedOpIsReportedWithItsIndexThenTheStreamIsCleanAfterTheSync) {
  const std::string x = Array({1, 2, 3, 4});
  const std::string y = Array({1, 2, 3});  // does not broadcast with x
  grpc::ClientContext context;
  std::unique_ptr<SubmitStream> stream = Open(context);
  const std::string prefix = OpenAndReadPrefix(*stream);
  ASSERT_TRUE(stream->Write(
      SubmitRequestOf({RunOf("add", {x, x}), RunOf("add", {x, y}), RunOf("add", {x, x})},
                      /*sync=*/1)));
  v1::SubmitResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.results_size(), 3);
  EXPECT_EQ(response.results(0).code(), kOk);
  EXPECT_EQ(response.results(1).code(), kInvalidArgument);
  EXPECT_EQ(response.results(2).code(), kAborted);
  EXPECT_THAT(response.results(2).message(), HasSubstr("not run: op #1 (add) failed before it"));
  EXPECT_EQ(response.synced(), 1u);
  EXPECT_EQ(response.error().index(), 1u);
  EXPECT_EQ(response.error().op(), "add");
  EXPECT_EQ(response.error().code(), kInvalidArgument);

  ASSERT_TRUE(stream->Write(SubmitRequestOf({RunOf("add", {x, x})}, /*sync=*/2)));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).index(), 3u);
  EXPECT_EQ(response.results(0).code(), kOk);
  EXPECT_EQ(response.synced(), 2u);
  EXPECT_FALSE(response.has_error());
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  absl::StatusOr<std::string> bytes = api().DownloadAll(session_, prefix + "3");
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(Floats(*bytes), (std::vector<float>{2, 4, 6, 8}));
}

TEST_F(SubmitTest, OpWithoutKindIsRefused) {
  grpc::ClientContext context;
  std::unique_ptr<SubmitStream> stream = Open(context);
  OpenAndReadPrefix(*stream);
  ASSERT_TRUE(stream->Write(SubmitRequestOf({v1::PipelinedOp(), FreeOf("a-unknown")}, /*sync=*/3)));
  v1::SubmitResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.results(0).code(), kInvalidArgument);
  EXPECT_THAT(response.results(0).message(), HasSubstr("has no kind"));
  EXPECT_EQ(response.results(1).code(), kAborted);
  EXPECT_EQ(response.results(1).op(), "free");
  EXPECT_EQ(response.error().index(), 0u);
  EXPECT_EQ(response.error().code(), kInvalidArgument);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(SubmitTest, RefusalCarriesItsReason) {
  // [1100, 1] + [1, 1100] broadcasts to 1100 x 1100 floats: 4.6 MiB, above maxArraySize.
  absl::StatusOr<v1::ArrayInfo> column = api().CreateWithBytes(
      session_, {1100, 1}, v1::DTYPE_FLOAT32, FloatBytes(std::vector<float>(1100, 1.0f)));
  ASSERT_THAT(column, IsOk());
  absl::StatusOr<v1::ArrayInfo> row = api().CreateWithBytes(
      session_, {1, 1100}, v1::DTYPE_FLOAT32, FloatBytes(std::vector<float>(1100, 1.0f)));
  ASSERT_THAT(row, IsOk());
  grpc::ClientContext context;
  std::unique_ptr<SubmitStream> stream = Open(context);
  OpenAndReadPrefix(*stream);
  ASSERT_TRUE(stream->Write(
      SubmitRequestOf({RunOf("add", {column->handle(), row->handle()})}, /*sync=*/5)));
  v1::SubmitResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(response.results(0).reason(), "REASON_ARRAY_TOO_LARGE");
  EXPECT_EQ(response.error().reason(), "REASON_ARRAY_TOO_LARGE");
  EXPECT_EQ(response.error().index(), 0u);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(SubmitTest, HalfCloseEndsTheStreamOkOnceItsOpsHaveRun) {
  const std::string x = Array(std::vector<float>(1 << 16, 1.0f));
  grpc::ClientContext context;
  std::unique_ptr<SubmitStream> stream = Open(context);
  const std::string prefix = OpenAndReadPrefix(*stream);
  std::vector<v1::PipelinedOp> ops;
  std::string last = x;
  for (int i = 0; i < 100; ++i) {
    ops.push_back(RunOf("add", {last, x}));
    last = prefix + std::to_string(i);
  }
  ASSERT_TRUE(stream->Write(SubmitRequestOf(ops)));  // no sync point
  stream->WritesDone();
  v1::SubmitResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.results_size(), 100);
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
  // The stream ended after its ops ran: no task of it is left, no wait needed.
  EXPECT_EQ(RunningTasks(), 0);
  absl::StatusOr<std::string> bytes = api().DownloadAll(session_, last);
  ASSERT_THAT(bytes, IsOk());
  EXPECT_EQ(Floats(*bytes)[0], 101.0f);
}

TEST_F(SubmitTest, OneStreamPerSession) {
  grpc::ClientContext first_context;
  std::unique_ptr<SubmitStream> first = Open(first_context);
  EXPECT_THAT(OpenAndReadPrefix(*first), StartsWith("a-"));

  grpc::ClientContext second_context;
  std::unique_ptr<SubmitStream> second = Open(second_context);
  v1::SubmitRequest request;
  request.set_session_id(session_);
  second->Write(request);
  v1::SubmitResponse response;
  EXPECT_FALSE(second->Read(&response));
  EXPECT_EQ(second->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  first->WritesDone();
  EXPECT_TRUE(first->Finish().ok());
  // The slot is free once the first stream ended.
  grpc::ClientContext third_context;
  std::unique_ptr<SubmitStream> third = Open(third_context);
  EXPECT_THAT(OpenAndReadPrefix(*third), StartsWith("a-"));
  third->WritesDone();
  EXPECT_TRUE(third->Finish().ok());
}

TEST_F(SubmitTest, StreamErrors) {
  struct Case {
    std::string name;
    v1::SubmitRequest first;
    grpc::StatusCode code;
  };
  std::vector<Case> cases;
  cases.push_back({"no session_id", SubmitRequestOf({RunOf("add", {"a-x", "a-x"})}),
                   grpc::StatusCode::INVALID_ARGUMENT});
  v1::SubmitRequest unknown;
  unknown.set_session_id("s-00000000000000000000000000000000");
  cases.push_back({"unknown session", unknown, grpc::StatusCode::NOT_FOUND});
  v1::SubmitRequest too_many = SubmitRequestOf(std::vector<v1::PipelinedOp>(1025, FreeOf("a-x")));
  too_many.set_session_id(session_);
  cases.push_back({"1025 ops", too_many, grpc::StatusCode::INVALID_ARGUMENT});
  v1::SubmitRequest control;
  control.set_session_id(session_ + "\x1b");
  cases.push_back({"a control character", control, grpc::StatusCode::INVALID_ARGUMENT});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    grpc::ClientContext context;
    std::unique_ptr<SubmitStream> stream = Open(context);
    stream->Write(c.first);
    v1::SubmitResponse response;
    while (stream->Read(&response)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), c.code);
  }
  ExpectDaemonServesAnotherClient();
}

TEST_F(SubmitTest, LaterRequestNamingAnotherSessionEndsTheStream) {
  grpc::ClientContext context;
  std::unique_ptr<SubmitStream> stream = Open(context);
  OpenAndReadPrefix(*stream);
  absl::StatusOr<std::string> other = api().OpenSession("submit");
  ASSERT_THAT(other, IsOk());
  v1::SubmitRequest request;
  request.set_session_id(*other);
  stream->Write(request);
  v1::SubmitResponse response;
  EXPECT_FALSE(stream->Read(&response));
  grpc::Status finished = stream->Finish();
  EXPECT_EQ(finished.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(finished.error_message(), HasSubstr("differs from the stream's session"));
}

TEST_F(SubmitTest, CancelledStreamWithOpsInFlightLeavesNothingRunning) {
  // Large enough that the ops are still queued when the client goes.
  const std::string x = Array(std::vector<float>(1 << 18, 1.0f));
  grpc::ClientContext context;
  std::unique_ptr<SubmitStream> stream = Open(context);
  const std::string prefix = OpenAndReadPrefix(*stream);
  // Two requests of 200 chained adds: the first answered (its ops queued, the last ones
  // still in flight), the second written and the stream cancelled right away.
  std::string last = x;
  int index = 0;
  auto chain = [&] {
    std::vector<v1::PipelinedOp> ops;
    for (int i = 0; i < 200; ++i, ++index) {
      ops.push_back(RunOf("add", {last, x}));
      last = prefix + std::to_string(index);
    }
    return SubmitRequestOf(ops);
  };
  ASSERT_TRUE(stream->Write(chain()));
  v1::SubmitResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_EQ(response.results_size(), 200);
  EXPECT_EQ(response.results(199).code(), kOk);
  ASSERT_TRUE(stream->Write(chain()));
  context.TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);

  // The ops queued run to their end and their tasks finish; the session stays usable, and
  // its pipeline slot comes free.
  EXPECT_TRUE(PollUntil([&] { return RunningTasks() == 0; }, absl::Seconds(20)));
  EXPECT_TRUE(PollUntil(
      [&] {
        grpc::ClientContext again_context;
        std::unique_ptr<SubmitStream> again = Open(again_context);
        v1::SubmitRequest first;
        first.set_session_id(session_);
        again->Write(first);
        v1::SubmitResponse opened;
        const bool ok = again->Read(&opened);
        again->WritesDone();
        while (again->Read(&opened)) {
        }
        return again->Finish().ok() && ok;
      },
      absl::Seconds(20)));
  // Results of ops that were queued stay in the session until it closes.
  EXPECT_THAT(api().Describe(session_, prefix + "199"), IsOk());
  ASSERT_THAT(api().Close(session_), IsOk());
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(20)));
  EXPECT_EQ(RunningTasks(), 0);
}

TEST_F(SubmitTest, DaemonStopsCleanlyWithAStreamOpenAndOpsInFlight) {
  const std::string x = Array(std::vector<float>(1 << 18, 1.0f));
  held_stream_ = Open(held_context_);
  const std::string prefix = OpenAndReadPrefix(*held_stream_);
  std::vector<v1::PipelinedOp> ops;
  std::string last = x;
  for (int i = 0; i < 200; ++i) {
    ops.push_back(RunOf("add", {last, x}));
    last = prefix + std::to_string(i);
  }
  ASSERT_TRUE(held_stream_->Write(SubmitRequestOf(ops)));
  // TearDown sends SIGTERM now: the server cancels the stream after its grace period, the
  // ops drain, and gpukitd exits 0 (which TearDown checks).
}

// Seeded: streams of several sessions at once, each ending its own way (half-close, or the
// client going away after some request), with chains, frees and refused ops mixed in.
// Whatever the interleaving, every stream ends, nothing stays running, and once the
// sessions close the daemon holds nothing.
TEST_F(SubmitTest, ConcurrentStreamsEndingAnyWayLeaveNothingBehind) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  constexpr int kStreams = 6;
  std::vector<std::string> sessions;
  std::vector<std::string> inputs;
  for (int i = 0; i < kStreams; ++i) {
    absl::StatusOr<std::string> session = api().OpenSession("submit-many");
    ASSERT_THAT(session, IsOk());
    sessions.push_back(*session);
    absl::StatusOr<v1::ArrayInfo> x = api().CreateWithBytes(
        *session, {4096}, v1::DTYPE_FLOAT32, FloatBytes(std::vector<float>(4096, 1.0f)));
    ASSERT_THAT(x, IsOk());
    inputs.push_back(x->handle());
  }
  std::mt19937 rng(seed);
  struct Plan {
    int requests;
    int cancel_after;  // requests answered before the client goes; -1: half-close
  };
  std::vector<Plan> plans;
  for (int i = 0; i < kStreams; ++i) {
    const int requests = std::uniform_int_distribution<int>(1, 6)(rng);
    const bool cancel = std::bernoulli_distribution(0.5)(rng);
    plans.push_back(
        {requests, cancel ? std::uniform_int_distribution<int>(0, requests - 1)(rng) : -1});
  }
  std::vector<grpc::StatusCode> ended(kStreams, grpc::StatusCode::UNKNOWN);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i, stream_seed = rng()] {
      std::mt19937 local(stream_seed);
      grpc::ClientContext context;
      std::unique_ptr<SubmitStream> stream = compute_->Submit(&context);
      v1::SubmitRequest first;
      first.set_session_id(sessions[i]);
      v1::SubmitResponse response;
      if (!stream->Write(first) || !stream->Read(&response)) {
        ended[i] = stream->Finish().error_code();
        return;
      }
      const std::string prefix = response.handle_prefix();
      std::string last = inputs[i];
      int index = 0;
      for (int r = 0; r < plans[i].requests; ++r) {
        std::vector<v1::PipelinedOp> ops;
        const int count = std::uniform_int_distribution<int>(1, 80)(local);
        for (int k = 0; k < count; ++k) {
          const int kind = std::uniform_int_distribution<int>(0, 9)(local);
          if (kind == 0) {
            ops.push_back(FreeOf("a-unknown"));  // refused: fails the stream until the sync
          } else if (kind == 1 && last != inputs[i]) {
            ops.push_back(FreeOf(last));
            last = inputs[i];
          } else {
            ops.push_back(RunOf("add", {last, inputs[i]}));
            last = prefix + std::to_string(index);
          }
          ++index;
        }
        const bool sync = std::bernoulli_distribution(0.5)(local);
        if (!stream->Write(SubmitRequestOf(ops, sync ? r + 1 : 0))) break;
        if (plans[i].cancel_after == r) {
          context.TryCancel();
          break;
        }
        if (!stream->Read(&response)) break;
        EXPECT_EQ(response.results_size(), count);
      }
      if (plans[i].cancel_after < 0) {
        stream->WritesDone();
        while (stream->Read(&response)) {
        }
      }
      ended[i] = stream->Finish().error_code();
    });
  }
  for (std::thread& client : clients) client.join();
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(::testing::Message() << "stream " << i << " of " << plans[i].requests
                                      << " requests, cancel_after " << plans[i].cancel_after);
    EXPECT_EQ(ended[i],
              plans[i].cancel_after < 0 ? grpc::StatusCode::OK : grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(PollUntil([&] { return RunningTasks() == 0; }, absl::Seconds(30)));
  for (const std::string& session : sessions) EXPECT_THAT(api().Close(session), IsOk());
  EXPECT_THAT(api().Close(session_), IsOk());  // the fixture's
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(30)));
}

}  // namespace
}  // namespace gpukit::testing
