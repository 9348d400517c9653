// ArrayService.Import against the real gpukitd on the CPU backend, through the raw protocol:
// there a shared file (a memfd) stands for a client's device memory, so the whole path a GPU
// takes (the request, the token, the descriptor over the channel, the admission, the array's
// life) runs in CI. The array's data is the client's memory itself: writes on either side are
// seen by the other. Every way to get it wrong leaves the daemon serving.
#include <sys/mman.h>
#include <sys/socket.h>

#include <cstring>
#include <fstream>
#include <iterator>
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
#include "tests/integration/binary_path.h"
#include "tests/integration/daemon_fixture.h"
#include "tests/integration/subprocess.h"
#include "tests/testing/random_seed.h"
#include "tests/testing/status_matchers.h"

namespace gpukit::testing {
namespace {

using ::testing::HasSubstr;

// A memfd mapped here: the client's side of the memory.
struct SharedFile {
  ScopedFd fd;
  float* data = nullptr;
  int64_t bytes = 0;
  ~SharedFile() {
    if (data != nullptr) ::munmap(data, static_cast<size_t>(bytes));
  }
};

absl::StatusOr<std::unique_ptr<SharedFile>> NewSharedFile(int64_t bytes) {
  auto file = std::make_unique<SharedFile>();
  GPUKIT_ASSIGN_OR_RETURN(file->fd, CreateSharedMemory("import", bytes));
  void* mapping = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED,
                         file->fd.get(), 0);
  if (mapping == MAP_FAILED) return absl::InternalError("mmap");
  file->data = static_cast<float*>(mapping);
  file->bytes = bytes;
  return file;
}

class ImportTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    stub_ = v1::ArrayService::NewStub(api().channel());
  }

  absl::StatusOr<v1::ImportArrayResponse> RawImport(const v1::ImportArrayRequest& request) {
    v1::ImportArrayResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub_->Import(&context, request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return response;
  }

  static v1::ImportArrayRequest Request(const std::string& session, int64_t floats,
                                        int64_t allocation_bytes, int64_t offset_bytes) {
    v1::ImportArrayRequest request;
    request.set_session_id(session);
    request.add_shape(floats);
    request.set_dtype(v1::DTYPE_FLOAT32);
    request.set_descriptor_allocation_bytes(allocation_bytes);
    request.set_offset_bytes(offset_bytes);
    return request;
  }

  absl::Status Deliver(const v1::ImportArrayResponse& grant, int fd) {
    GPUKIT_ASSIGN_OR_RETURN(ScopedFd channel, ConnectUnixSocket(grant.fd_channel()));
    const std::string message = EncodeFdChannelRequest({FdChannelOp::kDeliver, grant.token()});
    GPUKIT_RETURN_IF_ERROR(SendMessage(channel.get(), message.data(), message.size(), fd));
    GPUKIT_ASSIGN_OR_RETURN(
        ReceivedMessage reply,
        ReceiveMessage(channel.get(), kFdChannelMaxReplyBytes, absl::Seconds(5)));
    return DecodeFdChannelReply(reply.bytes);
  }

  // Imports `floats` floats at `offset_bytes` of `file`; returns the array's handle.
  absl::StatusOr<std::string> Import(const std::string& session, const SharedFile& file,
                                     int64_t floats, int64_t offset_bytes) {
    GPUKIT_ASSIGN_OR_RETURN(v1::ImportArrayResponse grant,
                            RawImport(Request(session, floats, file.bytes, offset_bytes)));
    GPUKIT_RETURN_IF_ERROR(Deliver(grant, file.fd.get()));
    return grant.array().handle();
  }

  absl::StatusOr<std::vector<float>> Download(const std::string& session,
                                              const std::string& handle) {
    v1::DownloadRequest request;
    request.set_session_id(session);
    request.set_handle(handle);
    GPUKIT_ASSIGN_OR_RETURN(std::vector<v1::DownloadResponse> chunks, api().Download(request));
    std::string bytes;
    for (const v1::DownloadResponse& chunk : chunks) bytes += chunk.chunk().data();
    std::vector<float> values(bytes.size() / sizeof(float));
    std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
    return values;
  }

  absl::StatusOr<int64_t> SessionMemory(const std::string& session) {
    GPUKIT_ASSIGN_OR_RETURN(v1::ListSessionsResponse sessions, api().ListSessions());
    for (const v1::SessionInfo& info : sessions.sessions()) {
      if (info.session_id() == session) return info.memory_bytes();
    }
    return absl::NotFoundError(session);
  }

  std::unique_ptr<v1::ArrayService::Stub> stub_;
};

TEST_F(ImportTest, ImportedMemoryIsTheArrayBothWays) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (GPUKIT_TEST_SEED)");
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-100, 100);
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api().OpenSession("raw"));
  constexpr int64_t kFloats = 1 << 20;
  constexpr int64_t kOffset = 4096;
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SharedFile> file,
                              NewSharedFile(kOffset + kFloats * 4 + 4096));
  float* mine = file->data + kOffset / 4;
  std::vector<float> values(kFloats);
  for (float& v : values) v = value(rng);
  std::memcpy(mine, values.data(), kFloats * 4);

  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string handle, Import(session, *file, kFloats, kOffset));
  EXPECT_THAT(handle, ::testing::StartsWith("a-"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> seen, Download(session, handle));
  EXPECT_EQ(seen, values) << "the daemon reads the client's memory";
  EXPECT_THAT(SessionMemory(session), IsOkAndHolds(kFloats * 4))
      << "an imported array counts against the session's memory";

  // The client writes, the daemon computes on what it wrote.
  mine[7] = 1234.5f;
  v1::RunOpRequest add;
  add.set_session_id(session);
  add.set_op("add");
  add.add_inputs()->set_handle(handle);
  add.add_inputs()->set_handle(handle);
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ArrayInfo sum, api().RunOp(add));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::vector<float> doubled, Download(session, sum.handle()));
  EXPECT_EQ(doubled[7], 2469.0f);
  EXPECT_EQ(doubled[0], values[0] + values[0]);

  // The daemon writes, the client sees it in its memory, and nothing outside the array moved.
  std::string upload(kFloats * 4, '\0');
  for (int64_t i = 0; i < kFloats; ++i) {
    const float v = static_cast<float>(i);
    std::memcpy(upload.data() + i * 4, &v, 4);
  }
  GPUKIT_ASSERT_OK(api().UploadBytes(session, handle, upload).status());
  EXPECT_EQ(mine[12345], 12345.0f);
  EXPECT_EQ(file->data[kOffset / 4 - 1], 0.0f) << "bytes before the array are untouched";
  EXPECT_EQ(file->data[kOffset / 4 + kFloats], 0.0f) << "bytes after the array are untouched";

  // Freeing the array leaves the memory to the client.
  GPUKIT_ASSERT_OK(api().Free(session, handle).status());
  EXPECT_EQ(mine[12345], 12345.0f);
  mine[0] = 5.0f;
  EXPECT_EQ(mine[0], 5.0f);
  EXPECT_THAT(SessionMemory(session), IsOkAndHolds(kFloats * 4)) << "only the sum is left";
  GPUKIT_ASSERT_OK(api().Close(session).status());
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(5)));
}

TEST_F(ImportTest, ImportsCountAgainstTheSessionsMemoryLimit) {
  v1::OpenSessionRequest open;
  open.set_tenant("limited");
  open.mutable_resources()->mutable_limits()->set_memory_bytes(1 << 20);
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::OpenSessionResponse opened, api().Open(open));
  const std::string& session = opened.session_id();
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SharedFile> file, NewSharedFile(4 << 20));
  GPUKIT_ASSERT_OK(Import(session, *file, (1 << 20) / 8, 0).status());  // half the limit
  EXPECT_THAT(Import(session, *file, (1 << 20) / 4, 1 << 20).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(SessionMemory(session), IsOkAndHolds(1 << 19));
  ExpectDaemonServesAnotherClient();
}

TEST_F(ImportTest, BadImportsAreRefusedAndTheDaemonServesOn) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api().OpenSession("raw"));
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<SharedFile> file, NewSharedFile(1 << 20));

  // Ranges outside the allocation, told at once.
  EXPECT_THAT(RawImport(Request(session, 1 << 18, 1 << 20, 4)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  EXPECT_THAT(RawImport(Request(session, 16, 1 << 20, -64)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
  EXPECT_THAT(RawImport(Request(session, -3, 1 << 20, 0)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RawImport(Request("s-nobody", 16, 1 << 20, 0)).status(),
              StatusIs(absl::StatusCode::kNotFound));
  v1::ImportArrayRequest no_memory = Request(session, 16, 1 << 20, 0);
  no_memory.clear_descriptor_allocation_bytes();
  EXPECT_THAT(RawImport(no_memory).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names no memory")));
  v1::ImportArrayRequest bad_dtype = Request(session, 16, 1 << 20, 0);
  bad_dtype.set_dtype(static_cast<v1::DType>(999));
  EXPECT_THAT(RawImport(bad_dtype).status(), StatusIs(absl::StatusCode::kInvalidArgument));

  // A CUDA IPC handle needs a GPU; a handle of the wrong size is refused before that.
  v1::ImportArrayRequest ipc = Request(session, 16, 0, 0);
  ipc.set_cuda_ipc_handle(std::string(64, '\x01'));
  EXPECT_THAT(RawImport(ipc).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("need a GPU")));

  // The file behind the descriptor is smaller than the request said: refused on delivery,
  // and the token is used up.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ImportArrayResponse grant,
                              RawImport(Request(session, 1 << 19, 2 << 20, 0)));
  EXPECT_THAT(Deliver(grant, file->fd.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not the 2097152")));
  EXPECT_THAT(Deliver(grant, file->fd.get()), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(api().Describe(session, grant.array().handle()).status(),
              StatusIs(absl::StatusCode::kNotFound))
      << "no array comes of a failed delivery";

  // A forged token, and a socket for memory.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ImportArrayResponse second,
                              RawImport(Request(session, 16, 1 << 20, 0)));
  v1::ImportArrayResponse forged = second;
  forged.set_token(std::string(32, '0'));
  EXPECT_THAT(Deliver(forged, file->fd.get()), StatusIs(absl::StatusCode::kNotFound));
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  ScopedFd a(pair[0]), b(pair[1]);
  EXPECT_FALSE(Deliver(second, a.get()).ok());

  // A delivery for a session that has ended creates nothing.
  GPUKIT_ASSERT_OK_AND_ASSIGN(v1::ImportArrayResponse orphan,
                              RawImport(Request(session, 16, 1 << 20, 0)));
  GPUKIT_ASSERT_OK(api().Close(session).status());
  EXPECT_THAT(Deliver(orphan, file->fd.get()), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_TRUE(WaitUntilDaemonHoldsNothing(absl::Seconds(5)));
  ExpectDaemonServesAnotherClient();
}

TEST_F(ImportTest, LegacyIpcExportsNeedAGpu) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  GPUKIT_ASSERT_OK_AND_ASSIGN(Array array, client->Empty({16}, DType::kFloat32));
  v1::ExportArrayRequest request;
  request.set_session_id(client->session_id());
  request.set_handle(array.handle());
  request.set_cuda_ipc_handle(true);
  v1::ExportArrayResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub_->Export(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  ExpectDaemonServesAnotherClient();
}

// client/cpp/examples/zero_copy.cc, as a user runs it: host shared memory both ways, checked
// by the program itself; no device mapping on the CPU backend, said plainly.
TEST_F(ImportTest, TheZeroCopyExampleRuns) {
  const std::string out = temp_dir() + "/zero_copy.out";
  GPUKIT_ASSERT_OK_AND_ASSIGN(
      Subprocess example,
      Subprocess::Spawn({{FindBinary(GPUKIT_ZERO_COPY_EXAMPLE_PATH), "--addr",
                          daemon().address(), "--mib", "8"},
                         out,
                         ""}));
  EXPECT_THAT(example.WaitForExitCode(absl::Seconds(60)), IsOkAndHolds(0));
  std::ifstream file(out);
  const std::string printed((std::istreambuf_iterator<char>(file)), {});
  EXPECT_THAT(printed, HasSubstr("host shared memory: 8 MiB"));
  EXPECT_THAT(printed, HasSubstr("checked"));
  EXPECT_THAT(printed, HasSubstr("device mapping: not here")) << printed;
  ExpectDaemonServesAnotherClient();
}

TEST_F(ImportTest, TheClientLibraryNeedsCudaMemory) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Connect());
  std::vector<float> host(16);
  // Host memory is not device memory; without a driver in this process the call says that.
  const absl::Status status =
      client->ImportDeviceMemory(reinterpret_cast<uint64_t>(host.data()), {16}, DType::kFloat32)
          .status();
  EXPECT_TRUE(absl::IsFailedPrecondition(status) || absl::IsInvalidArgument(status)) << status;
  EXPECT_THAT(client->ImportDeviceMemory(0, {-1}, DType::kFloat32).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ExpectDaemonServesAnotherClient();
}

}  // namespace
}  // namespace gpukit::testing
