#include "absl/strings/str_cat.h"
#include "daemon/service/convert.h"
#include "daemon/service/services.h"
#include "proto/dtype_convert.h"

namespace gpukit::service {

grpc::Status ArrayServiceImpl::Create(grpc::ServerContext* context,
                                      const v1::CreateArrayRequest* request,
                                      v1::CreateArrayResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  absl::StatusOr<DType> dtype = DTypeFromProto(request->dtype(), "dtype");
  if (!dtype.ok()) return ToGrpc(dtype.status(), context);
  absl::StatusOr<ArrayView> view = core_.CreateArray(
      request->session_id(), {*dtype, Shape(request->shape().begin(), request->shape().end())});
  if (!view.ok()) return ToGrpc(view.status(), context);
  ToProto(*view, response->mutable_array());
  return grpc::Status::OK;
}

grpc::Status ArrayServiceImpl::Free(grpc::ServerContext* context,
                                    const v1::FreeArrayRequest* request,
                                    v1::FreeArrayResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  absl::StatusOr<int64_t> bytes = core_.FreeArray(request->session_id(), request->handle());
  if (!bytes.ok()) return ToGrpc(bytes.status(), context);
  response->set_bytes_freed(*bytes);
  return grpc::Status::OK;
}

grpc::Status ArrayServiceImpl::Describe(grpc::ServerContext* context,
                                        const v1::DescribeArrayRequest* request,
                                        v1::DescribeArrayResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  absl::StatusOr<ArrayView> view = core_.DescribeArray(request->session_id(), request->handle());
  if (!view.ok()) return ToGrpc(view.status(), context);
  ToProto(*view, response->mutable_array());
  return grpc::Status::OK;
}

}  // namespace gpukit::service

namespace gpukit::service {

grpc::Status ArrayServiceImpl::RegisterHostMemory(grpc::ServerContext* context,
                                                  const v1::RegisterHostMemoryRequest* request,
                                                  v1::RegisterHostMemoryResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  if (fd_channel_.empty()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "host shared memory needs gpukitd's descriptor channel, which exists "
                        "only when gpukitd listens on a unix socket");
  }
  absl::StatusOr<HostRegionGrant> grant =
      core_.RegisterHostMemory(request->session_id(), request->bytes());
  if (!grant.ok()) return ToGrpc(grant.status(), context);
  response->set_region(grant->handle);
  response->set_token(grant->token);
  response->set_token_ttl_ms(absl::ToInt64Milliseconds(grant->token_ttl));
  response->set_fd_channel(fd_channel_);
  return grpc::Status::OK;
}

grpc::Status ArrayServiceImpl::Export(grpc::ServerContext* context,
                                      const v1::ExportArrayRequest* request,
                                      v1::ExportArrayResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  if (fd_channel_.empty() && !request->cuda_ipc_handle()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "exporting device memory as a descriptor needs gpukitd's descriptor "
                        "channel, which exists only when gpukitd listens on a unix socket; ask "
                        "for a CUDA IPC handle instead");
  }
  absl::StatusOr<ArrayExport> exported = core_.ExportArray(
      request->session_id(), request->handle(),
      request->cuda_ipc_handle() ? ExportForm::kCudaIpcHandle : ExportForm::kDescriptor);
  if (!exported.ok()) return ToGrpc(exported.status(), context);
  response->set_cuda_ipc_handle(exported->cuda_ipc_handle);
  response->set_token(exported->token);
  response->set_token_ttl_ms(absl::ToInt64Milliseconds(exported->token_ttl));
  response->set_fd_channel(fd_channel_);
  response->set_allocation_bytes(exported->allocation_bytes);
  response->set_offset_bytes(exported->offset_bytes);
  response->set_bytes(exported->bytes);
  response->set_device_index(exported->device_index);
  return grpc::Status::OK;
}

grpc::Status ArrayServiceImpl::Import(grpc::ServerContext* context,
                                      const v1::ImportArrayRequest* request,
                                      v1::ImportArrayResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  absl::StatusOr<DType> dtype = DTypeFromProto(request->dtype(), "dtype");
  if (!dtype.ok()) return ToGrpc(dtype.status(), context);
  const TensorDesc desc{*dtype, Shape(request->shape().begin(), request->shape().end())};
  switch (request->memory_case()) {
    case v1::ImportArrayRequest::kCudaIpcHandle: {
      absl::StatusOr<ArrayView> view = core_.ImportArray(
          request->session_id(), desc, request->cuda_ipc_handle(), request->offset_bytes());
      if (!view.ok()) return ToGrpc(view.status(), context);
      ToProto(*view, response->mutable_array());
      return grpc::Status::OK;
    }
    case v1::ImportArrayRequest::kDescriptorAllocationBytes: {
      if (fd_channel_.empty()) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "importing memory by descriptor needs gpukitd's descriptor channel, "
                            "which exists only when gpukitd listens on a unix socket");
      }
      absl::StatusOr<ArrayImportGrant> grant =
          core_.ImportArrayByDescriptor(request->session_id(), desc,
                                        request->descriptor_allocation_bytes(),
                                        request->offset_bytes());
      if (!grant.ok()) return ToGrpc(grant.status(), context);
      ToProto(grant->array, response->mutable_array());
      response->set_token(grant->token);
      response->set_token_ttl_ms(absl::ToInt64Milliseconds(grant->token_ttl));
      response->set_fd_channel(fd_channel_);
      return grpc::Status::OK;
    }
    case v1::ImportArrayRequest::MEMORY_NOT_SET:
      break;
  }
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "the import names no memory: set cuda_ipc_handle or "
                      "descriptor_allocation_bytes");
}

grpc::Status ArrayServiceImpl::UnregisterHostMemory(
    grpc::ServerContext* context, const v1::UnregisterHostMemoryRequest* request,
    v1::UnregisterHostMemoryResponse* /*response*/) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  return ToGrpc(core_.UnregisterHostMemory(request->session_id(), request->region()), context);
}

grpc::Status ArrayServiceImpl::CopyFromHostMemory(grpc::ServerContext* context,
                                                  const v1::HostMemoryCopyRequest* request,
                                                  v1::HostMemoryCopyResponse* /*response*/) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  return ToGrpc(
      core_.CopyFromHostMemory(request->session_id(), request->handle(), request->array_offset(),
                               request->region(), request->region_offset(), request->bytes(),
                               TaskOptionsFrom({}, context)),
      context);
}

grpc::Status ArrayServiceImpl::CopyToHostMemory(grpc::ServerContext* context,
                                                const v1::HostMemoryCopyRequest* request,
                                                v1::HostMemoryCopyResponse* /*response*/) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  return ToGrpc(
      core_.CopyToHostMemory(request->session_id(), request->handle(), request->array_offset(),
                             request->region(), request->region_offset(), request->bytes(),
                             TaskOptionsFrom({}, context)),
      context);
}

}  // namespace gpukit::service
