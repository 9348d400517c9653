// Element types of gpukit arrays and their properties.
//
// DType is the runtime's own enum (the proto has a mirror with an UNSPECIFIED value; the
// service layer translates). Usage:
//
//   DType t = DType::kFloat16;
//   int64_t bytes = DTypeSize(t) * elements;          // 2 bytes per element
//   absl::StatusOr<DType> parsed = ParseDType("bf16"); // kBFloat16
#ifndef GPUKIT_RUNTIME_BASE_DTYPE_H_
#define GPUKIT_RUNTIME_BASE_DTYPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpukit {

enum class DType : uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kInt32,
  kInt64,
  kUInt8,
};

inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                       DType::kInt32,   DType::kInt64,   DType::kUInt8};

// Bytes per element.
int64_t DTypeSize(DType dtype);

// Canonical lower-case name, as NumPy spells it ("float32", "bfloat16", "uint8").
absl::string_view DTypeName(DType dtype);

// Accepts canonical names and the short forms f32, f16, bf16, i32, i64, u8.
absl::StatusOr<DType> ParseDType(absl::string_view name);

bool IsFloating(DType dtype);

// The dtype both operands of a binary arithmetic op are converted to before it runs:
// equal dtypes stay; two integer types give the wider (uint8 with int32 gives int32);
// a floating and an integer type give the floating one; float16 with bfloat16 gives float32.
// (NumPy would widen some of these to float64, which gpukit does not have.)
DType PromoteTypes(DType a, DType b);

// The DType of a C++ element type, for typed host views: DTypeOf<float>() == kFloat32.
// Defined for float, int32_t, int64_t and uint8_t; code with 16-bit float types of its own
// adds specializations for them.
template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType DTypeOf<int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return DType::kInt64;
}
template <>
constexpr DType DTypeOf<uint8_t>() {
  return DType::kUInt8;
}

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_DTYPE_H_
