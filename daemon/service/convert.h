// Translation between gpukit.v1 messages and the core's plain types, and the one place
// where absl::Status becomes grpc::Status.
//
// Thread safety: pure functions.
#ifndef GPUKIT_DAEMON_SERVICE_CONVERT_H_
#define GPUKIT_DAEMON_SERVICE_CONVERT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/core.h"
#include <optional>

#include "gpukit/v1/admin.pb.h"
#include "gpukit/v1/common.pb.h"
#include "gpukit/v1/compute.pb.h"
#include "grpcpp/grpcpp.h"

namespace gpukit::service {

// Largest data chunk in Upload/Download messages; the gRPC message limit is set above it.
// 64 KiB under gRPC's default 4 MiB message limit leaves room for the rest of the message,
// so no message exceeds 4 MiB and stock gRPC clients can read every Download message.
inline constexpr int64_t kMaxChunkBytes = (int64_t{4} << 20) - (int64_t{64} << 10);

void ToProto(const ArrayView& view, v1::ArrayInfo* info);

absl::StatusOr<AttrMap> FromProto(const google::protobuf::Map<std::string, v1::AttrValue>& attrs);
absl::StatusOr<std::vector<OpInput>> FromProto(
    const google::protobuf::RepeatedPtrField<v1::Operand>& inputs);

// Resources, QoS, partitions and tasks.
absl::StatusOr<ResourceSpec> FromProto(const v1::ResourceRequirements& resources);
void ToProto(const ResourceSpec& spec, v1::ResourceRequirements* out);
v1::QosClass ToProto(QosClass qos);
absl::StatusOr<PartitionSpec> FromProto(const v1::Partition& partition);
void ToProto(const PartitionSpec& spec, v1::Partition* out);
void ToProto(const PartitionStatus& status, v1::PartitionStatus* out);
void ToProto(const DeviceTimeByQos& device_time, v1::DeviceTimeByQos* out);
void ToProto(const TenantUsage& usage, v1::TenantUsage* out);
void ToProto(const TaskInfo& task, absl::Time now, v1::TaskInfo* out);
v1::TaskState ToProto(TaskState state);
absl::StatusOr<std::optional<TaskState>> FromProto(v1::TaskState state);
// The fields an UpdatePartition's `update_mask` names (every field but name and device when
// it is empty). INVALID_ARGUMENT for unknown or immutable field names.
absl::StatusOr<PartitionFieldMask> PartitionFieldMaskFromProto(
    const google::protobuf::RepeatedPtrField<std::string>& mask);
// How long the call has left: its deadline (gRPC's, on the system clock) minus the system
// clock's now, read once; infinite for a call without a deadline, zero or less for one past
// it. What leaves the service edge is this duration, never a time, so no time read from the
// system clock meets the scheduler's injected one.
absl::Duration CallTimeRemaining(const grpc::ServerContextBase& context);
// The request's queueing: its TaskOptions, the time left of the call (`context`, may be null)
// and its cancellation. The queue timeout is the smaller of the request's queue_timeout_ms
// (0: none) and CallTimeRemaining.
TaskOptions TaskOptionsFrom(const v1::TaskOptions& options, grpc::ServerContextBase* context);
// INVALID_ARGUMENT "task.queue_timeout_ms = -1 must be >= 0".
absl::Status ValidateTaskOptions(const v1::TaskOptions& options);

// Custom kernels. A scalar argument becomes the bytes of its proto type (f32 and i32, u32: 4;
// f64, i64, u64: 8); an array stays a handle for the Core to resolve. INVALID_ARGUMENT
// "args[i] has no value" for an argument with nothing set.
absl::StatusOr<std::vector<KernelArgInput>> FromProto(
    const google::protobuf::RepeatedPtrField<v1::KernelArgument>& args);
// Grid, block (a dimension of 0, or an unset Dim3, counts as 1) and shared memory.
LaunchConfig LaunchConfigFrom(const v1::LaunchKernelRequest& request);
void ToProto(const KernelView& kernel, v1::CompileKernelResponse* out);

// ValidateRequestStrings (request_strings.h) as a handler's answer: OK, or INVALID_ARGUMENT
// naming the field. Every handler calls it first, on its request (Upload: on the header).
grpc::Status ValidateStrings(const google::protobuf::Message& request,
                             grpc::ServerContextBase* context);

// The status mapping: code and message carry over; an admission reason goes into the
// "gpukit-reason" trailer. `context` (a synchronous or a callback handler's) may be null (no
// trailer then). Messages longer than kMaxStatusMessageBytes are cut there, with a note of how
// much was cut, so that every status fits a stock client's 16 KiB metadata limit with room to
// spare.
inline constexpr size_t kMaxStatusMessageBytes = 8 << 10;
grpc::Status ToGrpc(const absl::Status& status, grpc::ServerContextBase* context);
// The same mapping for an op of a Submit stream, whose status travels in its OpResult:
// code, message (cut as ToGrpc cuts it) and reason (as the gpukit-reason trailer names it).
void ToProto(const absl::Status& status, v1::OpResult* out);

}  // namespace gpukit::service

#endif  // GPUKIT_DAEMON_SERVICE_CONVERT_H_
