// The frames between gpukitd and its compile workers (runtime/jit/compile_worker_protocol.h):
// what one end encodes the other decodes whole, and a short, long or forged frame is an error,
// never a read past its end.
#include "runtime/jit/compile_worker_protocol.h"

#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/unix_fd.h"
#include "tests/testing/status_matchers.h"
#include <sys/socket.h>

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Pair;

TEST(CompileWorkerProtocolTest, RequestsRoundTrip) {
  const NvrtcInput input{.source = std::string("a\0b", 3),
                         .headers = {{"x.h", "int x;"}, {"y.h", ""}},
                         .name_expressions = {"k", "s<float>"},
                         .options = {"-DN=4"},
                         .arch = "sm_90",
                         .time_budget = absl::Milliseconds(1500)};
  GPUKIT_ASSERT_OK_AND_ASSIGN(NvrtcInput back, DecodeWorkerRequest(EncodeWorkerRequest(input)));
  EXPECT_EQ(back.source, input.source);
  EXPECT_THAT(back.headers, ElementsAre(Pair("x.h", "int x;"), Pair("y.h", "")));
  EXPECT_THAT(back.name_expressions, ElementsAre("k", "s<float>"));
  EXPECT_THAT(back.options, ElementsAre("-DN=4"));
  EXPECT_EQ(back.arch, "sm_90");
  EXPECT_EQ(back.time_budget, absl::Milliseconds(1500));

  NvrtcInput unbounded = input;
  unbounded.time_budget = absl::InfiniteDuration();
  GPUKIT_ASSERT_OK_AND_ASSIGN(back, DecodeWorkerRequest(EncodeWorkerRequest(unbounded)));
  EXPECT_EQ(back.time_budget, absl::InfiniteDuration());
}

TEST(CompileWorkerProtocolTest, ResponsesAndHellosRoundTrip) {
  WorkerResponse response;
  response.status = absl::InvalidArgumentError("kernel compilation failed");
  response.output.log = "log";
  GPUKIT_ASSERT_OK_AND_ASSIGN(WorkerResponse back,
                              DecodeWorkerResponse(EncodeWorkerResponse(response)));
  EXPECT_THAT(back.status,
              StatusIs(absl::StatusCode::kInvalidArgument, "kernel compilation failed"));
  EXPECT_EQ(back.output.log, "log");

  WorkerHello hello{.nvrtc_major = 13,
                    .nvrtc_minor = 0,
                    .library_path = "/x/libnvrtc.so.13",
                    .supported_archs = {80, 90}};
  GPUKIT_ASSERT_OK_AND_ASSIGN(WorkerHello hello_back, DecodeWorkerHello(EncodeWorkerHello(hello)));
  EXPECT_TRUE(hello_back.status.ok());
  EXPECT_EQ(hello_back.nvrtc_major, 13);
  EXPECT_EQ(hello_back.library_path, "/x/libnvrtc.so.13");
  EXPECT_THAT(hello_back.supported_archs, ElementsAre(80, 90));
}

TEST(CompileWorkerProtocolTest, TruncatedAndPaddedFramesAreRefused) {
  const std::string frame = EncodeWorkerRequest({.source = "s", .arch = "sm_90"});
  for (size_t size = 0; size < frame.size(); ++size) {
    EXPECT_THAT(DecodeWorkerRequest(frame.substr(0, size)),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << size;
  }
  EXPECT_THAT(DecodeWorkerRequest(frame + "x"), StatusIs(absl::StatusCode::kInvalidArgument));
  std::string forged = EncodeWorkerResponse({});
  forged[0] = 99;  // no such status code
  EXPECT_THAT(DecodeWorkerResponse(forged), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CompileWorkerProtocolTest, FramesCrossASocketAndLimitsHold) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  ScopedFd a(pair[0]), b(pair[1]);
  ASSERT_TRUE(WriteFrame(a.get(), "hello").ok());
  EXPECT_THAT(ReadFrame(b.get(), 100, absl::Now() + absl::Seconds(5)),
              testing::IsOkAndHolds(std::string("hello")));
  ASSERT_TRUE(WriteFrame(a.get(), std::string(200, 'x')).ok());
  EXPECT_THAT(ReadFrame(b.get(), 100, absl::Now() + absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadFrame(a.get(), 100, absl::Now() + absl::Milliseconds(10)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  b.Reset();
  EXPECT_THAT(ReadFrame(a.get(), 100, absl::InfiniteFuture()),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(WriteFrame(a.get(), "to nobody"), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace gpukit
