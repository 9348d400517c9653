#include "runtime/base/dtype.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace gpukit {

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt64:
      return 8;
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUInt8:
      return "uint8";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  struct Alias {
    absl::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"f32", DType::kFloat32}, {"f16", DType::kFloat16}, {"bf16", DType::kBFloat16},
      {"i32", DType::kInt32},   {"i64", DType::kInt64},   {"u8", DType::kUInt8},
  };
  for (DType dtype : kAllDTypes) {
    if (DTypeName(dtype) == name) return dtype;
  }
  for (const Alias& alias : kAliases) {
    if (alias.name == name) return alias.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name,
                   "\"; expected one of float32, float16, bfloat16, int32, int64, uint8"));
}

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

DType PromoteTypes(DType a, DType b) {
  if (a == b) return a;
  const bool fa = IsFloating(a), fb = IsFloating(b);
  if (fa && fb) return DType::kFloat32;  // f16+bf16, or either with f32
  if (fa) return a;
  if (fb) return b;
  return DTypeSize(a) >= DTypeSize(b) ? a : b;  // integers: the wider; uint8 is the narrowest
}

}  // namespace gpukit
