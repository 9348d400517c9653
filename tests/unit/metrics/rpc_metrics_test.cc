// RpcMetrics: counts by method and code, latency buckets, the bound on methods, and its
// exposition; and RpcMetricsInterceptorFactory in a real in-process gRPC server, where every
// call of every method is recorded once with the code the client got.
#include "daemon/metrics/rpc_metrics.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/metrics/rpc_interceptor.h"
#include "gmock/gmock.h"
#include "gpukit/v1/session.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace gpukit {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

const RpcMetrics::MethodCounts* Find(const std::vector<RpcMetrics::MethodCounts>& all,
                                     absl::string_view method) {
  for (const auto& m : all) {
    if (m.method == method) return &m;
  }
  return nullptr;
}

int64_t Total(const RpcMetrics::MethodCounts& m) {
  int64_t n = 0;
  for (int64_t c : m.calls_by_code) n += c;
  return n;
}

TEST(RpcMetricsTest, CountsCallsByMethodAndCode) {
  RpcMetrics rpc;
  rpc.Record("/pkg.S/A", 0, absl::Microseconds(10));
  rpc.Record("pkg.S/A", 0, absl::Microseconds(10));
  rpc.Record("pkg.S/A", 5, absl::Microseconds(10));
  rpc.Record("pkg.S/B", 8, absl::Microseconds(10));
  const auto all = rpc.Snapshot();
  ASSERT_THAT(all, SizeIs(2)) << "a leading slash names the same method";
  EXPECT_EQ(all[0].method, "pkg.S/A");
  EXPECT_EQ(all[0].calls_by_code[0], 2);
  EXPECT_EQ(all[0].calls_by_code[5], 1);
  EXPECT_EQ(all[1].method, "pkg.S/B");
  EXPECT_EQ(all[1].calls_by_code[8], 1);
  EXPECT_EQ(Total(all[1]), 1);
}

TEST(RpcMetricsTest, CodesOutsideGrpcsRangeCountAsUnknown) {
  RpcMetrics rpc;
  rpc.Record("m", 99, absl::Microseconds(1));
  rpc.Record("m", -1, absl::Microseconds(1));
  EXPECT_EQ(rpc.Snapshot()[0].calls_by_code[2], 2);
  EXPECT_EQ(RpcMetrics::CodeName(99), "UNKNOWN");
  EXPECT_EQ(RpcMetrics::CodeName(-1), "UNKNOWN");
}

// The code label's values are what dashboards and alerts match on: each code keeps gRPC's
// name, whichever library spells it.
TEST(RpcMetricsTest, CodeLabelsAreGrpcsNamesForEveryCode) {
  const std::vector<std::string> expected = {"OK",
                                             "CANCELLED",
                                             "UNKNOWN",
                                             "INVALID_ARGUMENT",
                                             "DEADLINE_EXCEEDED",
                                             "NOT_FOUND",
                                             "ALREADY_EXISTS",
                                             "PERMISSION_DENIED",
                                             "RESOURCE_EXHAUSTED",
                                             "FAILED_PRECONDITION",
                                             "ABORTED",
                                             "OUT_OF_RANGE",
                                             "UNIMPLEMENTED",
                                             "INTERNAL",
                                             "UNAVAILABLE",
                                             "DATA_LOSS",
                                             "UNAUTHENTICATED"};
  ASSERT_EQ(expected.size(), static_cast<size_t>(RpcMetrics::kCodeCount));
  for (int code = 0; code < RpcMetrics::kCodeCount; ++code) {
    EXPECT_EQ(RpcMetrics::CodeName(code), expected[code]) << "code " << code;
  }
  // The numbering is gRPC's: the interceptor passes grpc::StatusCode values.
  EXPECT_EQ(RpcMetrics::CodeName(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED)),
            "UNAUTHENTICATED");
  EXPECT_EQ(RpcMetrics::CodeName(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED)),
            "RESOURCE_EXHAUSTED");
}

TEST(RpcMetricsTest, LatencyGoesToTheFirstBucketWhoseBoundItDoesNotExceed) {
  RpcMetrics rpc;
  rpc.Record("m", 0, absl::Microseconds(25));  // == the first bound: le is inclusive
  rpc.Record("m", 0, absl::Microseconds(26));  // the second bucket
  rpc.Record("m", 0, absl::Seconds(31));       // above the last bound
  const RpcMetrics::MethodCounts m = rpc.Snapshot()[0];
  EXPECT_EQ(m.latency_buckets[0], 1);
  EXPECT_EQ(m.latency_buckets[1], 1);
  EXPECT_EQ(m.latency_buckets.back(), 1);
  EXPECT_DOUBLE_EQ(m.latency_sum_seconds, 31.000051);
}

TEST(RpcMetricsTest, MethodsBeyondTheBoundAreCountedAsOther) {
  RpcMetrics rpc;
  for (int i = 0; i < RpcMetrics::kMaxMethods + 10; ++i) {
    rpc.Record(absl::StrCat("m", i), 0, absl::Microseconds(1));
  }
  rpc.Record("m0", 0, absl::Microseconds(1));  // known before the bound: still its own
  const auto all = rpc.Snapshot();
  EXPECT_THAT(all, SizeIs(RpcMetrics::kMaxMethods + 1));
  ASSERT_NE(Find(all, "other"), nullptr);
  EXPECT_EQ(Total(*Find(all, "other")), 10);
  EXPECT_EQ(Total(*Find(all, "m0")), 2);
}

TEST(RpcMetricsTest, ConcurrentRecordsAreAllCounted) {
  RpcMetrics rpc;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&rpc, t] {
      for (int i = 0; i < 1000; ++i) rpc.Record(absl::StrCat("m", i % 3), t, absl::Microseconds(i));
    });
  }
  for (std::thread& t : threads) t.join();
  int64_t calls = 0, observations = 0;
  for (const auto& m : rpc.Snapshot()) {
    calls += Total(m);
    for (int64_t b : m.latency_buckets) observations += b;
  }
  EXPECT_EQ(calls, 4000);
  EXPECT_EQ(observations, 4000);
}

TEST(RpcMetricsTest, WritesACounterPerCodeSeenAndAHistogramPerMethod) {
  RpcMetrics rpc;
  rpc.Record("pkg.S/A", 0, absl::Microseconds(30));
  rpc.Record("pkg.S/A", 3, absl::Milliseconds(2));
  ExpositionWriter out;
  rpc.WriteTo(out);
  const std::string& text = out.text();
  EXPECT_THAT(text, HasSubstr("# TYPE gpukit_rpc_requests_total counter\n"));
  EXPECT_THAT(text, HasSubstr("gpukit_rpc_requests_total{method=\"pkg.S/A\",code=\"OK\"} 1\n"));
  EXPECT_THAT(
      text,
      HasSubstr("gpukit_rpc_requests_total{method=\"pkg.S/A\",code=\"INVALID_ARGUMENT\"} 1\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("code=\"NOT_FOUND\""))) << "codes never seen";
  EXPECT_THAT(text, HasSubstr("# TYPE gpukit_rpc_duration_seconds histogram\n"));
  EXPECT_THAT(text,
              HasSubstr("gpukit_rpc_duration_seconds_bucket{method=\"pkg.S/A\",le=\"5e-05\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("gpukit_rpc_duration_seconds_bucket{method=\"pkg.S/A\",le=\"+Inf\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("gpukit_rpc_duration_seconds_count{method=\"pkg.S/A\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("gpukit_rpc_duration_seconds_sum{method=\"pkg.S/A\"} 0.00203\n"));
}

// A SessionService whose KeepAlive succeeds and Close fails with NOT_FOUND; Open is the
// generated base's UNIMPLEMENTED.
class FakeSessionService final : public v1::SessionService::Service {
 public:
  grpc::Status KeepAlive(grpc::ServerContext*, const v1::KeepAliveRequest*,
                         v1::KeepAliveResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status Close(grpc::ServerContext*, const v1::CloseSessionRequest*,
                     v1::CloseSessionResponse*) override {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such session");
  }
};

TEST(RpcMetricsInterceptorTest, EveryCallOfEveryMethodIsRecordedWithTheCodeTheClientGot) {
  RpcMetrics rpc;
  FakeSessionService service;
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<RpcMetricsInterceptorFactory>(rpc));
  builder.experimental().SetInterceptorCreators(std::move(creators));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = v1::SessionService::NewStub(server->InProcessChannel(grpc::ChannelArguments()));

  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext context;
    v1::KeepAliveResponse response;
    ASSERT_TRUE(stub->KeepAlive(&context, {}, &response).ok());
  }
  {
    grpc::ClientContext context;
    v1::CloseSessionResponse response;
    EXPECT_EQ(stub->Close(&context, {}, &response).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    v1::OpenSessionResponse response;
    EXPECT_EQ(stub->Open(&context, {}, &response).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
  server->Shutdown();
  server->Wait();

  const auto all = rpc.Snapshot();
  const auto* keep_alive = Find(all, "gpukit.v1.SessionService/KeepAlive");
  ASSERT_NE(keep_alive, nullptr);
  EXPECT_EQ(keep_alive->calls_by_code[0], 3);
  EXPECT_EQ(Total(*keep_alive), 3);
  int64_t observations = 0;
  for (int64_t b : keep_alive->latency_buckets) observations += b;
  EXPECT_EQ(observations, 3) << "one latency per call";
  const auto* close = Find(all, "gpukit.v1.SessionService/Close");
  ASSERT_NE(close, nullptr);
  EXPECT_EQ(close->calls_by_code[static_cast<int>(grpc::StatusCode::NOT_FOUND)], 1);
  EXPECT_EQ(Total(*close), 1);
  const auto* open = Find(all, "gpukit.v1.SessionService/Open");
  ASSERT_NE(open, nullptr);
  EXPECT_EQ(open->calls_by_code[static_cast<int>(grpc::StatusCode::UNIMPLEMENTED)], 1);
}

}  // namespace
}  // namespace gpukit
