#include "absl/strings/str_cat.h"
#include "daemon/service/convert.h"
#include "daemon/service/services.h"

namespace gpukit::service {

grpc::Status ComputeServiceImpl::RunOp(grpc::ServerContext* context,
                                       const v1::RunOpRequest* request,
                                       v1::RunOpResponse* response) {
  absl::StatusOr<std::vector<OpInput>> inputs = FromProto(request->inputs());
  if (!inputs.ok()) return ToGrpc(inputs.status(), context);
  absl::StatusOr<AttrMap> attrs = FromProto(request->attrs());
  if (!attrs.ok()) return ToGrpc(attrs.status(), context);
  if (request->task().queue_timeout_ms() < 0) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat("task.queue_timeout_ms = ",
                                                          request->task().queue_timeout_ms(),
                                                          " must be >= 0")),
                  context);
  }
  absl::StatusOr<ArrayView> output =
      core_.RunOp(request->session_id(), request->op(), *inputs, *attrs,
                  TaskOptionsFrom(request->task(), context, absl::Now()));
  if (!output.ok()) return ToGrpc(output.status(), context);
  ToProto(*output, response->mutable_output());
  return grpc::Status::OK;
}

grpc::Status ComputeServiceImpl::ListOps(grpc::ServerContext* /*context*/,
                                         const v1::ListOpsRequest* /*request*/,
                                         v1::ListOpsResponse* response) {
  for (const OpDef& op : core_.ops().ops()) {
    v1::OpInfo* info = response->add_ops();
    info->set_name(op.name);
    info->set_summary(op.summary);
    info->set_min_inputs(op.min_inputs);
    info->set_max_inputs(op.max_inputs);
    for (const std::string& attr : op.attrs) info->add_attrs(attr);
    for (int i = 0; i < core_.device_count(); ++i) {
      const Device& device = core_.device(i);
      const std::string backend(BackendName(device.properties().backend));
      if (device.SupportsOp(op.name) && std::find(info->backends().begin(), info->backends().end(),
                                                  backend) == info->backends().end()) {
        info->add_backends(backend);
      }
    }
  }
  return grpc::Status::OK;
}

}  // namespace gpukit::service
