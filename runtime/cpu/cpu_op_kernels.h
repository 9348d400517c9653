// The CPU backend's kernels of the built-in ops, over kernels/cpu: one function per op (a
// template per family), each a CpuOpKernel (runtime/op_registry.h). The op table
// (runtime/builtin_ops.cc) registers each with its op; CpuDevice runs the one of
// OpLaunch::op.
//
// In builds with GPUKIT_FAULT_INJECTION there are also the test-only ops' kernels
// (op_registry.h's IsTestOnlyOp), which simulate what a faulting kernel does to a GPU:
//   _test_fault  returns a sticky fault (IsStickyFault), INTERNAL "simulated device fault
//                (_test_fault) ...": the CpuDevice that runs it is poisoned for good, as a
//                CUDA context is after an illegal address;
//   _test_hang   never returns: it blocks (no CPU time) on a wake-up that never comes, so its
//                stream never runs again and only killing the process ends it;
//   _test_abort  calls std::abort(): the process dies of SIGABRT;
//   _test_error  returns INTERNAL "simulated op failure (_test_error) ...": the op's own
//                failure, the device healthy after it (as a launch the driver refuses).
//
// Each kernel converts its inputs to launch.plan.compute_dtype (scalars too) and writes the
// output; it costs one pass over the data (matmul and attention more), on the calling thread.
//
// Thread safety: kernels are pure over their arguments.
#ifndef GPUKIT_RUNTIME_CPU_CPU_OP_KERNELS_H_
#define GPUKIT_RUNTIME_CPU_CPU_OP_KERNELS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/device.h"

namespace gpukit {

namespace cpu_ops {

// Each is a CpuOpKernel: `launch` with host addresses resolved (inputs[i] is the data of
// launch.inputs[i], nullptr for a scalar operand; `out` the output's).
template <kernels::BinaryOp kOp>  // add, sub, mul, div
absl::Status Binary(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
template <kernels::ReduceOp kOp>  // sum, mean, max, min
absl::Status Reduce(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
template <kernels::UnaryOp kOp>  // exp, log, sqrt, ..., tanh
absl::Status Unary(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Matmul(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Astype(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Reshape(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Transpose(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Clamp(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Where(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Argmax(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Softmax(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status LayerNorm(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status RmsNorm(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Rope(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Attention(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Embedding(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status Concat(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
#if GPUKIT_FAULT_INJECTION
absl::Status TestFault(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status TestHang(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status TestAbort(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
absl::Status TestError(const OpLaunch& launch, const std::vector<const void*>& inputs, void* out);
#endif  // GPUKIT_FAULT_INJECTION

}  // namespace cpu_ops

// A kernel's error that poisons the device it ran on, as a sticky CUDA error (an illegal
// address, a trap) poisons its context: the CPU device fails every later enqueue and wait
// with it, and CheckHealth returns it. StickyFault is INTERNAL with `message` and a payload
// that IsStickyFault recognises (the payload survives PrefixStatus).
absl::Status StickyFault(absl::string_view message);
bool IsStickyFault(const absl::Status& status);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CPU_CPU_OP_KERNELS_H_
