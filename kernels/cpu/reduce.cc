// ReduceCpu and ReduceRuns.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dispatch.h"

namespace gpukit::kernels {
namespace {

using internal::DispatchDType;
using internal::NumElements;
using internal::StoreElement;
using internal::Widen;
using internal::WideT;

// Runs `combine` over the reduced elements of every output element and stores the results.
// It walks the input once in memory order, one run of `runs.back()` at a time, with one
// accumulator per output element: each accumulator so combines its elements in the order
// they lie in memory (along one axis: index 0, 1, 2, ...). The first of them seeds it, so
// that max and min need no identity and the sum of {-0.0} keeps its sign. Floating results
// are divided by `divisor` (the reduced count for a mean, 1 otherwise) before the store.
// Requires a non-empty input and at least one run.
template <typename Acc, typename T, typename Combine>
void ReduceInMemoryOrder(const T* in, absl::Span<const ReduceRun> runs, Combine combine,
                         double divisor, const HostArray& out) {
  const size_t n = runs.size();
  // Output elements from one index of a run to the next: 0 along reduced runs.
  std::vector<int64_t> out_strides(n);
  int64_t out_count = 1, in_count = 1;
  for (size_t j = n; j-- > 0;) {
    out_strides[j] = runs[j].reduced ? 0 : out_count;
    if (!runs[j].reduced) out_count *= runs[j].extent;
    in_count *= runs[j].extent;
  }
  std::vector<Acc> acc(static_cast<size_t>(out_count));
  const ReduceRun& last = runs.back();
  std::vector<int64_t> index(n - 1, 0);  // of the runs before the last
  int64_t out_base = 0;
  for (int64_t offset = 0; offset < in_count; offset += last.extent) {
    // The first element of its output elements: every reduced index so far is 0.
    bool first = true;
    for (size_t j = 0; j + 1 < n; ++j) first = first && (!runs[j].reduced || index[j] == 0);
    const T* row = in + offset;
    if (last.reduced) {
      Acc value = first ? static_cast<Acc>(Widen(row[0]))
                        : combine(acc[out_base], static_cast<Acc>(Widen(row[0])));
      for (int64_t k = 1; k < last.extent; ++k) {
        value = combine(value, static_cast<Acc>(Widen(row[k])));
      }
      acc[out_base] = value;
    } else {
      Acc* dst = acc.data() + out_base;
      if (first) {
        for (int64_t i = 0; i < last.extent; ++i) dst[i] = static_cast<Acc>(Widen(row[i]));
      } else {
        for (int64_t i = 0; i < last.extent; ++i) {
          dst[i] = combine(dst[i], static_cast<Acc>(Widen(row[i])));
        }
      }
    }
    for (size_t j = n - 1; j-- > 0;) {  // the next index of the runs before the last
      out_base += out_strides[j];
      if (++index[j] < runs[j].extent) break;
      out_base -= out_strides[j] * runs[j].extent;
      index[j] = 0;
    }
  }
  for (int64_t i = 0; i < out_count; ++i) {
    if constexpr (std::is_floating_point_v<Acc>) {
      StoreElement(out.dtype, out.data, i, acc[i] / divisor);
    } else {
      StoreElement(out.dtype, out.data, i, acc[i]);
    }
  }
}

template <typename Acc>
Acc Add(Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) {
    return static_cast<Acc>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));  // wraps
  } else {
    return a + b;
  }
}

template <typename Acc>
bool IsNan(Acc value) {
  if constexpr (std::is_floating_point_v<Acc>) {
    return std::isnan(value);
  } else {
    return false;
  }
}

template <typename T>
void ReduceTyped(ReduceOp op, const T* in, absl::Span<const ReduceRun> runs, double count,
                 const HostArray& out) {
  using Acc = WideT<T>;  // double for the floating types, int64 for integers
  switch (op) {
    case ReduceOp::kSum:
      return ReduceInMemoryOrder<Acc>(in, runs, Add<Acc>, 1.0, out);
    case ReduceOp::kMean:
      // In double for integers too, as NumPy's mean of an integer array is.
      return ReduceInMemoryOrder<double>(in, runs, Add<double>, count, out);
    case ReduceOp::kMax:
      // Once the accumulator is NaN, no comparison is true and it stays NaN.
      return ReduceInMemoryOrder<Acc>(
          in, runs, [](Acc acc, Acc x) { return (x > acc || IsNan(x)) ? x : acc; }, 1.0, out);
    case ReduceOp::kMin:
      return ReduceInMemoryOrder<Acc>(
          in, runs, [](Acc acc, Acc x) { return (x < acc || IsNan(x)) ? x : acc; }, 1.0, out);
  }
}

}  // namespace

std::vector<ReduceRun> ReduceRuns(absl::Span<const int64_t> shape, absl::Span<const int> axes) {
  std::vector<ReduceRun> runs;
  size_t next_axis = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    const bool reduced = next_axis < axes.size() && axes[next_axis] == static_cast<int>(i);
    if (reduced) ++next_axis;
    if (shape[i] == 1) continue;  // no bearing on the layout
    if (!runs.empty() && runs.back().reduced == reduced) {
      runs.back().extent *= shape[i];
    } else {
      runs.push_back({shape[i], reduced});
    }
  }
  return runs;
}

void ReduceCpu(ReduceOp op, const ConstHostArray& in, absl::Span<const int> axes,
               const HostArray& out) {
  const int64_t out_count = NumElements(out.shape);
  if (out_count == 0) return;
  const int64_t in_count = NumElements(in.shape);
  if (in_count == 0) {
    // The empty sum is 0 and the empty mean 0/0. Max and min have no identity and the registry
    // rejects them; they get NaN (0 for integer outputs) rather than leaving memory unwritten.
    const bool is_sum = op == ReduceOp::kSum;
    for (int64_t i = 0; i < out_count; ++i) {
      if (is_sum) {
        StoreElement(out.dtype, out.data, i, int64_t{0});
      } else {
        StoreElement(out.dtype, out.data, i, std::numeric_limits<double>::quiet_NaN());
      }
    }
    return;
  }
  std::vector<ReduceRun> runs = ReduceRuns(in.shape, axes);
  if (runs.empty()) runs.push_back({1, false});                    // one element
  const double count = static_cast<double>(in_count / out_count);  // reduced per output
  DispatchDType(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ReduceTyped(op, static_cast<const T*>(in.data), runs, count, out);
  });
}

}  // namespace gpukit::kernels
