#include "proto/dtype_convert.h"

#include "absl/strings/str_cat.h"

namespace gpukit {

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype, absl::string_view field) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return DType::kFloat32;
    case v1::DTYPE_FLOAT16:
      return DType::kFloat16;
    case v1::DTYPE_BFLOAT16:
      return DType::kBFloat16;
    case v1::DTYPE_INT32:
      return DType::kInt32;
    case v1::DTYPE_INT64:
      return DType::kInt64;
    case v1::DTYPE_UINT8:
      return DType::kUInt8;
    case v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(absl::StrCat(field, " is unspecified"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " = ", static_cast<int>(dtype), " is not a known dtype"));
  }
}

v1::DType DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return v1::DTYPE_FLOAT32;
    case DType::kFloat16:
      return v1::DTYPE_FLOAT16;
    case DType::kBFloat16:
      return v1::DTYPE_BFLOAT16;
    case DType::kInt32:
      return v1::DTYPE_INT32;
    case DType::kInt64:
      return v1::DTYPE_INT64;
    case DType::kUInt8:
      return v1::DTYPE_UINT8;
  }
  return v1::DTYPE_UNSPECIFIED;
}

}  // namespace gpukit
