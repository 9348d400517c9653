// The gRPC services of gpukit.v1. Each handler validates the request's form, calls the
// Core and translates the answer; no rule of the product lives here.
//
// Unary handlers run on gRPC's synchronous server, one thread each while they run (the
// number is capped: ServerOptions::max_threads). The streaming ones, ArrayService.Upload and
// Download and ComputeService.Submit, are on the callback API so that an open stream holds
// no thread of that pool: they return a reactor (array_streams.h, submit_stream.h).
//
// Thread safety: handlers run on gRPC's threads concurrently; all state is in the Core.
#ifndef GPUKIT_DAEMON_SERVICE_SERVICES_H_
#define GPUKIT_DAEMON_SERVICE_SERVICES_H_

#include <string>
#include <vector>

#include "daemon/core/core.h"
#include "daemon/service/access_guard.h"
#include "daemon/service/array_streams.h"
#include "daemon/service/inline_unary.h"
#include "daemon/service/submit_stream.h"
#include "gpukit/v1/admin.grpc.pb.h"
#include "gpukit/v1/array.grpc.pb.h"
#include "gpukit/v1/compute.grpc.pb.h"
#include "gpukit/v1/session.grpc.pb.h"

namespace gpukit::service {

// Synchronous but for KeepAlive, a callback method run inline (inline_unary.h).
class SessionServiceImpl final
    : public v1::SessionService::WithCallbackMethod_KeepAlive<v1::SessionService::Service> {
 public:
  // `guard` checks who may name a session; `workers` runs the KeepAlives that do not run
  // inline (at most `inline_limit` do at once). All must outlive the service.
  SessionServiceImpl(Core& core, const AccessGuard& guard, WorkerPool& workers, int inline_limit)
      : core_(core), guard_(guard), inline_(workers, inline_limit) {}
  grpc::Status Open(grpc::ServerContext* context, const v1::OpenSessionRequest* request,
                    v1::OpenSessionResponse* response) override;
  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* context,
                                      const v1::KeepAliveRequest* request,
                                      v1::KeepAliveResponse* response) override {
    return inline_.Serve(context, /*may_inline=*/true,
                         [=, this] { return KeepAliveNow(context, request, response); });
  }
  grpc::Status Close(grpc::ServerContext* context, const v1::CloseSessionRequest* request,
                     v1::CloseSessionResponse* response) override;
  // The submit socket's path, told to local callers in OpenSessionResponse (set before the
  // server starts).
  void set_submit_socket(std::string path) { submit_socket_ = std::move(path); }

 private:
  grpc::Status KeepAliveNow(grpc::ServerContextBase* context, const v1::KeepAliveRequest* request,
                            v1::KeepAliveResponse* response);

  Core& core_;
  const AccessGuard& guard_;
  InlineUnary inline_;
  std::string submit_socket_;
};

// Synchronous but for Upload and Download, which are callback methods.
class ArrayServiceImpl final
    : public v1::ArrayService::WithCallbackMethod_Upload<
          v1::ArrayService::WithCallbackMethod_Download<v1::ArrayService::Service>> {
 public:
  // `guard` checks who may name a session; `workers` runs the streams' chunk transfers
  // (array_streams.h). Both must outlive the server's streams.
  ArrayServiceImpl(Core& core, const AccessGuard& guard, WorkerPool& workers)
      : core_(core), guard_(guard), workers_(workers) {}
  grpc::Status Create(grpc::ServerContext* context, const v1::CreateArrayRequest* request,
                      v1::CreateArrayResponse* response) override;
  grpc::ServerReadReactor<v1::UploadRequest>* Upload(grpc::CallbackServerContext* context,
                                                     v1::UploadResponse* response) override {
    return NewUploadReactor(core_, guard_, workers_, context, response);
  }
  grpc::ServerWriteReactor<v1::DownloadResponse>* Download(
      grpc::CallbackServerContext* context, const v1::DownloadRequest* request) override {
    return NewDownloadReactor(core_, guard_, workers_, context, *request);
  }
  grpc::Status Free(grpc::ServerContext* context, const v1::FreeArrayRequest* request,
                    v1::FreeArrayResponse* response) override;
  grpc::Status Describe(grpc::ServerContext* context, const v1::DescribeArrayRequest* request,
                        v1::DescribeArrayResponse* response) override;
  grpc::Status RegisterHostMemory(grpc::ServerContext* context,
                                  const v1::RegisterHostMemoryRequest* request,
                                  v1::RegisterHostMemoryResponse* response) override;
  grpc::Status UnregisterHostMemory(grpc::ServerContext* context,
                                    const v1::UnregisterHostMemoryRequest* request,
                                    v1::UnregisterHostMemoryResponse* response) override;
  grpc::Status CopyFromHostMemory(grpc::ServerContext* context,
                                  const v1::HostMemoryCopyRequest* request,
                                  v1::HostMemoryCopyResponse* response) override;
  grpc::Status CopyToHostMemory(grpc::ServerContext* context,
                                const v1::HostMemoryCopyRequest* request,
                                v1::HostMemoryCopyResponse* response) override;

  grpc::Status Export(grpc::ServerContext* context, const v1::ExportArrayRequest* request,
                      v1::ExportArrayResponse* response) override;
  grpc::Status Import(grpc::ServerContext* context, const v1::ImportArrayRequest* request,
                      v1::ImportArrayResponse* response) override;

  // The descriptor channel's path, set before the server starts ("" when there is none).
  void set_fd_channel(std::string path) { fd_channel_ = std::move(path); }

 private:
  Core& core_;
  const AccessGuard& guard_;
  WorkerPool& workers_;
  std::string fd_channel_;
};

// Synchronous but for Submit, a callback method (submit_stream.h).
// Synchronous but for Submit (a stream) and RunOp and LaunchKernel, callback methods run
// inline (inline_unary.h).
class ComputeServiceImpl final
    : public v1::ComputeService::WithCallbackMethod_Submit<
          v1::ComputeService::WithCallbackMethod_RunOp<
              v1::ComputeService::WithCallbackMethod_LaunchKernel<v1::ComputeService::Service>>> {
 public:
  // `guard` checks who may name a session; `workers` runs the unary calls that do not run
  // inline (at most `inline_limit` do at once). All must outlive the server's streams.
  ComputeServiceImpl(Core& core, const AccessGuard& guard, WorkerPool& workers, int inline_limit)
      : core_(core), guard_(guard), inline_(workers, inline_limit) {}
  grpc::ServerBidiReactor<v1::SubmitRequest, v1::SubmitResponse>* Submit(
      grpc::CallbackServerContext* context) override {
    return NewSubmitReactor(core_, guard_, context);
  }
  grpc::ServerUnaryReactor* RunOp(grpc::CallbackServerContext* context,
                                  const v1::RunOpRequest* request,
                                  v1::RunOpResponse* response) override {
    return inline_.Serve(context, MayRunInline(request->session_id()),
                         [=, this] { return RunOpNow(context, request, response); });
  }
  grpc::Status ListOps(grpc::ServerContext* context, const v1::ListOpsRequest* request,
                       v1::ListOpsResponse* response) override;
  grpc::Status CompileKernel(grpc::ServerContext* context, const v1::CompileKernelRequest* request,
                             v1::CompileKernelResponse* response) override;
  grpc::Status GetCompileLog(grpc::ServerContext* context, const v1::GetCompileLogRequest* request,
                             v1::GetCompileLogResponse* response) override;
  grpc::ServerUnaryReactor* LaunchKernel(grpc::CallbackServerContext* context,
                                         const v1::LaunchKernelRequest* request,
                                         v1::LaunchKernelResponse* response) override {
    return inline_.Serve(context, MayRunInline(request->session_id()),
                         [=, this] { return LaunchKernelNow(context, request, response); });
  }
  grpc::Status FreeKernel(grpc::ServerContext* context, const v1::FreeKernelRequest* request,
                          v1::FreeKernelResponse* response) override;

 private:
  grpc::Status RunOpNow(grpc::ServerContextBase* context, const v1::RunOpRequest* request,
                        v1::RunOpResponse* response);
  // Whether a call of this session may run on gRPC's thread: not where a session of a higher
  // QoS class is open on its device (a BestEffort flood's long ops must not take the places
  // a Guaranteed tenant's calls need), nor an unknown session's (the handler refuses it).
  bool MayRunInline(const std::string& session_id) const;
  grpc::Status LaunchKernelNow(grpc::ServerContextBase* context,
                               const v1::LaunchKernelRequest* request,
                               v1::LaunchKernelResponse* response);

  Core& core_;
  const AccessGuard& guard_;
  InlineUnary inline_;
};

struct AdminFacts {
  std::string version;
  absl::Time started_at;
  std::vector<std::string> listen_addresses;
};

class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  AdminServiceImpl(Core& core, const AccessGuard& guard, const Clock& clock, AdminFacts facts)
      : core_(core), guard_(guard), clock_(clock), facts_(std::move(facts)) {}
  grpc::Status Status(grpc::ServerContext* context, const v1::StatusRequest* request,
                      v1::StatusResponse* response) override;
  grpc::Status ListDevices(grpc::ServerContext* context, const v1::ListDevicesRequest* request,
                           v1::ListDevicesResponse* response) override;
  grpc::Status ListSessions(grpc::ServerContext* context, const v1::ListSessionsRequest* request,
                            v1::ListSessionsResponse* response) override;
  grpc::Status CreatePartition(grpc::ServerContext* context,
                               const v1::CreatePartitionRequest* request,
                               v1::CreatePartitionResponse* response) override;
  grpc::Status UpdatePartition(grpc::ServerContext* context,
                               const v1::UpdatePartitionRequest* request,
                               v1::UpdatePartitionResponse* response) override;
  grpc::Status DeletePartition(grpc::ServerContext* context,
                               const v1::DeletePartitionRequest* request,
                               v1::DeletePartitionResponse* response) override;
  grpc::Status ListPartitions(grpc::ServerContext* context,
                              const v1::ListPartitionsRequest* request,
                              v1::ListPartitionsResponse* response) override;
  grpc::Status ListTasks(grpc::ServerContext* context, const v1::ListTasksRequest* request,
                         v1::ListTasksResponse* response) override;
  grpc::Status CancelTask(grpc::ServerContext* context, const v1::CancelTaskRequest* request,
                          v1::CancelTaskResponse* response) override;
  grpc::Status ListTenants(grpc::ServerContext* context, const v1::ListTenantsRequest* request,
                           v1::ListTenantsResponse* response) override;

 private:
  // Whether ListTasks shows `task` to a caller who is not an admin.
  bool MaySeeTask(const Principal& caller, const TaskInfo& task) const;

  Core& core_;
  const AccessGuard& guard_;
  const Clock& clock_;
  const AdminFacts facts_;
};

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_SERVICES_H_
