#include "runtime/cpu/cpu_op_kernels.h"

#include <cstring>
#include <memory>

#include "absl/container/flat_hash_map.h"
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

absl::StatusOr<PreparedInputs> Prepare(const OpLaunch& launch,
                                       const std::vector<const void*>& data) {
  const DType compute = launch.plan.compute_dtype;
  PreparedInputs prepared;
  for (size_t i = 0; i < launch.inputs.size(); ++i) {
    const OpOperand& operand = launch.inputs[i];
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
  kernels::ReduceCpu(kOp, in.arrays[0], launch.plan.params.axis, Output(launch, out));
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

}  // namespace

CpuOpKernel FindCpuOpKernel(absl::string_view op_name) {
  static const auto* table = new absl::flat_hash_map<absl::string_view, CpuOpKernel>({
      {"add", &Binary<kernels::BinaryOp::kAdd>},
      {"sub", &Binary<kernels::BinaryOp::kSub>},
      {"mul", &Binary<kernels::BinaryOp::kMul>},
      {"div", &Binary<kernels::BinaryOp::kDiv>},
      {"matmul", &Matmul},
      {"sum", &Reduce<kernels::ReduceOp::kSum>},
      {"mean", &Reduce<kernels::ReduceOp::kMean>},
      {"max", &Reduce<kernels::ReduceOp::kMax>},
      {"min", &Reduce<kernels::ReduceOp::kMin>},
      {"astype", &Astype},
      {"reshape", &Reshape},
      {"transpose", &Transpose},
  });
  auto it = table->find(op_name);
  return it == table->end() ? nullptr : it->second;
}

}  // namespace gpukit
