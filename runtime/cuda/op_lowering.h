// The CUDA lowerings of the built-in ops: one function per op (or family of ops), each a
// CudaOpLowering (runtime/op_registry.h) that enqueues the op's kernels of kernels/cuda. The
// op table (runtime/builtin_ops.cc) registers each with its op; BuiltinOpRunner::Run calls
// the one of OpLaunch::op with the op's lowering context.
//
// OpLowering is that context: the runner (its modules and per-stream scratch), the device,
// the launch, the stream and the op's temporary buffers (inputs cast to the compute dtype).
// It and the functions below are defined in runtime/builtin_op_runner.cc, where the
// lowering helpers live; only BuiltinOpRunner::Run makes one.
//
// Each function enqueues on the context's stream and returns once the work is enqueued
// (Run then waits for it when the op made temporaries). Errors: those of compiling or
// loading a module and of Device::Launch, and INVALID_ARGUMENT for a shape past a device
// kernel's limits (matmul rows, attention dims).
//
// Thread safety: a context belongs to one Run call; the functions are safe from any thread.
#ifndef GPUKIT_RUNTIME_CUDA_OP_LOWERING_H_
#define GPUKIT_RUNTIME_CUDA_OP_LOWERING_H_

#include "absl/status/status.h"
#include "runtime/op_registry.h"

namespace gpukit {

class OpLowering;

namespace cuda_ops {

absl::Status Binary(OpLowering& lowering);     // add, sub, mul, div: "gk_<op>_<dtype>"
absl::Status Astype(OpLowering& lowering);     // a cast kernel, or a copy
absl::Status Reshape(OpLowering& lowering);    // a copy
absl::Status Transpose(OpLowering& lowering);  // a gather
absl::Status Reduce(OpLowering& lowering);     // sum, mean, max, min
absl::Status Matmul(OpLowering& lowering);     // gpukit's tiled kernel (not cuBLASLt)
absl::Status Unary(OpLowering& lowering);      // exp, log, ..., tanh: "gk_<op>_<dtype>"
absl::Status Clamp(OpLowering& lowering);
absl::Status Where(OpLowering& lowering);
absl::Status Argmax(OpLowering& lowering);
absl::Status Softmax(OpLowering& lowering);
absl::Status Norm(OpLowering& lowering);  // layernorm, rmsnorm: "gk_<op>_<dtype>"
absl::Status Rope(OpLowering& lowering);
absl::Status Attention(OpLowering& lowering);
absl::Status Embedding(OpLowering& lowering);
absl::Status Concat(OpLowering& lowering);

}  // namespace cuda_ops
}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_CUDA_OP_LOWERING_H_
