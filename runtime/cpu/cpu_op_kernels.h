// The CPU backend's kernel table: one entry per built-in op, over kernels/cpu.
//
// Thread safety: the table is immutable; kernels are pure over their arguments.
#ifndef GPUKIT_RUNTIME_CPU_CPU_OP_KERNELS_H_
#define GPUKIT_RUNTIME_CPU_CPU_OP_KERNELS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/device.h"

namespace gpukit {

// Runs `launch` with host addresses already resolved: inputs[i] is the data of
// launch.inputs[i] (nullptr for a scalar operand), `out` the output's.
using CpuOpKernel = absl::Status (*)(const OpLaunch& launch, const std::vector<const void*>& inputs,
                                     void* out);

// nullptr if the CPU backend has no kernel for the op.
CpuOpKernel FindCpuOpKernel(absl::string_view op_name);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CPU_CPU_OP_KERNELS_H_
