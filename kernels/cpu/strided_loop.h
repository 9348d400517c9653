// N-dimensional iteration over a contiguous output that reads its inputs through arbitrary
// element strides (private to kernels/cpu).
//
// Broadcasting (stride 0 along a broadcast dimension) and transposition (permuted strides)
// are both "walk the output in row-major order, and each input by its own strides". The walk
// is handed out as runs along the innermost dimension so that the per-element loop stays in
// the kernel, where it is typed and can be vectorized. Dimensions of extent 1 are dropped and
// adjacent dimensions that every operand traverses contiguously are merged first, so that,
// say, adding a [1000, 1] array to another [1000, 1] array is one run of 1000, not 1000 runs
// of 1. Usage:
//
//   ForEachRun(out_shape, {a_strides, b_strides}, [&](const StridedRun& run) {
//     for (int64_t j = 0; j < run.length; ++j) {
//       out[run.out_offset + j] = a[run.in_offsets[0] + j * run.in_strides[0]] + ...;
//     }
//   });
//
// Cost: O(elements / innermost extent) bookkeeping on top of the callback.
// Thread safety: stateless.
#ifndef GPUKIT_KERNELS_CPU_STRIDED_LOOP_H_
#define GPUKIT_KERNELS_CPU_STRIDED_LOOP_H_

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "runtime/base/shape.h"

namespace gpukit::kernels::internal {

// A stretch of `length` consecutive output elements starting at `out_offset`; input i starts
// at element in_offsets[i] and advances by in_strides[i] per output element.
struct StridedRun {
  int64_t out_offset;
  int64_t length;
  absl::Span<const int64_t> in_offsets;
  absl::Span<const int64_t> in_strides;
};

// Calls `fn` for consecutive runs that together cover every element of a contiguous row-major
// array of `shape` (one run of one element for a 0-d shape, none if any extent is 0).
// in_strides[i][d] is input i's element stride along output dimension d.
inline void ForEachRun(absl::Span<const int64_t> shape,
                       absl::Span<const std::vector<int64_t>> in_strides,
                       absl::FunctionRef<void(const StridedRun&)> fn) {
  const size_t num_inputs = in_strides.size();
  for (int64_t extent : shape) {
    if (extent == 0) return;
  }

  // Coalesce: dimension d folds into the one outside it, p, when every input's stride along p
  // equals its stride along d times d's extent (the output, being contiguous, always does).
  // Strides are stored input-major: strides[i * max_dims + dim].
  const size_t max_dims = shape.empty() ? 1 : shape.size();
  absl::InlinedVector<int64_t, kMaxRank> extents;
  absl::InlinedVector<int64_t, 2 * kMaxRank> strides(num_inputs * max_dims, 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !extents.empty();
    for (size_t i = 0; merge && i < num_inputs; ++i) {
      merge = strides[i * max_dims + extents.size() - 1] == in_strides[i][d] * shape[d];
    }
    if (merge) {
      extents.back() *= shape[d];
    } else {
      extents.push_back(shape[d]);
    }
    for (size_t i = 0; i < num_inputs; ++i) {
      strides[i * max_dims + extents.size() - 1] = in_strides[i][d];
    }
  }
  if (extents.empty()) extents.push_back(1);  // 0-d, or every extent 1: a single element

  const size_t inner = extents.size() - 1;
  absl::InlinedVector<int64_t, 2> inner_strides(num_inputs);
  for (size_t i = 0; i < num_inputs; ++i) inner_strides[i] = strides[i * max_dims + inner];
  absl::InlinedVector<int64_t, 2> offsets(num_inputs, 0);
  absl::InlinedVector<int64_t, kMaxRank> index(inner, 0);  // over the outer dimensions

  int64_t num_runs = 1;
  for (size_t d = 0; d < inner; ++d) num_runs *= extents[d];
  for (int64_t r = 0; r < num_runs; ++r) {
    fn(StridedRun{r * extents[inner], extents[inner], offsets, inner_strides});
    // Advance the outer index like an odometer, updating each input's offset incrementally.
    for (size_t d = inner; d-- > 0;) {
      for (size_t i = 0; i < num_inputs; ++i) offsets[i] += strides[i * max_dims + d];
      if (++index[d] < extents[d]) break;
      for (size_t i = 0; i < num_inputs; ++i) offsets[i] -= strides[i * max_dims + d] * extents[d];
      index[d] = 0;
    }
  }
}

}  // namespace gpukit::kernels::internal

#endif  // GPUKIT_KERNELS_CPU_STRIDED_LOOP_H_
