#include "tests/integration/raw_api.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/cpp/channel.h"

namespace gpukit::testing {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(10);

// Runs one unary call with a deadline and returns the response or the daemon's status.
template <typename Response, typename Call>
absl::StatusOr<Response> Unary(Call call) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(kCallTimeout));
  Response response;
  absl::Status status = FromGrpc(call(&context, &response), context);
  if (!status.ok()) return status;
  return response;
}

}  // namespace

RawApi::RawApi(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)),
      sessions_(v1::SessionService::NewStub(channel_)),
      arrays_(v1::ArrayService::NewStub(channel_)),
      compute_(v1::ComputeService::NewStub(channel_)),
      admin_(v1::AdminService::NewStub(channel_)) {}

absl::StatusOr<RawApi> RawApi::Connect(const std::string& address,
                                       const ChannelSecurity& security) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ConnectChannel(address, absl::Seconds(5), security);
  if (!channel.ok()) return channel.status();
  return RawApi(*std::move(channel));
}

void RawApi::SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(kCallTimeout));
}

absl::StatusOr<v1::OpenSessionResponse> RawApi::Open(const v1::OpenSessionRequest& request) {
  return Unary<v1::OpenSessionResponse>(
      [&](grpc::ClientContext* c, auto* r) { return sessions_->Open(c, request, r); });
}

absl::StatusOr<std::string> RawApi::OpenSession(const std::string& tenant, int64_t lease_ms) {
  v1::OpenSessionRequest request;
  request.set_tenant(tenant);
  request.set_lease_ms(lease_ms);
  request.mutable_client()->set_name("raw-api");
  absl::StatusOr<v1::OpenSessionResponse> response = Open(request);
  if (!response.ok()) return response.status();
  return response->session_id();
}

absl::StatusOr<v1::KeepAliveResponse> RawApi::KeepAlive(const std::string& session_id) {
  v1::KeepAliveRequest request;
  request.set_session_id(session_id);
  return Unary<v1::KeepAliveResponse>(
      [&](grpc::ClientContext* c, auto* r) { return sessions_->KeepAlive(c, request, r); });
}

absl::StatusOr<v1::CloseSessionResponse> RawApi::Close(const std::string& session_id) {
  v1::CloseSessionRequest request;
  request.set_session_id(session_id);
  return Unary<v1::CloseSessionResponse>(
      [&](grpc::ClientContext* c, auto* r) { return sessions_->Close(c, request, r); });
}

absl::StatusOr<v1::ArrayInfo> RawApi::Create(const v1::CreateArrayRequest& request) {
  absl::StatusOr<v1::CreateArrayResponse> response = Unary<v1::CreateArrayResponse>(
      [&](grpc::ClientContext* c, auto* r) { return arrays_->Create(c, request, r); });
  if (!response.ok()) return response.status();
  return response->array();
}

absl::StatusOr<v1::ArrayInfo> RawApi::CreateArray(const std::string& session_id,
                                                  const std::vector<int64_t>& shape,
                                                  v1::DType dtype) {
  v1::CreateArrayRequest request;
  request.set_session_id(session_id);
  request.mutable_shape()->Assign(shape.begin(), shape.end());
  request.set_dtype(dtype);
  return Create(request);
}

absl::StatusOr<v1::UploadResponse> RawApi::Upload(const std::vector<v1::UploadRequest>& messages) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::UploadResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::UploadRequest>> writer =
      arrays_->Upload(&context, &response);
  for (const v1::UploadRequest& message : messages) {
    if (!writer->Write(message)) break;  // the daemon ended the call; Finish says why
  }
  writer->WritesDone();
  absl::Status status = FromGrpc(writer->Finish(), context);
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::UploadResponse> RawApi::UploadBytes(const std::string& session_id,
                                                       const std::string& handle,
                                                       const std::string& data,
                                                       int64_t chunk_bytes) {
  std::vector<v1::UploadRequest> messages = {UploadHeader(session_id, handle)};
  for (size_t offset = 0; offset < data.size(); offset += chunk_bytes) {
    messages.push_back(UploadChunk(static_cast<int64_t>(offset),
                                   data.substr(offset, static_cast<size_t>(chunk_bytes))));
  }
  return Upload(messages);
}

absl::StatusOr<std::vector<v1::DownloadResponse>> RawApi::Download(
    const v1::DownloadRequest& request) {
  grpc::ClientContext context;
  SetDeadline(context);
  std::unique_ptr<grpc::ClientReader<v1::DownloadResponse>> reader =
      arrays_->Download(&context, request);
  std::vector<v1::DownloadResponse> messages;
  v1::DownloadResponse message;
  while (reader->Read(&message)) messages.push_back(message);
  absl::Status status = FromGrpc(reader->Finish(), context);
  if (!status.ok()) return status;
  return messages;
}

absl::StatusOr<v1::ArrayInfo> RawApi::CreateWithBytes(const std::string& session_id,
                                                      const std::vector<int64_t>& shape,
                                                      v1::DType dtype, const std::string& data) {
  absl::StatusOr<v1::ArrayInfo> info = CreateArray(session_id, shape, dtype);
  if (!info.ok()) return info.status();
  absl::StatusOr<v1::UploadResponse> upload = UploadBytes(session_id, info->handle(), data);
  if (!upload.ok()) return upload.status();
  if (upload->bytes_written() != static_cast<int64_t>(data.size())) {
    return absl::InternalError(
        absl::StrCat("uploaded ", upload->bytes_written(), " of ", data.size(), " bytes"));
  }
  return info;
}

absl::StatusOr<std::string> RawApi::DownloadAll(const std::string& session_id,
                                                const std::string& handle) {
  v1::DownloadRequest request;
  request.set_session_id(session_id);
  request.set_handle(handle);
  absl::StatusOr<std::vector<v1::DownloadResponse>> messages = Download(request);
  if (!messages.ok()) return messages.status();
  std::string bytes;
  for (const v1::DownloadResponse& message : *messages) bytes += message.chunk().data();
  return bytes;
}

absl::StatusOr<v1::ArrayInfo> RawApi::Describe(const std::string& session_id,
                                               const std::string& handle) {
  v1::DescribeArrayRequest request;
  request.set_session_id(session_id);
  request.set_handle(handle);
  absl::StatusOr<v1::DescribeArrayResponse> response = Unary<v1::DescribeArrayResponse>(
      [&](grpc::ClientContext* c, auto* r) { return arrays_->Describe(c, request, r); });
  if (!response.ok()) return response.status();
  return response->array();
}

absl::StatusOr<int64_t> RawApi::Free(const std::string& session_id, const std::string& handle) {
  v1::FreeArrayRequest request;
  request.set_session_id(session_id);
  request.set_handle(handle);
  absl::StatusOr<v1::FreeArrayResponse> response = Unary<v1::FreeArrayResponse>(
      [&](grpc::ClientContext* c, auto* r) { return arrays_->Free(c, request, r); });
  if (!response.ok()) return response.status();
  return response->bytes_freed();
}

absl::StatusOr<v1::ArrayInfo> RawApi::RunOp(const v1::RunOpRequest& request) {
  absl::StatusOr<v1::RunOpResponse> response = Unary<v1::RunOpResponse>(
      [&](grpc::ClientContext* c, auto* r) { return compute_->RunOp(c, request, r); });
  if (!response.ok()) return response.status();
  return response->output();
}

absl::StatusOr<v1::ListOpsResponse> RawApi::ListOps() {
  return Unary<v1::ListOpsResponse>([&](grpc::ClientContext* c, auto* r) {
    return compute_->ListOps(c, v1::ListOpsRequest(), r);
  });
}

absl::StatusOr<v1::StatusResponse> RawApi::Status() {
  return Unary<v1::StatusResponse>(
      [&](grpc::ClientContext* c, auto* r) { return admin_->Status(c, v1::StatusRequest(), r); });
}

absl::StatusOr<v1::ListSessionsResponse> RawApi::ListSessions() {
  return Unary<v1::ListSessionsResponse>([&](grpc::ClientContext* c, auto* r) {
    return admin_->ListSessions(c, v1::ListSessionsRequest(), r);
  });
}

absl::StatusOr<v1::ListDevicesResponse> RawApi::ListDevices() {
  return Unary<v1::ListDevicesResponse>([&](grpc::ClientContext* c, auto* r) {
    return admin_->ListDevices(c, v1::ListDevicesRequest(), r);
  });
}

absl::StatusOr<int64_t> RawApi::MemoryUsedBytes() {
  absl::StatusOr<v1::ListDevicesResponse> devices = ListDevices();
  if (!devices.ok()) return devices.status();
  int64_t used_bytes = 0;
  for (const v1::DeviceInfo& device : devices->devices()) used_bytes += device.memory_used_bytes();
  return used_bytes;
}

absl::StatusOr<v1::ListPartitionsResponse> RawApi::ListPartitions() {
  return Unary<v1::ListPartitionsResponse>([&](grpc::ClientContext* c, auto* r) {
    return admin_->ListPartitions(c, v1::ListPartitionsRequest(), r);
  });
}

absl::StatusOr<v1::PartitionStatus> RawApi::GetPartition(const std::string& name) {
  absl::StatusOr<v1::ListPartitionsResponse> partitions = ListPartitions();
  if (!partitions.ok()) return partitions.status();
  for (const v1::PartitionStatus& partition : partitions->partitions()) {
    if (partition.partition().name() == name) return partition;
  }
  return absl::NotFoundError("ListPartitions lists no partition \"" + name + "\"");
}

absl::StatusOr<v1::ListTasksResponse> RawApi::ListTasks(const v1::ListTasksRequest& request) {
  return Unary<v1::ListTasksResponse>(
      [&](grpc::ClientContext* c, auto* r) { return admin_->ListTasks(c, request, r); });
}

absl::StatusOr<v1::ListTenantsResponse> RawApi::ListTenants() {
  return Unary<v1::ListTenantsResponse>([&](grpc::ClientContext* c, auto* r) {
    return admin_->ListTenants(c, v1::ListTenantsRequest(), r);
  });
}

v1::UploadRequest UploadHeader(const std::string& session_id, const std::string& handle) {
  v1::UploadRequest message;
  message.mutable_header()->set_session_id(session_id);
  message.mutable_header()->set_handle(handle);
  return message;
}

v1::UploadRequest UploadChunk(int64_t offset, std::string data) {
  v1::UploadRequest message;
  message.mutable_chunk()->set_offset(offset);
  message.mutable_chunk()->set_data(std::move(data));
  return message;
}

v1::Operand HandleOperand(const std::string& handle) {
  v1::Operand operand;
  operand.set_handle(handle);
  return operand;
}

}  // namespace gpukit::testing
