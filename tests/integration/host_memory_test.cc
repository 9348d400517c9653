// Host shared memory against the real gpukitd (CPU backend): registration over gRPC plus the
// descriptor channel, copies both ways, and every way to get it wrong, after each of which
// the daemon serves on.
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpukit/client.h"
#include "gpukit/v1/array.grpc.pb.h"
#include "gtest/gtest.h"
#include "runtime/base/fd_channel_protocol.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/unix_fd.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"
#include <sys/mman.h>
#include <sys/socket.h>

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;

class HostMemoryTest : public DaemonTest {
 protected:
  // RegisterHostMemory through the raw stub, without handing over a descriptor.
  absl::StatusOr<v1::RegisterHostMemoryResponse> RawRegister(const std::string& session,
                                                             int64_t bytes) {
    auto stub = v1::ArrayService::NewStub(api().channel());
    v1::RegisterHostMemoryRequest request;
    request.set_session_id(session);
    request.set_bytes(bytes);
    v1::RegisterHostMemoryResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub->RegisterHostMemory(&context, request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return response;
  }

  absl::Status RawCopy(bool to_array, const std::string& session, const std::string& handle,
                       const std::string& region, int64_t region_offset, int64_t bytes) {
    auto stub = v1::ArrayService::NewStub(api().channel());
    v1::HostMemoryCopyRequest request;
    request.set_session_id(session);
    request.set_handle(handle);
    request.set_region(region);
    request.set_region_offset(region_offset);
    request.set_bytes(bytes);
    v1::HostMemoryCopyResponse response;
    grpc::ClientContext context;
    const grpc::Status status = to_array ? stub->CopyFromHostMemory(&context, request, &response)
                                         : stub->CopyToHostMemory(&context, request, &response);
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }

  // One exchange on the descriptor channel: `message` with `fd` attached (if >= 0).
  absl::Status SendOnChannel(const std::string& path, const std::string& message, int fd) {
    GPUKIT_ASSIGN_OR_RETURN(ScopedFd channel, ConnectUnixSocket(path));
    GPUKIT_RETURN_IF_ERROR(SendMessage(channel.get(), message.data(), message.size(), fd));
    GPUKIT_ASSIGN_OR_RETURN(
        ReceivedMessage reply,
        ReceiveMessage(channel.get(), kFdChannelMaxReplyBytes, absl::Seconds(5)));
    return DecodeFdChannelReply(reply.bytes);
  }

  absl::StatusOr<std::string> NewArray(const std::string& session, int64_t floats) {
    v1::CreateArrayRequest request;
    request.set_session_id(session);
    request.add_shape(floats);
    request.set_dtype(v1::DTYPE_FLOAT32);
    GPUKIT_ASSIGN_OR_RETURN(v1::ArrayInfo info, api().Create(request));
    return info.handle();
  }
};

std::vector<float> RandomFloats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

TEST_F(HostMemoryTest, ArraysRoundTripThroughRegisteredSharedMemory) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  constexpr int64_t kCount = 3 << 20;  // 12 MiB: several gRPC chunks' worth
  const std::vector<float> values = RandomFloats(kCount, seed);
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostMemory memory,
                              client->RegisterHostMemory(kCount * sizeof(float) + 4096));
  EXPECT_THAT(memory.region(), ::testing::StartsWith("m-"));
  std::memcpy(memory.data() + 4096, values.data(), kCount * sizeof(float));

  GPUKIT_ASSERT_OK_AND_ASSIGN(Array array, client->Empty({kCount}, DType::kFloat32));
  GPUKIT_ASSERT_OK(array.Write(memory, 4096));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> via_grpc, array.ToVector<float>());
  EXPECT_EQ(via_grpc, values);

  // And back: the daemon computes, the result lands in the shared memory.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array doubled, client->Add(array, array));
  std::memset(memory.data(), 0xFF, memory.size_bytes());
  GPUKIT_ASSERT_OK(doubled.Read(memory));
  const float* out = reinterpret_cast<const float*>(memory.data());
  for (int64_t i = 0; i < kCount; ++i) ASSERT_EQ(out[i], values[i] + values[i]) << i;
  EXPECT_EQ(static_cast<unsigned char>(memory.data()[kCount * sizeof(float)]), 0xFF)
      << "bytes past the array are untouched";

  GPUKIT_ASSERT_OK(memory.Unregister());
  EXPECT_THAT(array.Write(memory), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(HostMemoryTest, CopiesOutsideTheMemoryOrOfOtherSessionsAreRefused) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> owner, Connect("owner"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> other, Connect("other"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostMemory memory, owner->RegisterHostMemory(1000));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array big, owner->Empty({1024}, DType::kFloat32));  // 4096 B
  EXPECT_THAT(big.Write(memory), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("m-")));
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array small, owner->Empty({250}, DType::kFloat32));  // 1000 B
  GPUKIT_EXPECT_OK(small.Write(memory));
  EXPECT_THAT(small.Write(memory, 1), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(small.Write(memory, -1), StatusIs(absl::StatusCode::kOutOfRange));
  // Another session naming the region, and the region naming another session's array.
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array theirs, other->Empty({250}, DType::kFloat32));
  EXPECT_THAT(RawCopy(true, other->session_id(), theirs.handle(), memory.region(), 0, 1000),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("host memory region")));
  EXPECT_THAT(RawCopy(false, owner->session_id(), theirs.handle(), memory.region(), 0, 1000),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("array handle")));
  ExpectDaemonServesAnotherClient();
}

TEST_F(HostMemoryTest, DescriptorChannelRefusesBadTokensFilesAndMessages) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api().OpenSession("raw"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::RegisterHostMemoryResponse registered,
                              RawRegister(session, 1 << 20));
  EXPECT_EQ(registered.token().size(), kFdChannelTokenBytes);
  EXPECT_GT(registered.token_ttl_ms(), 0);
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd small, CreateSharedMemory("small", 4096));
  GPUKIT_ASSERT_OK_AND_ASSIGN(ScopedFd right, CreateSharedMemory("right", 1 << 20));
  const std::string& path = registered.fd_channel();

  // A forged token, a descriptor missing, a file that cannot be mapped, bad framing.
  std::string forged = registered.token();
  forged[0] = forged[0] == 'a' ? 'b' : 'a';
  EXPECT_THAT(
      SendOnChannel(path, EncodeFdChannelRequest({FdChannelOp::kDeliver, forged}), right.get()),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("token")));
  EXPECT_THAT(
      SendOnChannel(path, EncodeFdChannelRequest({FdChannelOp::kDeliver, registered.token()}), -1),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("without a descriptor")));
  EXPECT_THAT(SendOnChannel(path, "GKFD-nonsense", right.get()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // The token is still unused: a file too small for the region is refused, and that uses it.
  EXPECT_THAT(
      SendOnChannel(path, EncodeFdChannelRequest({FdChannelOp::kDeliver, registered.token()}),
                    small.get()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("4096")));
  EXPECT_THAT(
      SendOnChannel(path, EncodeFdChannelRequest({FdChannelOp::kDeliver, registered.token()}),
                    right.get()),
      StatusIs(absl::StatusCode::kNotFound));
  // The region never got memory: copies say so.
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string array, NewArray(session, 16));
  EXPECT_THAT(RawCopy(true, session, array, registered.region(), 0, 64),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("waiting")));

  // A socket is no shared memory.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::RegisterHostMemoryResponse second, RawRegister(session, 64));
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  ScopedFd a(pair[0]), b(pair[1]);
  EXPECT_FALSE(
      SendOnChannel(path, EncodeFdChannelRequest({FdChannelOp::kDeliver, second.token()}), a.get())
          .ok());
  ExpectDaemonServesAnotherClient();
}

TEST_F(HostMemoryTest, RegistrationRefusesBadSizesAndUnknownSessions) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api().OpenSession("raw"));
  EXPECT_THAT(RawRegister(session, 0).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RawRegister(session, -5).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RawRegister(session, int64_t{1} << 50).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("maxArraySize")));
  EXPECT_THAT(RawRegister("s-nobody", 4096).status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(HostMemoryTest, ClosingTheSessionUnmapsItsRegionsAndTheClientKeepsItsMemory) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostMemory memory, client->RegisterHostMemory(1 << 16));
  const std::string region = memory.region();
  std::memset(memory.data(), 7, memory.size_bytes());
  GPUKIT_ASSERT_OK(client->Close());
  EXPECT_EQ(memory.data()[100], 7) << "the client's mapping is its own";
  GPUKIT_EXPECT_OK(memory.Unregister());  // nothing left to tell the daemon
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(5)));
}

TEST_F(HostMemoryTest, ExportingArraysOfTheCpuBackendIsRefusedAndBadFetchesToo) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array array, client->Empty({16}, DType::kFloat32));
  EXPECT_THAT(array.Map().status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                             HasSubstr("use host shared memory")));
  auto stub = v1::ArrayService::NewStub(api().channel());
  v1::ExportArrayRequest request;
  request.set_session_id(client->session_id());
  request.set_handle("a-0123456789abcdef0123456789abcdef");
  v1::ExportArrayResponse response;
  grpc::ClientContext context;
  EXPECT_EQ(stub->Export(&context, request, &response).error_code(), grpc::StatusCode::NOT_FOUND);
  // A fetch with a token nobody was given.
  GPUKIT_ASSERT_OK_AND_ASSIGN(HostMemory memory, client->RegisterHostMemory(64));
  const std::string path = daemon().socket_path() + ".fd";
  EXPECT_THAT(SendOnChannel(path,
                            EncodeFdChannelRequest({FdChannelOp::kFetch, std::string(32, '0')}),
                            -1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("export token")));
  ExpectDaemonServesAnotherClient();
}

}  // namespace
}  // namespace gpukit::testing
