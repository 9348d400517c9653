#include "runtime/cpu/cpu_op_kernels.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/synchronization/notification.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/base/status_macros.h"

namespace gpukit {
namespace {

using kernels::ConstHostArray;
using kernels::HostArray;

// Inputs converted to the plan's compute dtype; owns the converted copies.
struct PreparedInputs {
  std::vector<ConstHostArray> arrays;
  std::vector<std::unique_ptr<std::byte[]>> storage;
};

// Input `keep` (if any) is passed as it is: where's condition and embedding's indices are
// read in their own dtype.
absl::StatusOr<PreparedInputs> Prepare(const OpLaunch& launch, const std::vector<const void*>& data,
                                       std::optional<size_t> keep = std::nullopt) {
  const DType compute = launch.plan.compute_dtype;
  PreparedInputs prepared;
  for (size_t i = 0; i < launch.inputs.size(); ++i) {
    const OpOperand& operand = launch.inputs[i];
    if (keep == i) {
      prepared.arrays.push_back({data[i], operand.desc.dtype, operand.desc.shape});
      continue;
    }
    ConstHostArray source;
    float float_scalar;
    int64_t int_scalar;
    if (operand.is_scalar) {
      // A scalar is a 0-d array, converted like any other input.
      if (operand.scalar.is_float) {
        float_scalar = static_cast<float>(operand.scalar.float_value);
        source = {&float_scalar, DType::kFloat32, {}};
      } else {
        int_scalar = operand.scalar.int_value;
        source = {&int_scalar, DType::kInt64, {}};
      }
    } else {
      source = {data[i], operand.desc.dtype, operand.desc.shape};
    }
    if (source.dtype == compute) {
      if (operand.is_scalar) {
        // Copy: the local scalar goes out of scope.
        auto copy = std::make_unique<std::byte[]>(DTypeSize(compute));
        std::memcpy(copy.get(), source.data, DTypeSize(compute));
        source.data = copy.get();
        prepared.storage.push_back(std::move(copy));
      }
      prepared.arrays.push_back(std::move(source));
      continue;
    }
    GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(source.shape, compute));
    auto converted = std::make_unique<std::byte[]>(std::max<int64_t>(bytes, 1));
    kernels::CastCpu(source, HostArray{converted.get(), compute, source.shape});
    prepared.arrays.push_back({converted.get(), compute, source.shape});
    prepared.storage.push_back(std::move(converted));
  }
  return prepared;
}

HostArray Output(const OpLaunch& launch, void* out) {
  return {out, launch.plan.output.dtype, launch.plan.output.shape};
}

std::optional<kernels::ClampBound> ToBound(const std::optional<ScalarValue>& value) {
  if (!value.has_value()) return std::nullopt;
  return kernels::ClampBound{value->is_float, value->float_value, value->int_value};
}

// Type URL of the payload that marks a sticky fault.
constexpr absl::string_view kStickyFaultPayload = "type.gpukit.dev/gpukit.StickyDeviceFault";

}  // namespace

namespace cpu_ops {

template <kernels::BinaryOp kOp>
absl::Status Binary(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  kernels::BinaryCpu(kOp, in.arrays[0], in.arrays[1], Output(launch, out));
  return absl::OkStatus();
}

absl::Status Matmul(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  kernels::MatmulCpu(in.arrays[0], in.arrays[1], Output(launch, out));
  return absl::OkStatus();
}

template <kernels::ReduceOp kOp>
absl::Status Reduce(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  kernels::ReduceCpu(kOp, in.arrays[0], launch.plan.params.reduce_axes, Output(launch, out));
  return absl::OkStatus();
}

absl::Status Astype(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  kernels::CastCpu({data[0], launch.inputs[0].desc.dtype, launch.inputs[0].desc.shape},
                   Output(launch, out));
  return absl::OkStatus();
}

absl::Status Reshape(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(int64_t bytes,
                          ByteSize(launch.plan.output.shape, launch.plan.output.dtype));
  std::memcpy(out, data[0], bytes);
  return absl::OkStatus();
}

absl::Status Transpose(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  kernels::TransposeCpu({data[0], launch.inputs[0].desc.dtype, launch.inputs[0].desc.shape},
                        launch.plan.params.perm, Output(launch, out));
  return absl::OkStatus();
}

template <kernels::UnaryOp kOp>
absl::Status Unary(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  kernels::UnaryCpu(kOp, in.arrays[0], Output(launch, out));
  return absl::OkStatus();
}

absl::Status Clamp(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  const std::optional<kernels::ClampBound> lo = ToBound(launch.plan.params.clamp_min);
  const std::optional<kernels::ClampBound> hi = ToBound(launch.plan.params.clamp_max);
  kernels::ClampCpu(in.arrays[0], lo ? &*lo : nullptr, hi ? &*hi : nullptr, Output(launch, out));
  return absl::OkStatus();
}

absl::Status Where(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data, /*keep=*/0));
  kernels::WhereCpu(in.arrays[0], in.arrays[1], in.arrays[2], Output(launch, out));
  return absl::OkStatus();
}

absl::Status Argmax(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  kernels::ArgmaxCpu(in.arrays[0], launch.plan.params.axis, Output(launch, out));
  return absl::OkStatus();
}

absl::Status Softmax(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  kernels::SoftmaxCpu(in.arrays[0], launch.plan.params.axis.value_or(-1), Output(launch, out));
  return absl::OkStatus();
}

absl::Status LayerNorm(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  const size_t n = in.arrays.size();
  kernels::LayerNormCpu(in.arrays[0], n > 1 ? &in.arrays[1] : nullptr,
                        n > 2 ? &in.arrays[2] : nullptr, launch.plan.params.eps,
                        Output(launch, out));
  return absl::OkStatus();
}

absl::Status RmsNorm(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  kernels::RmsNormCpu(in.arrays[0], in.arrays.size() > 1 ? &in.arrays[1] : nullptr,
                      launch.plan.params.eps, Output(launch, out));
  return absl::OkStatus();
}

absl::Status Rope(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  kernels::RopeCpu(in.arrays[0], launch.plan.params.rope_base, launch.plan.params.rope_offset,
                   Output(launch, out));
  return absl::OkStatus();
}

absl::Status Attention(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  kernels::AttentionCpu(in.arrays[0], in.arrays[1], in.arrays[2], launch.plan.params.causal,
                        launch.plan.params.scale, Output(launch, out));
  return absl::OkStatus();
}

absl::Status Embedding(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data, /*keep=*/1));
  kernels::EmbeddingCpu(in.arrays[0], in.arrays[1], Output(launch, out));
  return absl::OkStatus();
}

absl::Status Concat(const OpLaunch& launch, const std::vector<const void*>& data, void* out) {
  GPUKIT_ASSIGN_OR_RETURN(PreparedInputs in, Prepare(launch, data));
  kernels::ConcatCpu(in.arrays, launch.plan.params.axis.value_or(0), Output(launch, out));
  return absl::OkStatus();
}

#if GPUKIT_FAULT_INJECTION
absl::Status TestFault(const OpLaunch&, const std::vector<const void*>&, void*) {
  return StickyFault(
      "simulated device fault (_test_fault): the device is poisoned, as a CUDA context is after "
      "an illegal address; every later call on it fails and only a new process can use it");
}

absl::Status TestHang(const OpLaunch&, const std::vector<const void*>&, void*) {
  // Never notified: the thread sleeps in the kernel (a futex wait), holding its stream.
  absl::Notification never;
  never.WaitForNotification();
  return absl::InternalError("_test_hang woke up");  // unreachable
}

absl::Status TestAbort(const OpLaunch&, const std::vector<const void*>&, void*) { std::abort(); }

absl::Status TestError(const OpLaunch&, const std::vector<const void*>&, void*) {
  return absl::InternalError(
      "simulated op failure (_test_error): this op's work failed; the device is healthy");
}
#endif  // GPUKIT_FAULT_INJECTION

// The instances the op table registers.
template absl::Status Binary<kernels::BinaryOp::kAdd>(const OpLaunch&,
                                                      const std::vector<const void*>&, void*);
template absl::Status Binary<kernels::BinaryOp::kSub>(const OpLaunch&,
                                                      const std::vector<const void*>&, void*);
template absl::Status Binary<kernels::BinaryOp::kMul>(const OpLaunch&,
                                                      const std::vector<const void*>&, void*);
template absl::Status Binary<kernels::BinaryOp::kDiv>(const OpLaunch&,
                                                      const std::vector<const void*>&, void*);
template absl::Status Reduce<kernels::ReduceOp::kSum>(const OpLaunch&,
                                                      const std::vector<const void*>&, void*);
template absl::Status Reduce<kernels::ReduceOp::kMean>(const OpLaunch&,
                                                       const std::vector<const void*>&, void*);
template absl::Status Reduce<kernels::ReduceOp::kMax>(const OpLaunch&,
                                                      const std::vector<const void*>&, void*);
template absl::Status Reduce<kernels::ReduceOp::kMin>(const OpLaunch&,
                                                      const std::vector<const void*>&, void*);

template absl::Status Unary<kernels::UnaryOp::kExp>(const OpLaunch&,
                                                    const std::vector<const void*>&, void*);
template absl::Status Unary<kernels::UnaryOp::kLog>(const OpLaunch&,
                                                    const std::vector<const void*>&, void*);
template absl::Status Unary<kernels::UnaryOp::kSqrt>(const OpLaunch&,
                                                     const std::vector<const void*>&, void*);
template absl::Status Unary<kernels::UnaryOp::kRsqrt>(const OpLaunch&,
                                                      const std::vector<const void*>&, void*);
template absl::Status Unary<kernels::UnaryOp::kAbs>(const OpLaunch&,
                                                    const std::vector<const void*>&, void*);
template absl::Status Unary<kernels::UnaryOp::kNeg>(const OpLaunch&,
                                                    const std::vector<const void*>&, void*);
template absl::Status Unary<kernels::UnaryOp::kRelu>(const OpLaunch&,
                                                     const std::vector<const void*>&, void*);
template absl::Status Unary<kernels::UnaryOp::kGelu>(const OpLaunch&,
                                                     const std::vector<const void*>&, void*);
template absl::Status Unary<kernels::UnaryOp::kSilu>(const OpLaunch&,
                                                     const std::vector<const void*>&, void*);
template absl::Status Unary<kernels::UnaryOp::kSigmoid>(const OpLaunch&,
                                                        const std::vector<const void*>&, void*);
template absl::Status Unary<kernels::UnaryOp::kTanh>(const OpLaunch&,
                                                     const std::vector<const void*>&, void*);

}  // namespace cpu_ops

absl::Status StickyFault(absl::string_view message) {
  absl::Status status = absl::InternalError(message);
  status.SetPayload(kStickyFaultPayload, absl::Cord());
  return status;
}

bool IsStickyFault(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kStickyFaultPayload).has_value();
}

}  // namespace gpukit
