// CPU reference kernels for gpukit's built-in ops.
//
// These are the CPU simulation backend's implementations and the reference every device
// kernel is tested against. They work on contiguous row-major host buffers and do no
// validation: the op registry (runtime/op_registry.h) checks shapes, dtypes and attributes
// before any of them runs, and allocates `out` with the shape and dtype it inferred.
//
// Arithmetic: float16 and bfloat16 are computed in float32 and rounded to nearest-even on
// store; float accumulations (sum, mean, matmul) accumulate in double on the CPU; integer
// arithmetic wraps modulo 2^bits (as NumPy's does) without undefined behaviour.
//
// Thread safety: every function is pure over its arguments and may be called concurrently.
//
//   ConstHostArray a{a_ptr, DType::kFloat32, {2, 3}}, b{b_ptr, DType::kFloat32, {3}};
//   HostArray out{out_ptr, DType::kFloat32, {2, 3}};
//   BinaryCpu(BinaryOp::kAdd, a, b, out);
#ifndef GPUKIT_KERNELS_CPU_CPU_KERNELS_H_
#define GPUKIT_KERNELS_CPU_CPU_KERNELS_H_

#include <optional>

#include "absl/types/span.h"
#include "runtime/base/dtype.h"
#include "runtime/base/shape.h"

namespace gpukit::kernels {

enum class BinaryOp { kAdd, kSub, kMul, kDiv };
enum class ReduceOp { kSum, kMean, kMax, kMin };

struct ConstHostArray {
  const void* data;
  DType dtype;
  Shape shape;
};

struct HostArray {
  void* data;
  DType dtype;
  Shape shape;
};

// out = a (op) b with NumPy broadcasting. a.dtype == b.dtype == out.dtype, and
// out.shape == BroadcastShapes(a.shape, b.shape). Integer division is not supported here
// (the registry casts integer operands of div to float32 first); float division by zero
// gives inf or nan as IEEE 754 says.
void BinaryCpu(BinaryOp op, const ConstHostArray& a, const ConstHostArray& b, const HostArray& out);

// Element-wise conversion; in and out have the same element count. Float to integer
// truncates toward zero and saturates at the target's range; NaN becomes 0. Integer to
// integer wraps (two's complement), as a C cast does.
void CastCpu(const ConstHostArray& in, const HostArray& out);

// Reduces over every element (axis == nullopt; out has one element) or over one axis
// (0 <= axis < rank; out has in.shape without that axis, keepdims does not change the
// layout). in.dtype may differ from out.dtype (sum of int32 into int64, mean of int32
// into float32). Max/min propagate NaN. The reduced extent is > 0 for max/min (the
// registry rejects empty ones); sum of nothing is 0 and mean of nothing is NaN.
void ReduceCpu(ReduceOp op, const ConstHostArray& in, std::optional<int> axis,
               const HostArray& out);

// Batched matrix product: a [..., m, k] times b [..., k, n] into out [..., m, n], with
// NumPy broadcasting over the batch dimensions. Rank of each input >= 2; all three share
// one dtype.
void MatmulCpu(const ConstHostArray& a, const ConstHostArray& b, const HostArray& out);

// out[i_perm[0], ..., i_perm[r-1]] = in[i_0, ..., i_{r-1}]: out.shape[j] ==
// in.shape[perm[j]]. perm is a permutation of 0..rank-1.
void TransposeCpu(const ConstHostArray& in, absl::Span<const int> perm, const HostArray& out);

}  // namespace gpukit::kernels

#endif  // GPUKIT_KERNELS_CPU_CPU_KERNELS_H_
