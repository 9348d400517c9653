// BinaryCpu and CastCpu.
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/strided_loop.h"

namespace gpukit::kernels {
namespace {

using internal::ConvertTo;
using internal::DispatchDType;
using internal::ForEachRun;
using internal::FromCompute;
using internal::NumElements;
using internal::StridedRun;
using internal::ToCompute;
using internal::Widen;

// Integer ops go through the unsigned type, whose arithmetic wraps by definition; converting
// the result back is modular since C++20. (uint8 operands promote to int, where 255 * 255
// cannot overflow, and the narrowing store wraps.)
template <typename T>
using UnsignedT = std::make_unsigned_t<T>;

struct AddOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(static_cast<UnsignedT<C>>(a) + static_cast<UnsignedT<C>>(b));
    } else {
      return a + b;
    }
  }
};

struct SubOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(static_cast<UnsignedT<C>>(a) - static_cast<UnsignedT<C>>(b));
    } else {
      return a - b;
    }
  }
};

struct MulOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      return static_cast<C>(static_cast<UnsignedT<C>>(a) * static_cast<UnsignedT<C>>(b));
    } else {
      return a * b;
    }
  }
};

struct DivOp {
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      // The registry never sends integer division here (cpu_kernels.h); it is still defined
      // so that a caller's mistake cannot be undefined behaviour: NumPy's floor_divide, where
      // x // 0 is 0 and INT_MIN // -1 wraps to INT_MIN.
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<C>) {
        if (b == -1) return static_cast<C>(UnsignedT<C>{0} - static_cast<UnsignedT<C>>(a));
        C quotient = static_cast<C>(a / b);
        if (a % b != 0 && ((a < 0) != (b < 0))) --quotient;
        return quotient;
      } else {
        return static_cast<C>(a / b);
      }
    } else {
      return a / b;
    }
  }
};

template <typename T, typename Op>
void BinaryTyped(const ConstHostArray& a, const ConstHostArray& b, const HostArray& out) {
  const T* a_data = static_cast<const T*>(a.data);
  const T* b_data = static_cast<const T*>(b.data);
  T* out_data = static_cast<T*>(out.data);
  const Op op;
  auto run_loop = [&](const StridedRun& run) {
    const T* a_run = a_data + run.in_offsets[0];
    const T* b_run = b_data + run.in_offsets[1];
    const int64_t a_stride = run.in_strides[0], b_stride = run.in_strides[1];
    T* out_run = out_data + run.out_offset;
    for (int64_t j = 0; j < run.length; ++j) {
      out_run[j] =
          FromCompute<T>(op(ToCompute(a_run[j * a_stride]), ToCompute(b_run[j * b_stride])));
    }
  };

  const int64_t count = NumElements(out.shape);
  const int64_t a_count = NumElements(a.shape), b_count = NumElements(b.shape);
  // Fast path: an operand with as many elements as the output has its layout (broadcasting
  // only prepends or stretches extents of 1), and one with a single element is a scalar.
  if ((a_count == count || a_count == 1) && (b_count == count || b_count == 1)) {
    const int64_t zero_offsets[2] = {0, 0};
    const int64_t strides[2] = {a_count == 1 ? 0 : 1, b_count == 1 ? 0 : 1};
    run_loop(StridedRun{0, count, zero_offsets, strides});
    return;
  }
  const std::vector<int64_t> in_strides[2] = {BroadcastStrides(a.shape, out.shape),
                                              BroadcastStrides(b.shape, out.shape)};
  ForEachRun(out.shape, in_strides, run_loop);
}

template <typename Op>
void BinaryWithOp(const ConstHostArray& a, const ConstHostArray& b, const HostArray& out) {
  DispatchDType(out.dtype,
                [&](auto tag) { BinaryTyped<typename decltype(tag)::type, Op>(a, b, out); });
}

}  // namespace

void BinaryCpu(BinaryOp op, const ConstHostArray& a, const ConstHostArray& b,
               const HostArray& out) {
  switch (op) {
    case BinaryOp::kAdd:
      return BinaryWithOp<AddOp>(a, b, out);
    case BinaryOp::kSub:
      return BinaryWithOp<SubOp>(a, b, out);
    case BinaryOp::kMul:
      return BinaryWithOp<MulOp>(a, b, out);
    case BinaryOp::kDiv:
      return BinaryWithOp<DivOp>(a, b, out);
  }
}

void CastCpu(const ConstHostArray& in, const HostArray& out) {
  const int64_t count = NumElements(in.shape);
  if (count == 0) return;
  if (in.dtype == out.dtype) {
    // A copy keeps every bit, NaN payloads included.
    std::memcpy(out.data, in.data, static_cast<size_t>(count * DTypeSize(in.dtype)));
    return;
  }
  // All 36 pairs are instantiated, each a one-line loop: the source widens exactly to double
  // (floating) or int64 (integer), and ConvertTo rounds, saturates or wraps from there with a
  // single rounding step (int64 -> float16 included; see ToFloatRoundToOdd).
  DispatchDType(in.dtype, [&](auto in_tag) {
    using In = typename decltype(in_tag)::type;
    const In* in_data = static_cast<const In*>(in.data);
    DispatchDType(out.dtype, [&](auto out_tag) {
      using Out = typename decltype(out_tag)::type;
      Out* out_data = static_cast<Out*>(out.data);
      for (int64_t i = 0; i < count; ++i) out_data[i] = ConvertTo<Out>(Widen(in_data[i]));
    });
  });
}

}  // namespace gpukit::kernels
