// RawApi: the four gpukit.v1 services' generated stubs on one channel, for what the C++
// client never sends (unknown dtype numbers, chunks out of order, a session without a
// keepalive thread) and for reading the daemon's state through the Admin service.
//
//   GPUKIT_ASSERT_OK_AND_ASSIGN(RawApi api, RawApi::Connect(daemon->address()));
//   GPUKIT_ASSERT_OK_AND_ASSIGN(std::string session, api.OpenSession("tenant-a", 500));
//   EXPECT_THAT(api.Create(request), StatusIs(absl::StatusCode::kInvalidArgument));
//   GPUKIT_ASSERT_OK_AND_ASSIGN(int64_t used, api.MemoryUsedBytes());
//
// Every call has a 10 s deadline. Errors are absl::Status with the daemon's code and
// message, and its "gpukit-reason" trailer readable with gpukit::RejectReason().
//
// Thread safety: the stubs are thread-safe, so a RawApi may be used from several threads.
#ifndef GPUKIT_TESTS_INTEGRATION_RAW_API_H_
#define GPUKIT_TESTS_INTEGRATION_RAW_API_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cpp/channel.h"
#include "gpukit/v1/admin.grpc.pb.h"
#include "gpukit/v1/array.grpc.pb.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "gpukit/v1/session.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpukit::testing {

// The daemon's largest Upload/Download data chunk: 4 MiB - 64 KiB, so that each message fits
// gRPC's default 4 MiB message limit.
inline constexpr int64_t kMaxChunkBytes = (int64_t{4} << 20) - (int64_t{64} << 10);

class RawApi {
 public:
  // UNAVAILABLE if nothing accepts at `address` within 5 s.
  static absl::StatusOr<RawApi> Connect(const std::string& address,
                                        const ChannelSecurity& security = {});

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

  // Sessions.
  absl::StatusOr<v1::OpenSessionResponse> Open(const v1::OpenSessionRequest& request);
  // Opens a session for `tenant` asking for `lease_ms` (0: the daemon's default); returns
  // its id.
  absl::StatusOr<std::string> OpenSession(const std::string& tenant, int64_t lease_ms = 0);
  absl::StatusOr<v1::KeepAliveResponse> KeepAlive(const std::string& session_id);
  absl::StatusOr<v1::CloseSessionResponse> Close(const std::string& session_id);

  // Arrays.
  absl::StatusOr<v1::ArrayInfo> Create(const v1::CreateArrayRequest& request);
  absl::StatusOr<v1::ArrayInfo> CreateArray(const std::string& session_id,
                                            const std::vector<int64_t>& shape, v1::DType dtype);
  // Sends `messages` as one Upload stream, exactly as given.
  absl::StatusOr<v1::UploadResponse> Upload(const std::vector<v1::UploadRequest>& messages);
  // Uploads `data` in chunks of at most `chunk_bytes`, after a header.
  absl::StatusOr<v1::UploadResponse> UploadBytes(const std::string& session_id,
                                                 const std::string& handle, const std::string& data,
                                                 int64_t chunk_bytes = kMaxChunkBytes);
  // Every message of one Download stream.
  absl::StatusOr<std::vector<v1::DownloadResponse>> Download(const v1::DownloadRequest& request);
  // A new array of `shape` and `dtype` holding `data` (INTERNAL if not all of it was written).
  absl::StatusOr<v1::ArrayInfo> CreateWithBytes(const std::string& session_id,
                                                const std::vector<int64_t>& shape, v1::DType dtype,
                                                const std::string& data);
  // Every byte of an array, its Download stream's chunks put together.
  absl::StatusOr<std::string> DownloadAll(const std::string& session_id,
                                          const std::string& handle);
  absl::StatusOr<v1::ArrayInfo> Describe(const std::string& session_id, const std::string& handle);
  // Returns the bytes freed.
  absl::StatusOr<int64_t> Free(const std::string& session_id, const std::string& handle);

  // Compute.
  absl::StatusOr<v1::ArrayInfo> RunOp(const v1::RunOpRequest& request);
  absl::StatusOr<v1::ListOpsResponse> ListOps();

  // Admin.
  absl::StatusOr<v1::StatusResponse> Status();
  absl::StatusOr<v1::ListSessionsResponse> ListSessions();
  absl::StatusOr<v1::ListDevicesResponse> ListDevices();
  // memory_used_bytes summed over the daemon's devices.
  absl::StatusOr<int64_t> MemoryUsedBytes();
  absl::StatusOr<v1::ListPartitionsResponse> ListPartitions();
  // The status of the partition named `name`; NOT_FOUND if the daemon lists none.
  absl::StatusOr<v1::PartitionStatus> GetPartition(const std::string& name);
  absl::StatusOr<v1::ListTasksResponse> ListTasks(const v1::ListTasksRequest& request);
  absl::StatusOr<v1::ListTenantsResponse> ListTenants();

 private:
  explicit RawApi(std::shared_ptr<grpc::Channel> channel);
  static void SetDeadline(grpc::ClientContext& context);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::SessionService::Stub> sessions_;
  std::unique_ptr<v1::ArrayService::Stub> arrays_;
  std::unique_ptr<v1::ComputeService::Stub> compute_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

// Request builders for the cases tests send most.
v1::UploadRequest UploadHeader(const std::string& session_id, const std::string& handle);
v1::UploadRequest UploadChunk(int64_t offset, std::string data);
v1::Operand HandleOperand(const std::string& handle);

}  // namespace gpukit::testing

#endif  // GPUKIT_TESTS_INTEGRATION_RAW_API_H_
