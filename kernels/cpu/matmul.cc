// MatmulCpu.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_loop.h"
#include "runtime/base/matmul_shapes.h"

namespace gpukit::kernels {
namespace {

using internal::ConvertTo;
using internal::DispatchDType;
using internal::ForEachRun;
using internal::kIsFloating;
using internal::NumElements;
using internal::StridedRun;
using internal::Widen;

// Floating types accumulate in double (a product of two floats is exact there). Integers
// accumulate in uint64, whose wrapping arithmetic reduced modulo 2^bits on the store is the
// same as wrapping in the element type all along.
template <typename T>
using AccT = std::conditional_t<kIsFloating<T>, double, uint64_t>;

template <typename T>
AccT<T> Load(T value) {
  return static_cast<AccT<T>>(Widen(value));  // int64 -> uint64 is modular
}

template <typename T>
T Store(AccT<T> value) {
  if constexpr (kIsFloating<T>) {
    return ConvertTo<T>(value);
  } else {
    return static_cast<T>(value);  // modular
  }
}

template <typename T>
void MatmulTyped(const ConstHostArray& a, const ConstHostArray& b, const HostArray& out) {
  using Acc = AccT<T>;
  // A 1-d operand is viewed in place as a row or a column (runtime/base/matmul_shapes.h).
  absl::StatusOr<MatmulMatrices> viewed = AsMatmulMatrices(a.shape, b.shape);
  if (!viewed.ok()) std::abort();  // the planner refuses these shapes before any kernel runs
  const MatmulMatrices& mm = *viewed;
  const int64_t m = mm.a[mm.a.size() - 2], k = mm.a.back(), n = mm.b.back();
  const auto a_batch = absl::MakeConstSpan(mm.a).first(mm.a.size() - 2);
  const auto b_batch = absl::MakeConstSpan(mm.b).first(mm.b.size() - 2);
  const auto out_batch =
      absl::MakeConstSpan(out.shape).first(out.shape.size() - mm.out_matrix_rank);
  if (m == 0 || n == 0) return;  // ForEachRun skips a batch extent of 0 itself

  const T* a_data = static_cast<const T*>(a.data);
  const T* b_data = static_cast<const T*>(b.data);
  T* out_data = static_cast<T*>(out.data);
  // Each operand is converted to Acc one matrix at a time, and not again while a broadcast
  // batch dimension keeps it the same.
  std::vector<Acc> a_matrix(static_cast<size_t>(m * k)), b_matrix(static_cast<size_t>(k * n));
  std::vector<Acc> row(static_cast<size_t>(n));
  int64_t a_loaded = -1, b_loaded = -1;

  auto multiply = [&](int64_t out_index, int64_t a_index, int64_t b_index) {
    if (a_index != a_loaded) {
      const T* src = a_data + a_index * m * k;
      std::transform(src, src + m * k, a_matrix.begin(), Load<T>);
      a_loaded = a_index;
    }
    if (b_index != b_loaded) {
      const T* src = b_data + b_index * k * n;
      std::transform(src, src + k * n, b_matrix.begin(), Load<T>);
      b_loaded = b_index;
    }
    T* dst = out_data + out_index * m * n;
    // i-p-j order: the inner loop streams through a row of b and of the result. Every
    // out[i][j] still sums its k products in order p = 0, 1, ..., k-1.
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), Acc{0});
      for (int64_t p = 0; p < k; ++p) {
        const Acc a_ip = a_matrix[i * k + p];
        const Acc* b_row = b_matrix.data() + p * n;
        for (int64_t j = 0; j < n; ++j) row[j] += a_ip * b_row[j];
      }
      for (int64_t j = 0; j < n; ++j) dst[i * n + j] = Store<T>(row[j]);
    }
  };

  // Batch indices count whole matrices, so the batch dimensions broadcast like any array.
  const std::vector<int64_t> in_strides[2] = {BroadcastStrides(a_batch, out_batch),
                                              BroadcastStrides(b_batch, out_batch)};
  ForEachRun(out_batch, in_strides, [&](const StridedRun& run) {
    for (int64_t j = 0; j < run.length; ++j) {
      multiply(run.out_offset + j, run.in_offsets[0] + j * run.in_strides[0],
               run.in_offsets[1] + j * run.in_strides[1]);
    }
  });
}

}  // namespace

void MatmulCpu(const ConstHostArray& a, const ConstHostArray& b, const HostArray& out) {
  DispatchDType(out.dtype, [&](auto tag) { MatmulTyped<typename decltype(tag)::type>(a, b, out); });
}

}  // namespace gpukit::kernels
