// The two gRPC built-in services gpukitd serves for tooling: grpc.health.v1 (load balancers,
// systemd probes) and server reflection (grpcurl). The test has neither service's .proto,
// so it speaks to them as a generic client would, with hand-encoded protobuf bytes.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/cpp/channel.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kCallTimeout = absl::Seconds(10);

grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromByteBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// Waits for the completion queue's next event, which must carry `expected_tag`; returns
// its `ok`. The call's deadline bounds the wait.
bool Await(grpc::CompletionQueue& cq, void* expected_tag) {
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok)) return false;
  EXPECT_EQ(tag, expected_tag);
  return ok;
}

void Drain(grpc::CompletionQueue& cq) {
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
}

// One unary call of `method` with raw request bytes; returns the raw response bytes.
absl::StatusOr<std::string> GenericUnaryCall(const std::shared_ptr<grpc::Channel>& channel,
                                             const std::string& method,
                                             const std::string& request) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(kCallTimeout));
  grpc::CompletionQueue cq;
  grpc::ByteBuffer response;
  grpc::Status status;
  {
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
        stub.PrepareUnaryCall(&context, method, ToByteBuffer(request), &cq);
    call->StartCall();
    void* const kFinished = reinterpret_cast<void*>(1);
    call->Finish(&response, &status, kFinished);
    Await(cq, kFinished);
  }
  Drain(cq);
  if (!status.ok()) return FromGrpc(status, context);
  return FromByteBuffer(response);
}

// One bidi-streaming call of `method`: sends `request`, half-closes, and returns every
// response message's bytes, concatenated.
absl::StatusOr<std::string> GenericBidiCall(const std::shared_ptr<grpc::Channel>& channel,
                                            const std::string& method, const std::string& request) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(kCallTimeout));
  grpc::CompletionQueue cq;
  std::string responses;
  grpc::Status status;
  {
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream =
        stub.PrepareCall(&context, method, &cq);
    int tags[5];
    stream->StartCall(&tags[0]);
    if (Await(cq, &tags[0])) {
      stream->Write(ToByteBuffer(request), &tags[1]);
      if (Await(cq, &tags[1])) {
        stream->WritesDone(&tags[2]);
        Await(cq, &tags[2]);
      }
      grpc::ByteBuffer response;
      while (true) {
        stream->Read(&response, &tags[3]);
        if (!Await(cq, &tags[3])) break;
        responses += FromByteBuffer(response);
      }
    }
    stream->Finish(&status, &tags[4]);
    Await(cq, &tags[4]);
  }
  Drain(cq);
  if (!status.ok()) return FromGrpc(status, context);
  return responses;
}

class HealthReflectionTest : public DaemonTest {};

TEST_F(HealthReflectionTest, HealthCheckOfTheServerAnswersServing) {
  // HealthCheckRequest{service: ""} encodes as no bytes at all.
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      std::string response, GenericUnaryCall(api().channel(), "/grpc.health.v1.Health/Check", ""));
  // HealthCheckResponse{status: SERVING}: field 1, varint, value 1.
  EXPECT_EQ(response, std::string("\x08\x01", 2));
}

TEST_F(HealthReflectionTest, HealthCheckOfAnUnregisteredServiceNameIsNotFound) {
  const std::string name = "gpukit.v1.SessionService";
  // HealthCheckRequest{service: name}: field 1, length-delimited.
  const std::string request = std::string("\x0a", 1) + static_cast<char>(name.size()) + name;
  EXPECT_THAT(GenericUnaryCall(api().channel(), "/grpc.health.v1.Health/Check", request),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(HealthReflectionTest, ServerReflectionListsTheGpukitServices) {
  // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      std::string response,
      GenericBidiCall(api().channel(),
                      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                      std::string("\x3a\x00", 2)));
  for (const char* service :
       {"gpukit.v1.ArrayService", "gpukit.v1.SessionService", "gpukit.v1.ComputeService",
        "gpukit.v1.AdminService", "grpc.health.v1.Health"}) {
    EXPECT_TRUE(absl::StrContains(response, service)) << service;
  }
}

}  // namespace
}  // namespace gpukit::testing
