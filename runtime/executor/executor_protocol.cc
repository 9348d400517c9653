#include "runtime/executor/executor_protocol.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"

namespace gpukit {
namespace {

void EncodeDesc(const TensorDesc& desc, executor::TensorDesc& out) {
  out.set_dtype(static_cast<int32_t>(desc.dtype));
  for (int64_t dim : desc.shape) out.add_shape(dim);
}

absl::StatusOr<TensorDesc> DecodeDesc(const executor::TensorDesc& in) {
  if (in.dtype() < 0 || in.dtype() > static_cast<int32_t>(DType::kUInt8)) {
    return absl::InvalidArgumentError(absl::StrCat("dtype ", in.dtype()));
  }
  TensorDesc desc;
  desc.dtype = static_cast<DType>(in.dtype());
  desc.shape.assign(in.shape().begin(), in.shape().end());
  return desc;
}

void EncodeScalar(const ScalarValue& scalar, executor::Scalar& out) {
  out.set_is_float(scalar.is_float);
  out.set_float_value(scalar.float_value);
  out.set_int_value(scalar.int_value);
}

ScalarValue DecodeScalar(const executor::Scalar& in) {
  return {.is_float = in.is_float(), .float_value = in.float_value(), .int_value = in.int_value()};
}

}  // namespace

absl::StatusOr<std::string> EncodeExecutorMessage(const google::protobuf::MessageLite& message) {
  const size_t size = message.ByteSizeLong();
  if (size > kMaxExecutorMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an executor message of ", size, " bytes (at most ", kMaxExecutorMessageBytes, ")"));
  }
  // Every message sent has a field set (a oneof body), so none serializes to nothing.
  std::string bytes;
  message.SerializeToString(&bytes);
  return bytes;
}

absl::Status SendExecutorBytes(int socket, const std::string& bytes, int fd) {
  return SendMessage(socket, bytes.data(), bytes.size(), fd);
}

absl::Status SendExecutorMessage(int socket, const google::protobuf::MessageLite& message, int fd) {
  GPUKIT_ASSIGN_OR_RETURN(const std::string bytes, EncodeExecutorMessage(message));
  return SendExecutorBytes(socket, bytes, fd);
}

absl::StatusOr<ScopedFd> ReceiveExecutorMessage(int socket, google::protobuf::MessageLite& message,
                                                const RecentActivity* activity) {
  // One buffer per reading thread for its life: no allocation or clearing per message.
  constexpr size_t kCapacity = kMaxExecutorMessageBytes + 1024;
  thread_local std::unique_ptr<char[]> buffer(new char[kCapacity]);
  absl::StatusOr<ReceivedInto> received;
  for (;;) {
    const bool poll = activity != nullptr && activity->Recent();
    if (!poll && activity != nullptr && activity->has_bell()) {
      // Sleeps on the socket and the bell, then looks without waiting (and again if the bell
      // woke it: an answer is owed now, so it polls).
      activity->SleepUntilReadable(socket);
      received = ReceiveMessageInto(socket, buffer.get(), kCapacity, /*wait=*/false);
      if (received.status().code() != absl::StatusCode::kDeadlineExceeded) break;
      continue;
    }
    received = ReceiveMessageInto(socket, buffer.get(), kCapacity, /*wait=*/!poll);
    if (!poll || received.status().code() != absl::StatusCode::kDeadlineExceeded) break;
    for (int i = 0; i < 32; ++i) CpuRelax();
  }
  if (!received.ok()) return received.status();
  if (!message.ParseFromArray(buffer.get(), static_cast<int>(received->bytes))) {
    return absl::InternalError(
        absl::StrCat("an executor message of ", received->bytes, " bytes does not parse"));
  }
  return std::move(received->fd);
}

absl::Status WireStatus(int32_t code, std::string message) {
  if (code < 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(absl::StrCat("executor status code ", code, ": ", message));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), std::move(message));
}

void SetReplyStatus(const absl::Status& status, executor::Reply& reply) {
  reply.set_code(static_cast<int32_t>(status.code()));
  reply.set_message(std::string(status.message()));
}

absl::Status ReplyStatus(const executor::Reply& reply) {
  return WireStatus(reply.code(), reply.message());
}

void AddPairOutcome(const absl::Status& status, int64_t elapsed_ns, executor::Reply& reply) {
  reply.add_pair_code(static_cast<int32_t>(status.code()));
  reply.add_pair_message(std::string(status.message()));
  reply.add_pair_elapsed_ns(status.ok() ? elapsed_ns : 0);
}

absl::Status PairStatus(const executor::Reply& reply, int i) {
  if (i < 0 || i >= reply.pair_code_size() || i >= reply.pair_message_size()) {
    return absl::InternalError(absl::StrCat("the executor's reply has no outcome for pair ", i));
  }
  return WireStatus(reply.pair_code(i), reply.pair_message(i));
}

void EncodeRunOp(const OpLaunch& launch, StreamId stream, executor::RunOp& out) {
  out.set_stream(stream.value);
  out.set_op(launch.op->name);
  out.set_compute_dtype(static_cast<int32_t>(launch.plan.compute_dtype));
  EncodeDesc(launch.plan.output, *out.mutable_output_desc());
  const OpParams& p = launch.plan.params;
  executor::OpParams& params = *out.mutable_params();
  params.set_has_axis(p.axis.has_value());
  params.set_axis(p.axis.value_or(0));
  params.set_keepdims(p.keepdims);
  for (int axis : p.reduce_axes) params.add_reduce_axes(axis);
  for (int axis : p.perm) params.add_perm(axis);
  params.set_allow_tf32(p.allow_tf32);
  if (p.clamp_min) {
    EncodeScalar(*p.clamp_min, *params.mutable_clamp_min());
  }
  if (p.clamp_max) {
    EncodeScalar(*p.clamp_max, *params.mutable_clamp_max());
  }
  params.set_eps(p.eps);
  params.set_rope_base(p.rope_base);
  params.set_rope_offset(p.rope_offset);
  params.set_causal(p.causal);
  params.set_scale(p.scale);
  for (const OpOperand& input : launch.inputs) {
    executor::Operand& operand = *out.add_inputs();
    operand.set_is_scalar(input.is_scalar);
    if (input.is_scalar) {
      EncodeScalar(input.scalar, *operand.mutable_scalar());
    } else {
      operand.set_buffer(input.buffer.value);
      EncodeDesc(input.desc, *operand.mutable_desc());
    }
  }
  out.set_output(launch.output.value);
  out.set_whole(!launch.sliceable);
}

absl::StatusOr<OpLaunch> DecodeRunOp(
    const executor::RunOp& in,
    const std::function<absl::StatusOr<BufferId>(uint64_t id, const executor::Place& place)>&
        decode_buffer) {
  OpLaunch launch;
  GPUKIT_ASSIGN_OR_RETURN(launch.op, OpRegistry::Builtin().Find(in.op()));
  executor::TensorDesc compute;
  compute.set_dtype(in.compute_dtype());
  GPUKIT_ASSIGN_OR_RETURN(TensorDesc compute_desc, DecodeDesc(compute));
  launch.plan.compute_dtype = compute_desc.dtype;
  GPUKIT_ASSIGN_OR_RETURN(launch.plan.output, DecodeDesc(in.output_desc()));
  const executor::OpParams& params = in.params();
  OpParams& p = launch.plan.params;
  if (params.has_axis()) p.axis = params.axis();
  p.keepdims = params.keepdims();
  p.reduce_axes.assign(params.reduce_axes().begin(), params.reduce_axes().end());
  p.perm.assign(params.perm().begin(), params.perm().end());
  p.allow_tf32 = params.allow_tf32();
  if (params.has_clamp_min()) p.clamp_min = DecodeScalar(params.clamp_min());
  if (params.has_clamp_max()) p.clamp_max = DecodeScalar(params.clamp_max());
  p.eps = params.eps();
  p.rope_base = params.rope_base();
  p.rope_offset = params.rope_offset();
  p.causal = params.causal();
  p.scale = params.scale();
  for (const executor::Operand& operand : in.inputs()) {
    OpOperand input;
    input.is_scalar = operand.is_scalar();
    if (input.is_scalar) {
      input.scalar = DecodeScalar(operand.scalar());
    } else {
      GPUKIT_ASSIGN_OR_RETURN(input.buffer, decode_buffer(operand.buffer(), operand.place()));
      GPUKIT_ASSIGN_OR_RETURN(input.desc, DecodeDesc(operand.desc()));
    }
    launch.inputs.push_back(std::move(input));
  }
  GPUKIT_ASSIGN_OR_RETURN(launch.output, decode_buffer(in.output(), in.output_place()));
  launch.sliceable = !in.whole();
  return launch;
}

}  // namespace gpukit
