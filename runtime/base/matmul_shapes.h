// NumPy's matmul of operands of rank >= 1 as a batch of matrix products: the one statement of
// how a 1-d operand is viewed, for the planner (runtime/builtin_ops.cc), the CPU kernel
// (kernels/cpu/matmul.cc) and the CUDA backend's (runtime/builtin_op_runner.cc,
// runtime/cuda/matmul_plan.cc).
//
// A 1-d a [k] is one row [1, k] and a 1-d b [k] one column [k, 1]: the same bytes, viewed in
// place. The output lacks each such added dimension, so it has the bytes of [..., m, n] too,
// but only its last `out_matrix_rank` dimensions (2, 1 or 0) are the matrix's; the others
// are the broadcast batch.
//
//   const MatmulMatrices mm = AsMatmulMatrices(a.shape, b.shape);
//   const int64_t m = mm.a[mm.a.size() - 2], k = mm.a.back(), n = mm.b.back();
//   const auto out_batch = absl::MakeConstSpan(out).first(out.size() - mm.out_matrix_rank);
//
// Thread safety: a pure function.
#ifndef GPUKIT_RUNTIME_BASE_MATMUL_SHAPES_H_
#define GPUKIT_RUNTIME_BASE_MATMUL_SHAPES_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "runtime/base/shape.h"

namespace gpukit {

struct MatmulMatrices {
  Shape a;  // [..., m, k], rank >= 2
  Shape b;  // [..., k, n], rank >= 2
  size_t out_matrix_rank = 2;
};

// `a` and `b` must each have rank >= 1 (the planner refuses 0-d operands, as NumPy does).
inline MatmulMatrices AsMatmulMatrices(absl::Span<const int64_t> a, absl::Span<const int64_t> b) {
  MatmulMatrices mm;
  mm.a.assign(a.begin(), a.end());
  mm.b.assign(b.begin(), b.end());
  mm.out_matrix_rank = (a.size() == 1 ? 0 : 1) + (b.size() == 1 ? 0 : 1);
  if (a.size() == 1) mm.a.insert(mm.a.begin(), 1);
  if (b.size() == 1) mm.b.push_back(1);
  return mm;
}

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_MATMUL_SHAPES_H_
