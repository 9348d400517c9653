// ReduceCpu.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
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

// A reduction seen as in[outer][extent][inner] -> out[outer][inner]: the reduced axis in the
// middle, everything before it in `outer`, everything after it in `inner`. Reducing all
// elements is outer = inner = 1.
struct Geometry {
  int64_t outer;
  int64_t extent;
  int64_t inner;
};

// Runs `combine` over the extent for every (outer, inner) pair and stores the results. It
// walks the input in memory order with one accumulator per inner index, rather than striding
// through it once per output element. The first element seeds the accumulator, so that max
// and min need no identity and the sum of {-0.0} keeps its sign. Floating results are divided
// by `divisor` (the extent for a mean, 1 otherwise) before the store. Requires extent > 0.
template <typename Acc, typename T, typename Combine>
void ReduceOverExtent(const T* in, const Geometry& g, Combine combine, double divisor,
                      const HostArray& out) {
  std::vector<Acc> acc(static_cast<size_t>(g.inner));
  for (int64_t o = 0; o < g.outer; ++o) {
    const T* slab = in + o * g.extent * g.inner;
    for (int64_t i = 0; i < g.inner; ++i) acc[i] = static_cast<Acc>(Widen(slab[i]));
    for (int64_t k = 1; k < g.extent; ++k) {
      const T* row = slab + k * g.inner;
      for (int64_t i = 0; i < g.inner; ++i) {
        acc[i] = combine(acc[i], static_cast<Acc>(Widen(row[i])));
      }
    }
    for (int64_t i = 0; i < g.inner; ++i) {
      if constexpr (std::is_floating_point_v<Acc>) {
        StoreElement(out.dtype, out.data, o * g.inner + i, acc[i] / divisor);
      } else {
        StoreElement(out.dtype, out.data, o * g.inner + i, acc[i]);
      }
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
void ReduceTyped(ReduceOp op, const T* in, const Geometry& g, const HostArray& out) {
  using Acc = WideT<T>;  // double for the floating types, int64 for integers
  switch (op) {
    case ReduceOp::kSum:
      return ReduceOverExtent<Acc>(in, g, Add<Acc>, 1.0, out);
    case ReduceOp::kMean:
      // In double for integers too, as NumPy's mean of an integer array is.
      return ReduceOverExtent<double>(in, g, Add<double>, static_cast<double>(g.extent), out);
    case ReduceOp::kMax:
      // Once the accumulator is NaN, no comparison is true and it stays NaN.
      return ReduceOverExtent<Acc>(
          in, g, [](Acc acc, Acc x) { return (x > acc || IsNan(x)) ? x : acc; }, 1.0, out);
    case ReduceOp::kMin:
      return ReduceOverExtent<Acc>(
          in, g, [](Acc acc, Acc x) { return (x < acc || IsNan(x)) ? x : acc; }, 1.0, out);
  }
}

}  // namespace

void ReduceCpu(ReduceOp op, const ConstHostArray& in, std::optional<int> axis,
               const HostArray& out) {
  Geometry g{1, NumElements(in.shape), 1};
  if (axis.has_value()) {
    const auto dims = absl::MakeConstSpan(in.shape);
    g.outer = NumElements(dims.subspan(0, *axis));
    g.extent = in.shape[*axis];
    g.inner = NumElements(dims.subspan(*axis + 1));
  }
  const int64_t out_count = g.outer * g.inner;
  if (out_count == 0) return;

  if (g.extent == 0) {
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

  DispatchDType(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ReduceTyped(op, static_cast<const T*>(in.data), g, out);
  });
}

}  // namespace gpukit::kernels
