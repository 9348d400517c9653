#include "runtime/base/shape.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpukit {

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status ValidateShape(absl::Span<const int64_t> shape, absl::string_view field) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " has ", shape.size(), " dimensions; at most ", kMaxRank, " are supported"));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "] = ", shape[i], " must be >= 0"));
    }
  }
  absl::StatusOr<int64_t> count = ElementCount(shape);
  if (!count.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", ShapeToString(shape), ": ", count.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ElementCount(absl::Span<const int64_t> shape) {
  for (int64_t dim : shape) {
    if (dim < 0) return absl::InvalidArgumentError("negative dimension");
  }
  // A zero extent anywhere means no elements, whatever the product of the others.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (__builtin_mul_overflow(count, dim, &count)) {
      return absl::InvalidArgumentError("element count overflows int64");
    }
  }
  return count;
}

absl::StatusOr<int64_t> ByteSize(absl::Span<const int64_t> shape, DType dtype) {
  absl::StatusOr<int64_t> count = ElementCount(shape);
  if (!count.ok()) return count.status();
  int64_t bytes = 0;
  if (__builtin_mul_overflow(*count, DTypeSize(dtype), &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("size of ", ShapeToString(shape), " ",
                                                   DTypeName(dtype), " overflows int64 bytes"));
  }
  return bytes;
}

absl::StatusOr<Shape> BroadcastShapes(absl::Span<const int64_t> a, absl::Span<const int64_t> b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shapes ", ShapeToString(a), " and ", ShapeToString(b), " cannot be broadcast together"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

std::vector<int64_t> BroadcastStrides(absl::Span<const int64_t> in_shape,
                                      absl::Span<const int64_t> out_shape) {
  const std::vector<int64_t> in_strides = ContiguousStrides(in_shape);
  std::vector<int64_t> strides(out_shape.size(), 0);
  const size_t offset = out_shape.size() - in_shape.size();
  for (size_t i = 0; i < in_shape.size(); ++i) {
    strides[offset + i] = in_shape[i] == 1 ? 0 : in_strides[i];
  }
  return strides;
}

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view field) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", axis, " is out of range for an array of rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

}  // namespace gpukit
