#include "daemon/service/convert.h"
#include "daemon/service/services.h"

namespace gpukit::service {

grpc::Status SessionServiceImpl::Open(grpc::ServerContext* context,
                                      const v1::OpenSessionRequest* request,
                                      v1::OpenSessionResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  OpenSessionParams params;
  // The caller's own tenant, or another it may claim (admins).
  if (grpc::Status s =
          guard_.SessionTenant(context, request->tenant(), request->partition(), &params.tenant);
      !s.ok()) {
    return s;
  }
  params.partition = request->partition();
  params.client = {request->client().name(), request->client().library_version(),
                   request->client().hostname(), request->client().pid()};
  params.owner = guard_.Caller(*context);
  const bool owner_is_local = params.owner.local();
  params.lease = absl::Milliseconds(request->lease_ms());
  absl::StatusOr<ResourceSpec> resources = FromProto(request->resources());
  if (!resources.ok()) return ToGrpc(resources.status(), context);
  params.resources = *resources;
  const std::string params_tenant = params.tenant;
  absl::StatusOr<SessionGrant> grant = core_.OpenSession(std::move(params));
  if (!grant.ok()) return ToGrpc(grant.status(), context);
  response->set_session_id(grant->session_id);
  response->set_lease_ms(absl::ToInt64Milliseconds(grant->lease));
  response->set_partition(grant->partition);
  response->set_qos_class(ToProto(grant->qos));
  ToProto(grant->resources, response->mutable_resources());
  response->set_device_index(grant->device_index);
  response->set_tenant(params_tenant);
  // Only a caller on a unix socket can reach the submit socket (and prove who it is there).
  if (owner_is_local) response->set_submit_socket(submit_socket_);
  return grpc::Status::OK;
}

grpc::Status SessionServiceImpl::KeepAliveNow(grpc::ServerContextBase* context,
                                              const v1::KeepAliveRequest* request,
                                              v1::KeepAliveResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  absl::StatusOr<absl::Duration> lease = core_.KeepAlive(request->session_id());
  if (!lease.ok()) return ToGrpc(lease.status(), context);
  response->set_lease_ms(absl::ToInt64Milliseconds(*lease));
  return grpc::Status::OK;
}

grpc::Status SessionServiceImpl::Close(grpc::ServerContext* context,
                                       const v1::CloseSessionRequest* request,
                                       v1::CloseSessionResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  absl::StatusOr<CloseStats> stats = core_.CloseSession(request->session_id());
  if (!stats.ok()) return ToGrpc(stats.status(), context);
  response->set_arrays_freed(stats->arrays_freed);
  response->set_bytes_freed(stats->bytes_freed);
  return grpc::Status::OK;
}

}  // namespace gpukit::service
