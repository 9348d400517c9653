// UnaryCpu, ClampCpu and WhereCpu.
#include <cmath>
#include <cstdint>
#include <cstdlib>
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
using internal::kIsFloating;
using internal::NumElements;
using internal::StridedRun;
using internal::ToCompute;
using internal::Widen;

double UnaryFloat(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::kExp:
      return std::exp(x);
    case UnaryOp::kLog:
      return std::log(x);
    case UnaryOp::kSqrt:
      return std::sqrt(x);
    case UnaryOp::kRsqrt:
      return 1.0 / std::sqrt(x);
    case UnaryOp::kAbs:
      return std::fabs(x);
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kRelu:
      return x > 0 || std::isnan(x) ? x : 0.0;
    case UnaryOp::kGelu:
      return 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2));
    case UnaryOp::kSilu:
      return x / (1.0 + std::exp(-x));
    case UnaryOp::kSigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::kTanh:
      return std::tanh(x);
  }
  std::abort();  // a corrupted enum
}

// abs, neg, relu of an integer, wrapping through the unsigned type as BinaryCpu does.
template <typename T>
T UnaryInteger(UnaryOp op, T x) {
  using U = std::make_unsigned_t<T>;
  const U negated = static_cast<U>(U{0} - static_cast<U>(x));
  switch (op) {
    case UnaryOp::kAbs:
      return x < 0 ? static_cast<T>(negated) : x;
    case UnaryOp::kNeg:
      return static_cast<T>(negated);
    case UnaryOp::kRelu:
      return x > 0 ? x : T{0};
    default:
      std::abort();  // the registry computes the other ops in float32
  }
}

// The walk of out's elements with one strided input per operand (broadcasting), given each
// operand's shape; a single run when every operand has out's layout or one element.
void ForEachBroadcastRun(absl::Span<const Shape* const> shapes, const Shape& out_shape,
                         absl::FunctionRef<void(const StridedRun&)> fn) {
  const int64_t count = NumElements(out_shape);
  bool flat = true;
  std::vector<int64_t> flat_strides;
  for (const Shape* shape : shapes) {
    const int64_t n = NumElements(*shape);
    flat = flat && (n == count || n == 1);
    flat_strides.push_back(n == 1 ? 0 : 1);
  }
  if (flat) {
    if (count == 0) return;
    const std::vector<int64_t> zero_offsets(shapes.size(), 0);
    fn(StridedRun{0, count, zero_offsets, flat_strides});
    return;
  }
  std::vector<std::vector<int64_t>> strides;
  for (const Shape* shape : shapes) strides.push_back(BroadcastStrides(*shape, out_shape));
  ForEachRun(out_shape, strides, fn);
}

// Whether a `dtype` element at `p` is nonzero: any bit but a floating sign bit is set.
bool Nonzero(DType dtype, const std::byte* p) {
  switch (DTypeSize(dtype)) {
    case 1:
      return std::to_integer<uint8_t>(*p) != 0;
    case 2: {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return (bits & 0x7fffu) != 0;  // 2-byte dtypes are float16 and bfloat16
    }
    case 4: {
      uint32_t bits;
      std::memcpy(&bits, p, 4);
      return (dtype == DType::kFloat32 ? bits & 0x7fffffffu : bits) != 0;
    }
    default: {
      uint64_t bits;
      std::memcpy(&bits, p, 8);
      return bits != 0;
    }
  }
}

}  // namespace

void UnaryCpu(UnaryOp op, const ConstHostArray& in, const HostArray& out) {
  const int64_t count = NumElements(in.shape);
  DispatchDType(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(in.data);
    T* y = static_cast<T*>(out.data);
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (kIsFloating<T>) {
        y[i] = ConvertTo<T>(UnaryFloat(op, Widen(x[i])));
      } else {
        y[i] = UnaryInteger<T>(op, x[i]);
      }
    }
  });
}

void ClampCpu(const ConstHostArray& in, const ClampBound* lo, const ClampBound* hi,
              const HostArray& out) {
  const int64_t count = NumElements(in.shape);
  DispatchDType(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<kIsFloating<T>, float, int64_t>;
    auto bound = [](const ClampBound* b) -> C {
      if (b == nullptr) return C{};
      if constexpr (kIsFloating<T>) {
        // Like a float scalar operand: the double is rounded to float32 first.
        return b->is_float ? static_cast<float>(b->float_value) : static_cast<float>(b->int_value);
      } else {
        return b->int_value;  // the registry sends integer bounds within T's range only
      }
    };
    const C lo_value = bound(lo), hi_value = bound(hi);
    const T* x = static_cast<const T*>(in.data);
    T* y = static_cast<T*>(out.data);
    for (int64_t i = 0; i < count; ++i) {
      C v = static_cast<C>(ToCompute(x[i]));
      if (lo != nullptr && v < lo_value) v = lo_value;
      if (hi != nullptr && v > hi_value) v = hi_value;
      if constexpr (kIsFloating<T>) {
        y[i] = FromCompute<T>(v);
      } else {
        y[i] = static_cast<T>(v);
      }
    }
  });
}

void WhereCpu(const ConstHostArray& cond, const ConstHostArray& a, const ConstHostArray& b,
              const HostArray& out) {
  const Shape* shapes[] = {&cond.shape, &a.shape, &b.shape};
  const std::byte* c = static_cast<const std::byte*>(cond.data);
  const int64_t c_size = DTypeSize(cond.dtype);
  DispatchDType(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a_data = static_cast<const T*>(a.data);
    const T* b_data = static_cast<const T*>(b.data);
    T* y = static_cast<T*>(out.data);
    ForEachBroadcastRun(shapes, out.shape, [&](const StridedRun& run) {
      for (int64_t j = 0; j < run.length; ++j) {
        const bool take_a =
            Nonzero(cond.dtype, c + (run.in_offsets[0] + j * run.in_strides[0]) * c_size);
        y[run.out_offset + j] = take_a ? a_data[run.in_offsets[1] + j * run.in_strides[1]]
                                       : b_data[run.in_offsets[2] + j * run.in_strides[2]];
      }
    });
  });
}

}  // namespace gpukit::kernels
