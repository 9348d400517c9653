// Element types of the CPU kernels and the conversions between them (private to kernels/cpu).
//
// Each kernel dispatches once on a DType to a template over the storage type, then works in
// one of two widened types: double for the floating types (every float, float16 and bfloat16
// value is exact in it) and int64 for the integers (every int32 and uint8 value is exact in
// it). Converting back rounds or wraps exactly as cpu_kernels.h promises. Usage:
//
//   DispatchDType(out.dtype, [&](auto tag) {
//     using T = typename decltype(tag)::type;  // float, Float16, ..., uint8_t
//     T* data = static_cast<T*>(out.data);
//     data[0] = ConvertTo<T>(Widen(data[0]) + 1);
//   });
//
// Thread safety: stateless functions.
#ifndef GPUKIT_KERNELS_CPU_DISPATCH_H_
#define GPUKIT_KERNELS_CPU_DISPATCH_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "absl/types/span.h"
#include "kernels/cpu/half.h"
#include "runtime/base/dtype.h"

namespace gpukit::kernels::internal {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T the storage type of `dtype` and returns its result.
template <typename Fn>
decltype(auto) DispatchDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      return fn(TypeTag<float>{});
    case DType::kFloat16:
      return fn(TypeTag<Float16>{});
    case DType::kBFloat16:
      return fn(TypeTag<BFloat16>{});
    case DType::kInt32:
      return fn(TypeTag<int32_t>{});
    case DType::kInt64:
      return fn(TypeTag<int64_t>{});
    case DType::kUInt8:
      return fn(TypeTag<uint8_t>{});
  }
  // Only a corrupted DType gets here (the registry validated it); computing on a guessed type
  // would silently write garbage into a client's buffer.
  std::abort();
}

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <typename T>
inline constexpr bool kIsFloating = std::is_same_v<T, float> || kIsHalf<T>;

// Element-wise arithmetic type: float for the floating types (cpu_kernels.h computes float16
// and bfloat16 in float32), the type itself for integers.
template <typename T>
using ComputeT = std::conditional_t<kIsFloating<T>, float, T>;

template <typename T>
ComputeT<T> ToCompute(T value) {
  if constexpr (kIsHalf<T>) {
    return value.ToFloat();
  } else {
    return value;
  }
}

template <typename T>
T FromCompute(ComputeT<T> value) {
  if constexpr (kIsHalf<T>) {
    return T::FromFloat(value);
  } else {
    return value;
  }
}

// Accumulation and conversion type: double for the floating types, int64 for integers.
template <typename T>
using WideT = std::conditional_t<kIsFloating<T>, double, int64_t>;

template <typename T>
WideT<T> Widen(T value) {
  return static_cast<WideT<T>>(ToCompute(value));
}

// Rounds `value` to float with round-to-odd: truncate toward zero, then set the last bit if
// anything was dropped. Rounding that result to nearest-even float16 or bfloat16 (at most 11
// significant bits, far fewer than float's 24) gives the correctly rounded value of `value`,
// where plain double -> float -> float16 could round twice (a value just above a float16 tie
// would first become the tie, and then go to even).
inline float ToFloatRoundToOdd(double value) {
  if (!std::isfinite(value)) return static_cast<float>(value);
  float result = static_cast<float>(value);  // nearest; inf past the range
  if (static_cast<double>(result) == value) return result;
  if (std::fabs(static_cast<double>(result)) > std::fabs(value)) {
    result = std::nextafter(result, 0.0f);  // FLT_MAX for an overflow to inf
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(result) | 1u);
}

// The same for an int64 (which may have 63 significant bits, more than double's 53, so going
// through double would also round twice).
inline float ToFloatRoundToOdd(int64_t value) {
  const bool negative = value < 0;
  const uint64_t magnitude =
      negative ? uint64_t{0} - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  constexpr int kFloatDigits = std::numeric_limits<float>::digits;                  // 24
  if (magnitude < (uint64_t{1} << kFloatDigits)) return static_cast<float>(value);  // exact
  const int shift = std::bit_width(magnitude) - kFloatDigits;
  uint64_t significand = magnitude >> shift;
  if ((magnitude & ((uint64_t{1} << shift) - 1)) != 0) significand |= 1;
  const float result = std::ldexp(static_cast<float>(significand), shift);  // both exact
  return negative ? -result : result;
}

// Truncates toward zero and saturates at I's range; NaN becomes 0.
template <typename I>
I SaturatingCast(double value) {
  using Limits = std::numeric_limits<I>;
  // Both bounds are powers of two (or zero), hence exact in double.
  constexpr double kMin = static_cast<double>(Limits::min());
  constexpr double kMaxPlusOne = 2.0 * static_cast<double>(Limits::max() / 2 + 1);
  if (std::isnan(value)) return 0;
  const double truncated = std::trunc(value);
  if (truncated < kMin) return Limits::min();
  if (truncated >= kMaxPlusOne) return Limits::max();
  return static_cast<I>(truncated);
}

// Converts a widened floating value to storage type T: rounds to nearest-even for the
// floating types, and as SaturatingCast for integers.
template <typename T>
T ConvertTo(double value) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(value);
  } else if constexpr (kIsHalf<T>) {
    return T::FromFloat(ToFloatRoundToOdd(value));
  } else {
    return SaturatingCast<T>(value);
  }
}

// Converts a widened integer value to storage type T: rounds to nearest-even for the floating
// types, and wraps modulo 2^bits for integers (defined behaviour since C++20).
template <typename T>
T ConvertTo(int64_t value) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(value);  // correctly rounded (IEEE conversion, C Annex F)
  } else if constexpr (kIsHalf<T>) {
    return T::FromFloat(ToFloatRoundToOdd(value));
  } else {
    return static_cast<T>(value);
  }
}

// Stores `value` converted to `dtype` as element `index` of `data`.
template <typename Wide>
void StoreElement(DType dtype, void* data, int64_t index, Wide value) {
  DispatchDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    static_cast<T*>(data)[index] = ConvertTo<T>(value);
  });
}

// Product of the dimensions; the kernels run after validation, so it cannot overflow.
inline int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

}  // namespace gpukit::kernels::internal

#endif  // GPUKIT_KERNELS_CPU_DISPATCH_H_
