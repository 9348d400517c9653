#include <algorithm>

#include "daemon/service/convert.h"
#include "daemon/service/services.h"
#include "proto/dtype_convert.h"

namespace gpukit::service {
namespace {

v1::AttrType AttrTypeToProto(AttrType type) {
  switch (type) {
    case AttrType::kInt:
      return v1::ATTR_TYPE_INT;
    case AttrType::kNumber:
      return v1::ATTR_TYPE_NUMBER;
    case AttrType::kBool:
      return v1::ATTR_TYPE_BOOL;
    case AttrType::kDType:
      return v1::ATTR_TYPE_DTYPE;
    case AttrType::kIntList:
      return v1::ATTR_TYPE_INT_LIST;
    case AttrType::kString:
      return v1::ATTR_TYPE_STRING;
    case AttrType::kAxes:
      return v1::ATTR_TYPE_AXES;
  }
  return v1::ATTR_TYPE_UNSPECIFIED;
}

}  // namespace

bool ComputeServiceImpl::MayRunInline(const std::string& session_id) const {
  absl::StatusOr<bool> higher = core_.HigherClassSessionOpen(session_id);
  return higher.ok() && !*higher;
}

grpc::Status ComputeServiceImpl::RunOpNow(grpc::ServerContextBase* context,
                                          const v1::RunOpRequest* request,
                                          v1::RunOpResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  absl::StatusOr<std::vector<OpInput>> inputs = FromProto(request->inputs());
  if (!inputs.ok()) return ToGrpc(inputs.status(), context);
  absl::StatusOr<AttrMap> attrs = FromProto(request->attrs());
  if (!attrs.ok()) return ToGrpc(attrs.status(), context);
  if (absl::Status task = ValidateTaskOptions(request->task()); !task.ok()) {
    return ToGrpc(task, context);
  }
  absl::StatusOr<ArrayView> output = core_.RunOp(request->session_id(), request->op(), *inputs,
                                                 *attrs, TaskOptionsFrom(request->task(), context));
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
    for (const AttrSpec& attr : op.attrs) {
      info->add_attrs(attr.name);
      v1::OpAttrInfo* attr_info = info->add_attr_info();
      attr_info->set_name(attr.name);
      attr_info->set_type(AttrTypeToProto(attr.type));
      attr_info->set_required(attr.required);
      attr_info->set_default_value(attr.default_value);
      attr_info->set_doc(attr.doc);
    }
    for (const InputSpec& input : op.inputs) {
      v1::OpInputInfo* input_info = info->add_inputs();
      input_info->set_name(input.name);
      for (DType dtype : input.dtypes) input_info->add_dtypes(DTypeToProto(dtype));
      input_info->set_scalar_ok(input.scalar_ok);
    }
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

grpc::Status ComputeServiceImpl::CompileKernel(grpc::ServerContext* context,
                                               const v1::CompileKernelRequest* request,
                                               v1::CompileKernelResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  CompileRequest compile;
  compile.source = request->source();
  compile.entries.assign(request->entries().begin(), request->entries().end());
  compile.options.assign(request->options().begin(), request->options().end());
  for (const v1::KernelHeader& header : request->headers()) {
    compile.headers.emplace_back(header.name(), header.source());
  }
  absl::StatusOr<KernelView> kernel = core_.CompileKernel(request->session_id(), compile);
  if (!kernel.ok()) return ToGrpc(kernel.status(), context);
  ToProto(*kernel, response);
  return grpc::Status::OK;
}

grpc::Status ComputeServiceImpl::GetCompileLog(grpc::ServerContext* context,
                                               const v1::GetCompileLogRequest* request,
                                               v1::GetCompileLogResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  absl::StatusOr<CompileLog> log = core_.LastCompileLog(request->session_id());
  if (!log.ok()) return ToGrpc(log.status(), context);
  response->set_log(log->text);
  response->set_failed(log->failed);
  return grpc::Status::OK;
}

grpc::Status ComputeServiceImpl::LaunchKernelNow(grpc::ServerContextBase* context,
                                                 const v1::LaunchKernelRequest* request,
                                                 v1::LaunchKernelResponse* response) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  absl::StatusOr<std::vector<KernelArgInput>> args = FromProto(request->args());
  if (!args.ok()) return ToGrpc(args.status(), context);
  if (absl::Status task = ValidateTaskOptions(request->task()); !task.ok()) {
    return ToGrpc(task, context);
  }
  absl::StatusOr<absl::Duration> device_time = core_.LaunchKernel(
      request->session_id(), request->kernel(), request->entry(), LaunchConfigFrom(*request), *args,
      TaskOptionsFrom(request->task(), context));
  if (!device_time.ok()) return ToGrpc(device_time.status(), context);
  response->set_device_us(absl::ToDoubleMicroseconds(*device_time));
  return grpc::Status::OK;
}

grpc::Status ComputeServiceImpl::FreeKernel(grpc::ServerContext* context,
                                            const v1::FreeKernelRequest* request,
                                            v1::FreeKernelResponse* /*response*/) {
  if (grpc::Status s = ValidateStrings(*request, context); !s.ok()) return s;
  if (grpc::Status denied = guard_.CheckSession(context, request->session_id()); !denied.ok()) {
    return denied;
  }
  return ToGrpc(core_.FreeKernel(request->session_id(), request->kernel()), context);
}

}  // namespace gpukit::service
