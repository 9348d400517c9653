// SubmitStream against an in-process fake of ComputeService.Submit that follows the proto's
// contract in miniature: the first response carries the handle prefix, every op gets one
// OpResult in order, a refused op fails the stream until the next sync point (later ops:
// ABORTED "not run"), a sync point is answered with the first failure since the previous
// one. Ops are named to steer it: "bad" is refused, "hold" gets no answer, "die" ends the
// stream with UNAVAILABLE; a free of "missing" is refused with NOT_FOUND.
#include "client/cpp/submit_stream.h"

#include <unistd.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cpp/channel.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::internal {
namespace {

using ::gpukit::testing::IsOkAndHolds;
using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

class FakeCompute final : public v1::ComputeService::Service {
 public:
  grpc::Status Submit(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<v1::SubmitResponse, v1::SubmitRequest>* stream) override {
    v1::SubmitRequest request;
    if (!stream->Read(&request)) return grpc::Status::OK;
    if (request.session_id() != "s-1") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown session");
    }
    v1::SubmitResponse opened;
    opened.set_handle_prefix("r-1-");
    stream->Write(opened);
    uint64_t index = 0;
    v1::OpResult first_failure;
    bool holding = false;  // after "hold": nothing is answered any more
    do {
      requests_read.fetch_add(1);
      if (request.ops_size() > 1024) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "more than 1024 ops");
      }
      v1::SubmitResponse response;
      for (const v1::PipelinedOp& op : request.ops()) {
        const std::string name = op.has_run() ? op.run().op() : "free";
        const uint64_t op_index = index++;
        if (name == "die") return grpc::Status(grpc::StatusCode::UNAVAILABLE, "daemon went away");
        if (name == "hold") holding = true;
        if (holding) continue;
        v1::OpResult result;
        result.set_index(op_index);
        result.set_op(name);
        if (first_failure.code() != 0) {
          result.set_code(grpc::StatusCode::ABORTED);
          result.set_message(absl::StrCat("not run: op #", first_failure.index(), " (",
                                          first_failure.op(), ") failed before it"));
        } else if (name == "bad") {
          result.set_code(grpc::StatusCode::INVALID_ARGUMENT);
          result.set_message("shapes [2] and [3] cannot be broadcast together");
          first_failure = result;
        } else if (name == "free" && op.free() == "missing") {
          result.set_code(grpc::StatusCode::NOT_FOUND);
          result.set_message("array handle \"missing\" not found in this session");
          first_failure = result;
        } else if (name != "free") {
          result.mutable_output()->set_handle(absl::StrCat("r-1-", op_index));
          result.mutable_output()->add_shape(2);
          result.mutable_output()->set_dtype(v1::DTYPE_INT32);
          result.mutable_output()->set_size_bytes(8);
        }
        *response.add_results() = std::move(result);
      }
      if (request.sync() != 0 && !holding) {
        response.set_synced(request.sync());
        if (first_failure.code() != 0) *response.mutable_error() = first_failure;
        first_failure.Clear();
      }
      if (response.results_size() > 0 || response.synced() != 0) stream->Write(response);
      absl::SleepFor(answer_delay);
    } while (stream->Read(&request));
    return grpc::Status::OK;
  }

  std::atomic<int> requests_read{0};
  absl::Duration answer_delay;  // before reading the next request: a daemon that is behind
};

// A pipelined run op named `name` (the fakes answer by name).
v1::PipelinedRunOp OpNamed(const std::string& name) {
  v1::PipelinedRunOp op;
  op.set_op(name);
  return op;
}

class SubmitStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&fake_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::ComputeService::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<SubmitStream> Open(const std::string& session = "s-1") {
    absl::StatusOr<std::unique_ptr<SubmitStream>> stream =
        SubmitStream::Open(*stub_, session, absl::Seconds(10));
    EXPECT_TRUE(stream.ok()) << stream.status();
    return stream.ok() ? *std::move(stream) : nullptr;
  }

  static v1::PipelinedRunOp Op(const std::string& name) { return OpNamed(name); }

  FakeCompute fake_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ComputeService::Stub> stub_;
};

TEST_F(SubmitStreamTest, ResultHandlesAreThePrefixAndTheIndexCountingFrees) {
  std::unique_ptr<SubmitStream> stream = Open();
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted a, stream->Run(Op("add")));
  GPUKIT_ASSERT_OK(stream->Free("x"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted b, stream->Run(Op("mul")));
  EXPECT_EQ(a.handle, "r-1-0");
  EXPECT_EQ(b.handle, "r-1-2");  // the free was op #1
  const absl::StatusOr<ArrayLayout>& layout = b.result->Wait();
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(layout->shape, ElementsAre(2));
  EXPECT_EQ(layout->dtype, DType::kInt32);
  EXPECT_EQ(layout->size_bytes, 8);
  GPUKIT_EXPECT_OK(stream->Sync());
  GPUKIT_EXPECT_OK(stream->Close());
  EXPECT_TRUE(stream->ended());
}

TEST_F(SubmitStreamTest, OpsGatherIntoFewRequestsWhileTheDaemonIsBehind) {
  // Over a unix socket, where gRPC takes writes ahead of the daemon's reads (in process it
  // does not), as with gpukitd.
  FakeCompute fake;
  fake.answer_delay = absl::Milliseconds(5);
  const std::string path = absl::StrCat(::testing::TempDir(), "/submit-", ::getpid(), ".sock");
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(&fake);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::ComputeService::Stub> stub = v1::ComputeService::NewStub(
      grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SubmitStream> stream,
                              SubmitStream::Open(*stub, "s-1", absl::Seconds(10)));
  // A caller a little faster than one request per op allows (a Python loop, say): alone,
  // each op would go out as a request of its own.
  constexpr int kOps = 400;
  std::vector<SubmitStream::Submitted> submitted;
  for (int i = 0; i < kOps; ++i) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted op, stream->Run(Op("add")));
    submitted.push_back(std::move(op));
    absl::SleepFor(absl::Microseconds(20));
  }
  GPUKIT_ASSERT_OK(stream->Sync());
  for (const SubmitStream::Submitted& op : submitted) GPUKIT_ASSERT_OK(op.result->Wait().status());
  // About kMaxUnansweredOps ops go out one by one before the writer waits for answers;
  // then each answer (one per 5 ms) lets out the ops gathered meanwhile, together.
  EXPECT_LE(fake.requests_read.load(), 200) << "one request per op would be " << kOps;
  GPUKIT_EXPECT_OK(stream->Close());
  stream.reset();
  server->Shutdown();
}

TEST_F(SubmitStreamTest, ABurstOfOpsFromSeveralThreadsIsAnsweredOpByOp) {
  std::unique_ptr<SubmitStream> stream = Open();
  constexpr int kThreads = 4, kOpsPerThread = 3000;  // more than the outbox holds
  std::vector<std::vector<SubmitStream::Submitted>> submitted(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOpsPerThread; ++i) {
        absl::StatusOr<SubmitStream::Submitted> op = stream->Run(Op("add"));
        if (!op.ok()) return;
        submitted[t].push_back(*std::move(op));
        if (i % 3 == 0) stream->Free(submitted[t].back().handle).IgnoreError();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  GPUKIT_ASSERT_OK(stream->Sync());
  absl::flat_hash_set<std::string> handles;
  for (const auto& ops : submitted) {
    ASSERT_EQ(ops.size(), kOpsPerThread);
    for (const SubmitStream::Submitted& op : ops) {
      ASSERT_TRUE(op.result->resolved());
      GPUKIT_ASSERT_OK(op.result->Wait().status());
      handles.insert(op.handle);
    }
  }
  EXPECT_EQ(handles.size(), kThreads * kOpsPerThread);  // every op has its own index
  GPUKIT_EXPECT_OK(stream->Close());
}

TEST_F(SubmitStreamTest, SyncReportsTheFirstFailureWithItsIndexNameAndCodeThenTheStreamIsClean) {
  std::unique_ptr<SubmitStream> stream = Open();
  GPUKIT_ASSERT_OK(stream->Run(Op("add")).status());
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted bad, stream->Run(Op("bad")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted after, stream->Run(Op("add")));
  EXPECT_THAT(stream->Sync(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "op #1 (bad): shapes [2] and [3] cannot be broadcast together"));
  EXPECT_THAT(bad.result->Wait().status(),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("op #1 (bad): ")));
  EXPECT_TRUE(bad.result->failed());
  EXPECT_THAT(after.result->Wait().status(), StatusIs(absl::StatusCode::kAborted,
                                                      "op #2 (add): not run: op #1 (bad) failed "
                                                      "before it"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted again, stream->Run(Op("add")));
  GPUKIT_EXPECT_OK(again.result->Wait().status());
  GPUKIT_EXPECT_OK(stream->Sync());
}

TEST_F(SubmitStreamTest, WaitForResultsReturnsARefusalOnceAsASyncPoint) {
  std::unique_ptr<SubmitStream> stream = Open();
  GPUKIT_EXPECT_OK(stream->WaitForResults());  // nothing written yet
  GPUKIT_ASSERT_OK(stream->Run(Op("bad")).status());
  GPUKIT_ASSERT_OK(stream->Run(Op("add")).status());
  EXPECT_THAT(stream->WaitForResults(),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("op #0 (bad): ")));
  GPUKIT_EXPECT_OK(stream->WaitForResults());
  GPUKIT_EXPECT_OK(stream->Sync());  // the sync point WaitForResults sent took the failure
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted next, stream->Run(Op("add")));
  GPUKIT_EXPECT_OK(next.result->Wait().status());
}

TEST_F(SubmitStreamTest, AFailedFreeIsForSyncOnly) {
  std::unique_ptr<SubmitStream> stream = Open();
  GPUKIT_ASSERT_OK(stream->Free("missing"));
  GPUKIT_ASSERT_OK(stream->Run(Op("add")).status());
  GPUKIT_EXPECT_OK(stream->WaitForResults());
  EXPECT_THAT(stream->Sync(), StatusIs(absl::StatusCode::kNotFound, StartsWith("op #0 (free): ")));
  GPUKIT_EXPECT_OK(stream->Sync());
}

TEST_F(SubmitStreamTest, AStreamThatEndsFailsItsUnansweredOpsAndKeepsItsUnansweredFrees) {
  std::unique_ptr<SubmitStream> stream = Open();
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted held, stream->Run(Op("hold")));
  GPUKIT_ASSERT_OK(stream->Free("a-7"));  // not answered either
  GPUKIT_ASSERT_OK(stream->Run(Op("die")).status());
  EXPECT_THAT(held.result->Wait().status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(StartsWith("op #0 (hold): not answered"), HasSubstr("went away"))));
  EXPECT_THAT(stream->Sync(), StatusIs(absl::StatusCode::kUnavailable, "daemon went away"));
  EXPECT_TRUE(stream->ended());
  EXPECT_THAT(stream->Run(Op("add")).status(), StatusIs(absl::StatusCode::kUnavailable));
  GPUKIT_EXPECT_OK(stream->WaitForResults());  // a call on another array goes ahead
  // The daemon may not have applied the free: the owner frees it another way.
  EXPECT_THAT(stream->TakeUnansweredFrees(), ElementsAre("a-7"));
  EXPECT_THAT(stream->TakeUnansweredFrees(), IsEmpty());
}

TEST_F(SubmitStreamTest, AStreamRefusedAtOnceFailsItsFirstOpSyncAndClose) {
  std::unique_ptr<SubmitStream> stream = Open("s-unknown");
  EXPECT_THAT(stream->Run(Op("add")).status(),
              StatusIs(absl::StatusCode::kNotFound, "unknown session"));
  EXPECT_THAT(stream->Sync(), StatusIs(absl::StatusCode::kNotFound, "unknown session"));
  EXPECT_THAT(stream->Close(), StatusIs(absl::StatusCode::kNotFound));
}

// A transport that records each write with the thread that made it, and answers only what
// the test gives it (Answer); BreakWrites makes it a stream that broke.
class RecordingTransport final : public SubmitTransport {
 public:
  struct Written {
    std::thread::id thread;
    v1::SubmitRequest request;
  };

  // SubmitTransport:
  bool Write(const v1::SubmitRequest& request) override {
    absl::MutexLock lock(&mu_);
    if (broken_) {
      // As on a connection that broke: the write fails, and then the reads end.
      failed_writes_.push_back({std::this_thread::get_id(), request});
      if (!end_.has_value()) end_ = absl::UnavailableError("connection reset");
      return false;
    }
    writes_.push_back({std::this_thread::get_id(), request});
    return true;
  }
  void WritesDone() override { End(absl::OkStatus()); }
  bool Read(v1::SubmitResponse* response) override {
    absl::MutexLock lock(&mu_);
    auto readable = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !responses_.empty() || end_.has_value();
    };
    mu_.Await(absl::Condition(&readable));
    if (responses_.empty()) return false;
    *response = std::move(responses_.front());
    responses_.erase(responses_.begin());
    return true;
  }
  absl::Status Finish() override {
    absl::MutexLock lock(&mu_);
    return end_.value_or(absl::InternalError("Finish before the end"));
  }
  void Cancel() override { End(absl::CancelledError("cancelled")); }

  // The test's side.
  void Answer(v1::SubmitResponse response) {
    absl::MutexLock lock(&mu_);
    responses_.push_back(std::move(response));
  }
  void AnswerOp(uint64_t index) {
    v1::SubmitResponse response;
    v1::OpResult* result = response.add_results();
    result->set_index(index);
    result->set_op("add");
    result->mutable_output()->add_shape(2);
    result->mutable_output()->set_dtype(v1::DTYPE_INT32);
    result->mutable_output()->set_size_bytes(8);
    Answer(std::move(response));
  }
  void AnswerSync(uint64_t token) {
    v1::SubmitResponse response;
    response.set_synced(token);
    Answer(std::move(response));
  }
  // Writes fail from now on; the first failed one ends the reads with UNAVAILABLE.
  void BreakWrites() {
    absl::MutexLock lock(&mu_);
    broken_ = true;
  }
  std::vector<Written> failed_writes() {
    absl::MutexLock lock(&mu_);
    return failed_writes_;
  }
  // The writes once there are at least `count` (at most 10 s later).
  std::vector<Written> WaitForWrites(size_t count) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, count]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return writes_.size() >= count; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
    return writes_;
  }

 private:
  void End(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (!end_.has_value()) end_ = std::move(status);
  }

  absl::Mutex mu_;
  std::vector<Written> writes_ ABSL_GUARDED_BY(mu_);
  std::vector<Written> failed_writes_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SubmitResponse> responses_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
};

// A stream opened on a RecordingTransport.
class SubmitStreamWritesTest : public ::testing::Test {
 protected:
  SubmitStreamWritesTest() {
    auto owned = std::make_unique<RecordingTransport>();
    transport_ = owned.get();
    stream_ = SubmitStream::OnOpenedTransport(std::move(owned), "r-1-", absl::Seconds(10));
  }

  RecordingTransport* transport_;  // owned by stream_
  std::unique_ptr<SubmitStream> stream_;
};

// On an idle stream the caller's thread writes its op itself (a sleeping writer thread's
// wake-up would delay it), and a sync point too.
TEST_F(SubmitStreamWritesTest, OnAnIdleStreamTheCallersThreadWritesTheOpAndTheSyncPoint) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted op, stream_->Run(OpNamed("add")));
  std::vector<RecordingTransport::Written> writes = transport_->WaitForWrites(0);
  ASSERT_EQ(writes.size(), 1u) << "written before Run returned";
  EXPECT_EQ(writes[0].thread, std::this_thread::get_id());
  ASSERT_EQ(writes[0].request.ops_size(), 1);
  EXPECT_EQ(writes[0].request.ops(0).run().op(), "add");
  transport_->AnswerOp(0);
  GPUKIT_ASSERT_OK(op.result->Wait().status());

  std::thread::id syncer;
  absl::Status synced;
  std::thread sync([&] {
    syncer = std::this_thread::get_id();
    synced = stream_->Sync();
  });
  writes = transport_->WaitForWrites(2);
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[1].request.sync(), 1u);
  transport_->AnswerSync(1);
  sync.join();
  GPUKIT_EXPECT_OK(synced);
  EXPECT_EQ(writes[1].thread, syncer);
  GPUKIT_EXPECT_OK(stream_->Close());
}

// While an op is unanswered, the next goes to the writer thread, which gathers what comes
// meanwhile: the caller does not write.
TEST_F(SubmitStreamWritesTest, WhileAnOpIsUnansweredTheWriterThreadWritesTheNext) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted first, stream_->Run(OpNamed("add")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted second, stream_->Run(OpNamed("mul")));
  std::vector<RecordingTransport::Written> writes = transport_->WaitForWrites(2);
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_EQ(writes[0].thread, std::this_thread::get_id());
  EXPECT_NE(writes[1].thread, std::this_thread::get_id());
  ASSERT_EQ(writes[1].request.ops_size(), 1);
  EXPECT_EQ(writes[1].request.ops(0).run().op(), "mul");
  transport_->AnswerOp(0);
  transport_->AnswerOp(1);
  GPUKIT_EXPECT_OK(first.result->Wait().status());
  GPUKIT_EXPECT_OK(second.result->Wait().status());
  GPUKIT_EXPECT_OK(stream_->Close());
}

// A write that fails on the caller's thread ends the stream as the writer thread's would:
// the op, the sync point and the close all report the stream's end, and nothing hangs.
TEST_F(SubmitStreamWritesTest, AFailedWriteOnTheCallersThreadEndsTheStreamForEveryCall) {
  transport_->BreakWrites();
  GPUKIT_ASSERT_OK_AND_ASSIGN(SubmitStream::Submitted op, stream_->Run(OpNamed("add")));
  // The caller's own write failed (nothing else ends the stream here).
  const std::vector<RecordingTransport::Written> failed = transport_->failed_writes();
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].thread, std::this_thread::get_id());
  EXPECT_THAT(op.result->Wait().status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("connection reset")));
  EXPECT_THAT(stream_->Sync(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(stream_->Close(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(transport_->WaitForWrites(0).empty());
}

}  // namespace
}  // namespace gpukit::internal
