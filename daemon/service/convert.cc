#include "daemon/service/convert.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "daemon/scheduler/admission.h"
#include "daemon/service/request_strings.h"
#include "proto/dtype_convert.h"
#include "runtime/base/status_macros.h"
#include "runtime/base/utf8.h"

namespace gpukit::service {

void ToProto(const ArrayView& view, v1::ArrayInfo* info) {
  info->set_handle(view.handle);
  info->mutable_shape()->Assign(view.desc.shape.begin(), view.desc.shape.end());
  info->set_dtype(DTypeToProto(view.desc.dtype));
  info->set_size_bytes(view.bytes);
  info->set_device_index(view.device_index);
}

absl::StatusOr<AttrMap> FromProto(const google::protobuf::Map<std::string, v1::AttrValue>& attrs) {
  AttrMap out;
  for (const auto& [name, value] : attrs) {
    const std::string field = absl::StrCat("attrs[\"", name.substr(0, 64), "\"]");
    switch (value.value_case()) {
      case v1::AttrValue::kIntValue:
        out.emplace(name, value.int_value());
        break;
      case v1::AttrValue::kFloatValue:
        out.emplace(name, value.float_value());
        break;
      case v1::AttrValue::kBoolValue:
        out.emplace(name, value.bool_value());
        break;
      case v1::AttrValue::kDtypeValue: {
        GPUKIT_ASSIGN_OR_RETURN(DType dtype, DTypeFromProto(value.dtype_value(), field));
        out.emplace(name, dtype);
        break;
      }
      case v1::AttrValue::kIntList:
        out.emplace(name, std::vector<int64_t>(value.int_list().values().begin(),
                                               value.int_list().values().end()));
        break;
      case v1::AttrValue::kStringValue:
        out.emplace(name, value.string_value());
        break;
      case v1::AttrValue::VALUE_NOT_SET:
        return absl::InvalidArgumentError(absl::StrCat(field, " has no value"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<OpInput>> FromProto(
    const google::protobuf::RepeatedPtrField<v1::Operand>& inputs) {
  std::vector<OpInput> out;
  out.reserve(inputs.size());
  for (int i = 0; i < inputs.size(); ++i) {
    const v1::Operand& operand = inputs[i];
    OpInput input;
    switch (operand.value_case()) {
      case v1::Operand::kHandle:
        input.handle = operand.handle();
        break;
      case v1::Operand::kScalar:
        input.is_scalar = true;
        if (operand.scalar().value_case() == v1::Scalar::kFloatValue) {
          input.scalar.is_float = true;
          input.scalar.float_value = operand.scalar().float_value();
        } else if (operand.scalar().value_case() == v1::Scalar::kIntValue) {
          input.scalar.int_value = operand.scalar().int_value();
        } else {
          return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "].scalar has no value"));
        }
        break;
      case v1::Operand::VALUE_NOT_SET:
        return absl::InvalidArgumentError(
            absl::StrCat("inputs[", i, "] is neither a handle nor a scalar"));
    }
    out.push_back(std::move(input));
  }
  return out;
}

absl::StatusOr<ResourceSpec> FromProto(const v1::ResourceRequirements& resources) {
  ResourceSpec spec;
  if (resources.requests().has_memory_bytes()) {
    spec.memory_request_bytes = resources.requests().memory_bytes();
  }
  if (resources.limits().has_memory_bytes()) {
    spec.memory_limit_bytes = resources.limits().memory_bytes();
  }
  if (resources.requests().has_compute()) spec.compute_request = resources.requests().compute();
  if (resources.limits().has_compute()) spec.compute_limit = resources.limits().compute();
  GPUKIT_RETURN_IF_ERROR(ValidateResourceSpec(spec));
  return spec;
}

void ToProto(const ResourceSpec& spec, v1::ResourceRequirements* out) {
  if (spec.memory_request_bytes)
    out->mutable_requests()->set_memory_bytes(*spec.memory_request_bytes);
  if (spec.memory_limit_bytes) out->mutable_limits()->set_memory_bytes(*spec.memory_limit_bytes);
  if (spec.compute_request) out->mutable_requests()->set_compute(*spec.compute_request);
  if (spec.compute_limit) out->mutable_limits()->set_compute(*spec.compute_limit);
}

v1::QosClass ToProto(QosClass qos) {
  switch (qos) {
    case QosClass::kGuaranteed:
      return v1::QOS_CLASS_GUARANTEED;
    case QosClass::kBurstable:
      return v1::QOS_CLASS_BURSTABLE;
    case QosClass::kBestEffort:
      return v1::QOS_CLASS_BEST_EFFORT;
  }
  return v1::QOS_CLASS_UNSPECIFIED;
}

absl::StatusOr<PartitionSpec> FromProto(const v1::Partition& in) {
  PartitionSpec spec;
  spec.name = in.name();
  spec.device_index = in.device_index();
  spec.memory_quota_bytes = in.memory_quota_bytes();
  spec.compute_share = in.compute_share();
  spec.bandwidth_cap = in.bandwidth_cap();
  if (in.max_queued_tasks() != 0) spec.max_queued_tasks = in.max_queued_tasks();
  if (in.max_running_tasks() != 0) spec.max_running_tasks = in.max_running_tasks();
  spec.max_sessions = in.max_sessions();
  spec.spill = in.spill();
  spec.reserve_sms = in.reserve_sms();
  GPUKIT_ASSIGN_OR_RETURN(spec.session_defaults, FromProto(in.session_defaults()));
  return spec;
}

void ToProto(const PartitionSpec& spec, v1::Partition* out) {
  out->set_name(spec.name);
  out->set_device_index(spec.device_index);
  out->set_memory_quota_bytes(spec.memory_quota_bytes);
  out->set_compute_share(spec.compute_share);
  out->set_bandwidth_cap(spec.bandwidth_cap);
  out->set_max_queued_tasks(spec.max_queued_tasks);
  out->set_max_running_tasks(spec.max_running_tasks);
  out->set_max_sessions(spec.max_sessions);
  out->set_spill(spec.spill);
  out->set_reserve_sms(spec.reserve_sms);
  ToProto(spec.session_defaults, out->mutable_session_defaults());
}

void ToProto(const PartitionStatus& status, v1::PartitionStatus* out) {
  ToProto(status.spec, out->mutable_partition());
  out->set_sessions(status.sessions);
  out->set_memory_used_bytes(status.memory_used_bytes);
  out->set_memory_requested_bytes(status.memory_requested_bytes);
  out->set_compute_requested(status.compute_requested);
  out->set_queued_tasks(status.queued);
  out->set_running_tasks(status.running);
  out->set_admitted_total(status.admitted_total);
  out->set_succeeded_total(status.succeeded_total);
  out->set_failed_total(status.failed_total);
  out->set_device_time_ns(absl::ToInt64Nanoseconds(status.device_time_total));
  for (int i = 1; i < kRejectReasonCount; ++i) {
    if (status.rejected[i] > 0) {
      (*out->mutable_rejected())[std::string(RejectReasonName(static_cast<RejectReason>(i)))] =
          status.rejected[i];
    }
  }
  out->set_pacing_balance_ns(absl::ToInt64Nanoseconds(status.pacing_balance));
  out->set_sm_count(status.sm_count);
  ToProto(status.device_time_by_qos, out->mutable_device_time_by_qos());
}

void ToProto(const DeviceTimeByQos& device_time, v1::DeviceTimeByQos* out) {
  auto ns = [&](QosClass qos) {
    return absl::ToInt64Nanoseconds(device_time[static_cast<int>(qos)]);
  };
  out->set_guaranteed_ns(ns(QosClass::kGuaranteed));
  out->set_burstable_ns(ns(QosClass::kBurstable));
  out->set_best_effort_ns(ns(QosClass::kBestEffort));
}

void ToProto(const TenantUsage& usage, v1::TenantUsage* out) {
  out->set_tenant(usage.tenant);
  out->set_sessions(usage.sessions);
  out->set_memory_used_bytes(usage.memory_used_bytes);
  out->set_device_time_ns(absl::ToInt64Nanoseconds(usage.device_time_total));
  ToProto(usage.device_time_by_qos, out->mutable_device_time_by_qos());
  out->set_tasks_finished(usage.tasks_finished);
  out->set_tasks_failed(usage.tasks_failed);
}

v1::TaskState ToProto(TaskState state) {
  // The proto enum lists the states in the same order, from 1.
  return static_cast<v1::TaskState>(static_cast<int>(state) + 1);
}

absl::StatusOr<std::optional<TaskState>> FromProto(v1::TaskState state) {
  if (state == v1::TASK_STATE_UNSPECIFIED) return std::optional<TaskState>();
  const int value = static_cast<int>(state) - 1;
  if (value < 0 || value >= kTaskStateCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("state = ", static_cast<int>(state), " is not a TaskState"));
  }
  return std::optional<TaskState>(static_cast<TaskState>(value));
}

void ToProto(const TaskInfo& task, absl::Time now, v1::TaskInfo* out) {
  out->set_task_id(task.id);
  out->set_session_id(task.session_id);
  out->set_partition(task.partition);
  out->set_qos_class(ToProto(task.qos));
  out->set_kind(std::string(TaskKindName(task.kind)));
  out->set_name(task.name);
  out->set_priority(task.priority);
  out->set_state(ToProto(task.state));
  out->set_submit_time_unix_us(absl::ToUnixMicros(task.submitted));
  const absl::Time finished = task.finished == absl::InfinitePast() ? now : task.finished;
  const absl::Time admitted = task.admitted == absl::InfinitePast() ? finished : task.admitted;
  out->set_wait_us(absl::ToInt64Microseconds(admitted - task.submitted));
  if (task.started != absl::InfinitePast()) {
    out->set_run_us(absl::ToInt64Microseconds(finished - task.started));
  }
  out->set_device_time_ns(absl::ToInt64Nanoseconds(task.device_time));
  out->set_error(task.error);
}

absl::StatusOr<PartitionFieldMask> PartitionFieldMaskFromProto(
    const google::protobuf::RepeatedPtrField<std::string>& mask) {
  if (mask.empty()) return PartitionFieldMask::All();
  PartitionFieldMask out;
  for (const std::string& field : mask) {
    if (field == "memory_quota_bytes") {
      out.memory_quota_bytes = true;
    } else if (field == "compute_share") {
      out.compute_share = true;
    } else if (field == "bandwidth_cap") {
      out.bandwidth_cap = true;
    } else if (field == "max_queued_tasks") {
      out.max_queued_tasks = true;
    } else if (field == "max_running_tasks") {
      out.max_running_tasks = true;
    } else if (field == "max_sessions") {
      out.max_sessions = true;
    } else if (field == "spill") {
      out.spill = true;
    } else if (field == "reserve_sms") {
      out.reserve_sms = true;
    } else if (field == "session_defaults") {
      out.session_defaults = true;
    } else if (field == "name" || field == "device_index") {
      return absl::InvalidArgumentError(
          absl::StrCat("update_mask names \"", field, "\", which cannot change"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("update_mask names \"", field.substr(0, 64),
                                                     "\", which is not a Partition field"));
    }
  }
  return out;
}

absl::Duration CallTimeRemaining(const grpc::ServerContextBase& context) {
  const std::chrono::system_clock::time_point deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteDuration();
  // gRPC keeps the deadline on the system clock; only the difference leaves this function.
  return absl::FromChrono(deadline) - absl::FromChrono(std::chrono::system_clock::now());
}

TaskOptions TaskOptionsFrom(const v1::TaskOptions& options, grpc::ServerContextBase* context) {
  TaskOptions task;
  task.priority = options.priority();
  if (options.queue_timeout_ms() > 0) {
    task.queue_timeout = absl::Milliseconds(options.queue_timeout_ms());
  }
  if (context != nullptr) {
    task.queue_timeout = std::min(task.queue_timeout, CallTimeRemaining(*context));
    task.cancelled = [context] { return context->IsCancelled(); };
  }
  return task;
}

absl::Status ValidateTaskOptions(const v1::TaskOptions& options) {
  if (options.queue_timeout_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task.queue_timeout_ms = ", options.queue_timeout_ms(), " must be >= 0"));
  }
  return absl::OkStatus();
}

grpc::Status ValidateStrings(const google::protobuf::Message& request,
                             grpc::ServerContextBase* context) {
  return ToGrpc(ValidateRequestStrings(request), context);
}

namespace {

// A scalar kernel argument: the value's bytes as the kernel's parameter of type T holds
// them (the host and every CUDA GPU are little-endian).
template <typename T>
KernelArgInput ScalarArg(T value) {
  static_assert(std::is_arithmetic_v<T> && sizeof(T) <= sizeof(KernelArgInput::bytes));
  KernelArgInput arg;
  std::memcpy(arg.bytes, &value, sizeof(T));
  arg.size_bytes = sizeof(T);
  return arg;
}

void DimsFrom(const v1::Dim3& dim, uint32_t (&out)[3]) {
  const uint32_t values[3] = {dim.x(), dim.y(), dim.z()};
  for (int i = 0; i < 3; ++i) out[i] = values[i] == 0 ? 1 : values[i];
}

}  // namespace

absl::StatusOr<std::vector<KernelArgInput>> FromProto(
    const google::protobuf::RepeatedPtrField<v1::KernelArgument>& args) {
  std::vector<KernelArgInput> out;
  out.reserve(args.size());
  for (int i = 0; i < args.size(); ++i) {
    const v1::KernelArgument& arg = args[i];
    switch (arg.value_case()) {
      case v1::KernelArgument::kArray: {
        KernelArgInput array;
        array.is_array = true;
        array.handle = arg.array();
        out.push_back(std::move(array));
        break;
      }
      case v1::KernelArgument::kF32:
        out.push_back(ScalarArg(arg.f32()));
        break;
      case v1::KernelArgument::kF64:
        out.push_back(ScalarArg(arg.f64()));
        break;
      case v1::KernelArgument::kI32:
        out.push_back(ScalarArg(arg.i32()));
        break;
      case v1::KernelArgument::kI64:
        out.push_back(ScalarArg(arg.i64()));
        break;
      case v1::KernelArgument::kU32:
        out.push_back(ScalarArg(arg.u32()));
        break;
      case v1::KernelArgument::kU64:
        out.push_back(ScalarArg(arg.u64()));
        break;
      case v1::KernelArgument::VALUE_NOT_SET:
        return absl::InvalidArgumentError(absl::StrCat("args[", i, "] has no value"));
    }
  }
  return out;
}

LaunchConfig LaunchConfigFrom(const v1::LaunchKernelRequest& request) {
  LaunchConfig config;
  DimsFrom(request.grid(), config.grid);
  DimsFrom(request.block(), config.block);
  config.shared_memory_bytes = request.shared_memory_bytes();
  return config;
}

void ToProto(const KernelView& kernel, v1::CompileKernelResponse* out) {
  out->set_kernel(kernel.handle);
  for (size_t i = 0; i < kernel.entries.size(); ++i) {
    v1::KernelEntry* entry = out->add_entries();
    entry->set_name(kernel.entries[i]);
    if (i < kernel.lowered_names.size()) entry->set_lowered_name(kernel.lowered_names[i]);
  }
  out->set_arch(kernel.arch);
  out->set_source(std::string(KernelOriginName(kernel.origin)));
  out->set_compile_ms(absl::ToDoubleMilliseconds(kernel.compile_time));
  out->set_log(kernel.log);
}

void ToProto(const absl::Status& status, v1::OpResult* out) {
  const grpc::Status mapped = ToGrpc(status, /*context=*/nullptr);
  out->set_code(static_cast<int32_t>(mapped.error_code()));
  out->set_message(mapped.error_message());
  if (RejectReason reason = ReasonOf(status); reason != RejectReason::kNone) {
    out->set_reason(std::string(RejectReasonName(reason)));
  } else {
    out->clear_reason();
  }
}

grpc::Status ToGrpc(const absl::Status& status, grpc::ServerContextBase* context) {
  if (status.ok()) return grpc::Status::OK;
  if (context != nullptr) {
    if (RejectReason reason = ReasonOf(status); reason != RejectReason::kNone) {
      context->AddTrailingMetadata("gpukit-reason", std::string(RejectReasonName(reason)));
    }
  }
  // The message travels in a header, and a stock gRPC client refuses a response whose
  // headers pass 16 KiB ("received metadata size exceeds hard limit"): the client would see
  // RESOURCE_EXHAUSTED instead of the error. No message passes kMaxStatusMessageBytes.
  std::string message(status.message());
  if (message.size() > kMaxStatusMessageBytes) {
    const size_t cut = Utf8PrefixBytes(message, kMaxStatusMessageBytes);
    const size_t total = message.size();
    message.resize(cut);
    absl::StrAppend(&message, "\n[message cut: ", total - cut, " of ", total, " bytes]");
  }
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::move(message));
}

}  // namespace gpukit::service
