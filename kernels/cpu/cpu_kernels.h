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
#include <vector>

#include "absl/types/span.h"
#include "runtime/base/dtype.h"
#include "runtime/base/shape.h"

namespace gpukit::kernels {

enum class BinaryOp { kAdd, kSub, kMul, kDiv };
enum class ReduceOp { kSum, kMean, kMax, kMin };
enum class UnaryOp { kExp, kLog, kSqrt, kRsqrt, kAbs, kNeg, kRelu, kGelu, kSilu, kSigmoid, kTanh };

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

// Reduces over `axes` (ascending, distinct, each < rank; every axis reduces everything, none
// converts each element on its own): out has in.shape without those axes (keepdims does not
// change the layout). in.dtype may differ from out.dtype (sum of int32 into int64, mean of
// int32 into float32). Each output element combines its elements in memory order, in double
// for the floating types and int64 for integers, and a mean divides by their count; so the
// result along one axis is what reducing that axis alone gives, and over several axes it is
// rounded once. Max/min propagate NaN. The reduced extent is > 0 for max/min (the registry
// rejects empty ones); sum of nothing is 0 and mean of nothing is NaN. Uses a temporary of
// 8 bytes per output element.
void ReduceCpu(ReduceOp op, const ConstHostArray& in, absl::Span<const int> axes,
               const HostArray& out);

// A reduction's layout as runs of dimensions, outermost first: `shape` with dimensions of 1
// dropped and neighbours that are both reduced (in `axes`, ascending) or both kept merged
// into one run of their product. Reduced axes that are adjacent, or apart only by
// dimensions of 1, become one run. Empty for a 0-d shape or one of 1s. Used by ReduceCpu
// and by the CUDA lowering (runtime/builtin_op_runner.cc) alike.
struct ReduceRun {
  int64_t extent;
  bool reduced;

  friend bool operator==(const ReduceRun&, const ReduceRun&) = default;
};
std::vector<ReduceRun> ReduceRuns(absl::Span<const int64_t> shape, absl::Span<const int> axes);

// Matrix product with NumPy's rules: a [..., m, k] times b [..., k, n] into out [..., m, n],
// the batch dimensions broadcast. A 1-d a ([k]) is read as [1, k] and a 1-d b ([k]) as
// [k, 1], and out lacks that dimension (as the registry plans it); both inputs have rank >= 1.
// All three share one dtype.
void MatmulCpu(const ConstHostArray& a, const ConstHostArray& b, const HostArray& out);

// out[i_perm[0], ..., i_perm[r-1]] = in[i_0, ..., i_{r-1}]: out.shape[j] ==
// in.shape[perm[j]]. perm is a permutation of 0..rank-1.
void TransposeCpu(const ConstHostArray& in, absl::Span<const int> perm, const HostArray& out);

// ---- Element-wise math (kernels/cpu/unary.cc) ----

// out = op(in), in.dtype == out.dtype. Floating types are computed in double and rounded
// once to the dtype (the device computes in float32, within a few ulp of this). gelu is the
// exact erf form 0.5 x (1 + erf(x / sqrt 2)). Integer dtypes take only kAbs, kNeg and kRelu
// (the registry computes the others in float32); they wrap: abs and neg of the minimum of a
// signed type are the minimum, neg of a uint8 x is 256 - x. relu and abs keep NaN.
void UnaryCpu(UnaryOp op, const ConstHostArray& in, const HostArray& out);

// A clamp bound: a float (compared in float32 for floating dtypes) or an integer (only for
// integer dtypes, and within their range).
struct ClampBound {
  bool is_float = false;
  double float_value = 0;
  int64_t int_value = 0;
};

// out = min(max(in, lo), hi) for each bound given (nullptr: none); in.dtype == out.dtype.
// Floating: a NaN element stays NaN, and with lo > hi every element is hi. Integers compare
// exactly in int64.
void ClampCpu(const ConstHostArray& in, const ClampBound* lo, const ClampBound* hi,
              const HostArray& out);

// out = cond ? a : b with NumPy broadcasting of all three into out.shape; a.dtype == b.dtype
// == out.dtype, cond of any dtype: an element is true when it is nonzero (NaN is true, -0.0
// false).
void WhereCpu(const ConstHostArray& cond, const ConstHostArray& a, const ConstHostArray& b,
              const HostArray& out);

// ---- Reductions to indices and normalisations (kernels/cpu/nn.cc) ----

// out (int64) = index of the first maximum along `axis`, or of all elements in row-major
// order (nullopt). A NaN is the maximum (the first NaN wins), as in NumPy. The extent is > 0.
void ArgmaxCpu(const ConstHostArray& in, std::optional<int> axis, const HostArray& out);

// Softmax along `axis`: exp(x - max) / sum(exp(x - max)), in double, rounded once. A row with
// a NaN is all NaN. in.dtype == out.dtype, floating.
void SoftmaxCpu(const ConstHostArray& in, int axis, const HostArray& out);

// Layer normalisation over the last axis: (x - mean) / sqrt(var + eps) * weight + bias, with
// the biased variance; weight and bias (nullptr: absent) have the last dimension's length.
// All arrays share one floating dtype; computed in double.
void LayerNormCpu(const ConstHostArray& x, const ConstHostArray* weight,
                  const ConstHostArray* bias, double eps, const HostArray& out);

// RMS normalisation over the last axis: x / sqrt(mean(x^2) + eps) * weight.
void RmsNormCpu(const ConstHostArray& x, const ConstHostArray* weight, double eps,
                const HostArray& out);

// Rotary position embedding of x [..., seq, dim] (dim even), rotate-half (GPT-NeoX)
// convention: with h = dim / 2, position p = offset + the seq index and
// theta_i = p * base^(-2i / dim) for i < h,
//   out[i]     = x[i] cos(theta_i) - x[i + h] sin(theta_i)
//   out[i + h] = x[i + h] cos(theta_i) + x[i] sin(theta_i).
// Angles and products in double.
void RopeCpu(const ConstHostArray& x, double base, int64_t offset, const HostArray& out);

// Scaled dot-product attention per head: q [h, sq, d], k [h, sk, d], v [h, sk, dv] into
// out [h, sq, dv]: softmax(scale * q k^T) v. With `causal`, query i sees keys
// j <= i + (sk - sq) (the mask aligned to the bottom right, so the last query sees every
// key); a query that sees no key gets zeros. One floating dtype; computed in double.
void AttentionCpu(const ConstHostArray& q, const ConstHostArray& k, const ConstHostArray& v,
                  bool causal, double scale, const HostArray& out);

// ---- Gathers and joins (kernels/cpu/layout.cc) ----

// out[..., :] = table[indices[...], :] for table [vocab, dim] and int32 or int64 indices;
// out.dtype == table.dtype. An index outside [0, vocab) gives a row of zeros (indices are
// data, which the planner cannot check; nothing outside the table is read).
void EmbeddingCpu(const ConstHostArray& table, const ConstHostArray& indices,
                  const HostArray& out);

// Joins `inputs` along `axis`: all share out's dtype and rank, and their shapes equal out's
// except along `axis`, where they add up to it.
void ConcatCpu(absl::Span<const ConstHostArray> inputs, int axis, const HostArray& out);

}  // namespace gpukit::kernels

#endif  // GPUKIT_KERNELS_CPU_CPU_KERNELS_H_
