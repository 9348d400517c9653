// ComputeService.Submit against the real daemon, with the raw stub (a blocking
// ClientReaderWriter on the test's thread): the stream's first answer is its handle prefix,
// results are named prefix + index and usable by the next op at once, ops run in order, a
// refused op is reported with its index (and fails later ops) until the sync point, after
// which the stream is clean; one stream per session; a stream without a session fails; a
// cancelled stream with ops in flight leaves no task running and its session usable.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using SubmitStream = grpc::ClientReaderWriter<v1::SubmitRequest, v1::SubmitResponse>;

constexpr int kOk = 0;
constexpr int kInvalidArgument = static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT);
constexpr int kAborted = static_cast<int>(grpc::StatusCode::ABORTED);

std::string FloatBytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

v1::PipelinedOp Op(const std::string& op, const std::vector<std::string>& handles) {
  v1::PipelinedOp pipelined;
  pipelined.mutable_run()->set_op(op);
  for (const std::string& handle : handles) {
    *pipelined.mutable_run()->add_inputs() = HandleOperand(handle);
  }
  return pipelined;
}

v1::PipelinedOp Free(const std::string& handle) {
  v1::PipelinedOp pipelined;
  pipelined.set_free(handle);
  return pipelined;
}

v1::SubmitRequest Request(const std::vector<v1::PipelinedOp>& ops, uint64_t sync = 0) {
  v1::SubmitRequest request;
  for (const v1::PipelinedOp& op : ops) *request.add_ops() = op;
  request.set_sync(sync);
  return request;
}

class SubmitTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    compute_ = v1::ComputeService::NewStub(api().channel());
    absl::StatusOr<std::string> session = api().OpenSession("submit");
    ASSERT_THAT(session, IsOk());
    session_ = *session;
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
};

TEST_F(SubmitTest, ResultsAreNamedPrefixPlusIndexAndRunInOrder) {
  const std::string x = Array({1, 2, 3, 4});
  grpc::ClientContext context;
  std::unique_ptr<SubmitStream> stream = Open(context);
  // The first request may carry ops already; the prefix comes first, alone.
  v1::SubmitRequest first = Request({Op("add", {x, x})});
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
  ASSERT_TRUE(stream->Write(
      Request({Op("add", {prefix + "0", x}), Op("mul", {prefix + "1", x}), Free(prefix + "1")},
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
  ASSERT_TRUE(stream->Write(Request({Op("add", {x, x}), Op("add", {x, y}), Op("add", {x, x})},
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

  ASSERT_TRUE(stream->Write(Request({Op("add", {x, x})}, /*sync=*/2)));
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
  cases.push_back(
      {"no session_id", Request({Op("add", {"a-x", "a-x"})}), grpc::StatusCode::INVALID_ARGUMENT});
  v1::SubmitRequest unknown;
  unknown.set_session_id("s-00000000000000000000000000000000");
  cases.push_back({"unknown session", unknown, grpc::StatusCode::NOT_FOUND});
  v1::SubmitRequest too_many = Request(std::vector<v1::PipelinedOp>(1025, Free("a-x")));
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

TEST_F(SubmitTest, CancelledStreamWithOpsInFlightLeavesNothingRunning) {
  // Large enough that the ops are still queued when the client goes.
  const std::string x = Array(std::vector<float>(1 << 18, 1.0f));
  grpc::ClientContext context;
  std::unique_ptr<SubmitStream> stream = Open(context);
  const std::string prefix = OpenAndReadPrefix(*stream);
  std::vector<v1::PipelinedOp> ops;
  std::string last = x;
  for (int i = 0; i < 200; ++i) {
    ops.push_back(Op("add", {last, x}));
    last = prefix + std::to_string(i);
  }
  ASSERT_TRUE(stream->Write(Request(ops)));
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
  ASSERT_THAT(api().Close(session_), IsOk());
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(20)));
  EXPECT_EQ(RunningTasks(), 0);
}

}  // namespace
}  // namespace gpukit::testing
