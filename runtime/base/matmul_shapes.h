// NumPy's matmul of operands of rank >= 1 as a batch of matrix products: the one statement of
// how a 1-d operand is viewed, and of which operands are refused, for the planner
// (runtime/builtin_ops.cc), the CPU kernel (kernels/cpu/matmul.cc) and the CUDA backend's
// (runtime/builtin_op_runner.cc, runtime/cuda/matmul_plan.cc).
//
// A 1-d a [k] is one row [1, k] and a 1-d b [k] one column [k, 1]: the same bytes, viewed in
// place. The output lacks each such added dimension, so it has the bytes of [..., m, n] too,
// but only its last `out_matrix_rank` dimensions (2, 1 or 0) are the matrix's; the others
// are the broadcast batch.
//
//   GPUKIT_ASSIGN_OR_RETURN(const MatmulMatrices mm, AsMatmulMatrices(a.shape, b.shape));
//   const int64_t m = mm.a[mm.a.size() - 2], k = mm.a.back(), n = mm.b.back();
//   const auto out_batch = absl::MakeConstSpan(out).first(out.size() - mm.out_matrix_rank);
//
// Thread safety: a pure function.
#ifndef GPUKIT_RUNTIME_BASE_MATMUL_SHAPES_H_
#define GPUKIT_RUNTIME_BASE_MATMUL_SHAPES_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/base/shape.h"

namespace gpukit {

struct MatmulMatrices {
  Shape a;  // [..., m, k], rank >= 2
  Shape b;  // [..., k, n], rank >= 2, with a's k
  size_t out_matrix_rank = 2;
};

// `a` and `b` (the operands' shapes) viewed as matrices. INVALID_ARGUMENT in NumPy's words
// for a 0-d operand ("matmul: Input operand 1 does not have enough dimensions ...") and for
// inner dimensions that differ (a's last against b's second-to-last, or b's only). The batch
// dimensions are not checked here: they broadcast (BroadcastShapes says whether they can).
// Cost: copies the two shapes.
absl::StatusOr<MatmulMatrices> AsMatmulMatrices(absl::Span<const int64_t> a,
                                                absl::Span<const int64_t> b);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_MATMUL_SHAPES_H_
