// Array shapes: validation with overflow checks, NumPy broadcasting, row-major strides.
//
// A Shape is a list of non-negative dimensions; the empty shape is a 0-d array (a scalar
// with one element). Every function that can overflow int64 checks and says so. Usage:
//
//   GPUKIT_RETURN_IF_ERROR(ValidateShape(shape, "shape"));
//   GPUKIT_ASSIGN_OR_RETURN(int64_t bytes, ByteSize(shape, DType::kFloat32));
//   GPUKIT_ASSIGN_OR_RETURN(Shape out, BroadcastShapes({2, 1, 3}, {4, 3}));  // {2, 4, 3}
#ifndef GPUKIT_RUNTIME_BASE_SHAPE_H_
#define GPUKIT_RUNTIME_BASE_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "runtime/base/dtype.h"

namespace gpukit {

using Shape = std::vector<int64_t>;

// The most dimensions an array may have (as in NumPy's early versions and most GPU kernels).
inline constexpr int kMaxRank = 8;

// "[2, 3, 4]".
std::string ShapeToString(absl::Span<const int64_t> shape);

// Checks rank <= kMaxRank, every dimension >= 0 and the element count within int64.
// `field` names the request field in messages: "shape[1] = -3 must be >= 0".
absl::Status ValidateShape(absl::Span<const int64_t> shape, absl::string_view field);

// Product of the dimensions; 1 for the empty shape. Fails on int64 overflow.
absl::StatusOr<int64_t> ElementCount(absl::Span<const int64_t> shape);

// ElementCount * DTypeSize, failing on int64 overflow.
absl::StatusOr<int64_t> ByteSize(absl::Span<const int64_t> shape, DType dtype);

// NumPy broadcasting of two shapes (align right; each pair equal or one of them 1).
absl::StatusOr<Shape> BroadcastShapes(absl::Span<const int64_t> a, absl::Span<const int64_t> b);

// Row-major element strides of a contiguous array of `shape`.
std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> shape);

// Strides (in elements) to read an array of `in_shape` as if it had the broadcast
// `out_shape`: right-aligned, 0 where the input dimension is 1 or missing. Requires
// in_shape.size() <= out_shape.size() (true of any shape broadcast into out_shape).
std::vector<int64_t> BroadcastStrides(absl::Span<const int64_t> in_shape,
                                      absl::Span<const int64_t> out_shape);

// Resolves a possibly negative axis against `rank`; fails if out of range.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, absl::string_view field);

}  // namespace gpukit

#endif  // GPUKIT_RUNTIME_BASE_SHAPE_H_
