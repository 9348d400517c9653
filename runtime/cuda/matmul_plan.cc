#include "runtime/cuda/matmul_plan.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "runtime/base/matmul_shapes.h"
#include "runtime/base/shape.h"

namespace gpukit {
namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

bool IsCublasDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

// The batch stride of an input whose batch dims broadcast to `out_batch` (`batch` matrices
// of `matrix_elements` each): every matrix its own, or one for all. Any other pattern has
// no single stride: nullopt.
std::optional<int64_t> BatchStride(const Shape& shape, int64_t batch, int64_t matrix_elements) {
  int64_t count = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) count *= shape[i];
  // Broadcasting only prepends or stretches extents of 1, so an input with as many batch
  // matrices as the output has them in the output's order.
  if (count == batch) return batch == 1 ? 0 : matrix_elements;
  if (count == 1) return 0;
  return std::nullopt;
}

}  // namespace

std::string DescribeMatmul(const MatmulShape& s) {
  std::string text =
      absl::StrCat(DTypeName(s.dtype), " [", s.batch, " x ", s.m, "x", s.k,
                   s.transpose_a ? "^T" : "", " @ ", s.k, "x", s.n, s.transpose_b ? "^T" : "", "]");
  if (s.batch > 1) {
    absl::StrAppend(&text, " strides a ", s.a_batch_stride, " b ", s.b_batch_stride);
  }
  if (s.epilogue == MatmulEpilogue::kBias) absl::StrAppend(&text, ", bias");
  if (s.epilogue == MatmulEpilogue::kBiasGelu) absl::StrAppend(&text, ", bias+gelu");
  if (s.allow_tf32) absl::StrAppend(&text, ", tf32");
  return text;
}

absl::Status ValidateMatmulShape(const MatmulShape& s) {
  if (!IsCublasDType(s.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul dtype ", DTypeName(s.dtype), " is not float32, float16 or bfloat16"));
  }
  for (const auto& [name, value] : {std::pair{"m", s.m}, std::pair{"n", s.n}, std::pair{"k", s.k},
                                    std::pair{"batch", s.batch}}) {
    if (value < 1 || value > kMaxInt32) {
      return absl::InvalidArgumentError(
          absl::StrCat("matmul ", name, " = ", value, " must be in [1, ", kMaxInt32, "]"));
    }
  }
  if (s.allow_tf32 && s.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat("allow_tf32 applies to float32 only, the matmul is ", DTypeName(s.dtype)));
  }
  for (const auto& [name, stride, elements] :
       {std::tuple{"a_batch_stride", s.a_batch_stride, s.m * s.k},
        std::tuple{"b_batch_stride", s.b_batch_stride, s.k * s.n}}) {
    if (stride < 0 || (stride > 0 && stride < elements)) {
      return absl::InvalidArgumentError(absl::StrCat("matmul ", name, " = ", stride,
                                                     " must be 0 (broadcast) or >= ", elements,
                                                     " (one matrix)"));
    }
  }
  return absl::OkStatus();
}

LtGemmLayout ToColumnMajor(const MatmulShape& s) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const int32_t batch = static_cast<int32_t>(s.batch);
  LtGemmLayout lt;
  // cuBLASLt's A is gpukit's b. Row-major [k, n] reads column-major as [n, k] (ld n), which
  // is op(A) as it stands; a transposed b is stored [n, k], read as [k, n] (ld k), and is
  // transposed by cuBLASLt.
  lt.transpose_a = s.transpose_b;
  lt.a = s.transpose_b ? LtMatrix{u(s.k), u(s.n), s.k, batch, s.b_batch_stride}
                       : LtMatrix{u(s.n), u(s.k), s.n, batch, s.b_batch_stride};
  // cuBLASLt's B is gpukit's a: row-major [m, k] is column-major [k, m] (ld k); a transposed
  // a is stored [k, m], read as [m, k] (ld m).
  lt.transpose_b = s.transpose_a;
  lt.b = s.transpose_a ? LtMatrix{u(s.m), u(s.k), s.m, batch, s.a_batch_stride}
                       : LtMatrix{u(s.k), u(s.m), s.k, batch, s.a_batch_stride};
  // D is gpukit's out, row-major [m, n]: column-major [n, m] (ld n).
  lt.d = LtMatrix{u(s.n), u(s.m), s.n, batch, s.m * s.n};
  return lt;
}

uint32_t AddressAlignment(uint64_t address) {
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

MatmulRoute RouteMatmul(const TensorDesc& a, const TensorDesc& b, const OpPlan& plan) {
  MatmulRoute route;
  const DType dtype = plan.compute_dtype;
  if (!IsCublasDType(dtype)) {
    route.reason =
        absl::StrCat("cuBLASLt runs float32, float16 and bfloat16 matmuls, not ", DTypeName(dtype));
    return route;
  }
  for (const auto& [i, input] : {std::pair{0, &a}, std::pair{1, &b}}) {
    if (input->dtype != dtype) {
      route.reason =
          absl::StrCat("inputs[", i, "] is ", DTypeName(input->dtype), ", the matmul computes in ",
                       DTypeName(dtype), " (the fallback casts it)");
      return route;
    }
  }
  // NumPy's 1-d operands, viewed in place (runtime/base/matmul_shapes.h).
  absl::StatusOr<MatmulMatrices> mm = AsMatmulMatrices(a.shape, b.shape);
  if (!mm.ok()) {
    route.reason = std::string(mm.status().message());
    return route;
  }
  const Shape& a_shape = mm->a;
  const Shape& b_shape = mm->b;
  const size_t out_matrix_rank = mm->out_matrix_rank;
  const Shape& out = plan.output.shape;
  if (out.size() < out_matrix_rank) {
    route.reason = absl::StrCat("output has rank ", out.size());
    return route;
  }
  MatmulShape& s = route.shape;
  s.dtype = dtype;
  s.m = a_shape[a_shape.size() - 2];
  s.k = a_shape.back();
  s.n = b_shape.back();
  s.batch = 1;
  for (size_t i = 0; i + out_matrix_rank < out.size(); ++i) s.batch *= out[i];
  s.allow_tf32 = dtype == DType::kFloat32 && plan.params.allow_tf32;
  if (s.m == 0 || s.n == 0 || s.batch == 0) {
    route.kind = MatmulRoute::Kind::kNothingToDo;
    return route;
  }
  if (s.k == 0) {
    route.reason = "k = 0 (the output is zeros; the fallback kernel writes them)";
    return route;
  }
  const std::optional<int64_t> a_stride = BatchStride(a_shape, s.batch, s.m * s.k);
  const std::optional<int64_t> b_stride = BatchStride(b_shape, s.batch, s.k * s.n);
  if (!a_stride.has_value() || !b_stride.has_value()) {
    route.reason =
        absl::StrCat("batch dims ", ShapeToString(a.shape), " x ", ShapeToString(b.shape),
                     " broadcast along some axes only: no single batch stride");
    return route;
  }
  s.a_batch_stride = *a_stride;
  s.b_batch_stride = *b_stride;
  if (absl::Status valid = ValidateMatmulShape(s); !valid.ok()) {
    route.reason = std::string(valid.message());
    return route;
  }
  route.kind = MatmulRoute::Kind::kCublasLt;
  return route;
}

double MatmulFlops(const MatmulShape& s) {
  return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) *
         static_cast<double>(s.batch);
}

bool MatmulMaySlice(const MatmulShape& shape) {
  if (MatmulFlops(shape) < kMinSliceableMatmulFlops) return false;
  return shape.batch >= 2 || (!shape.transpose_a && shape.m >= 2 * kMatmulSliceRowQuantum);
}

int64_t MatmulWaves(const MatmulShape& shape, const MatmulGrid& grid) {
  if (grid.tile_rows <= 0 || grid.tile_cols <= 0 || grid.multiprocessors <= 0) return 0;
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t tile_rows = ceil_div(ceil_div(shape.m, grid.tile_rows), 2) * 2;  // in pairs
  const int64_t tiles = shape.batch * tile_rows * ceil_div(shape.n, grid.tile_cols);
  return ceil_div(tiles, grid.multiprocessors);
}

MatmulSlicing PlanMatmulSlices(const MatmulShape& shape, double max_slice_flops,
                               const MatmulGrid& grid) {
  if (!(max_slice_flops > 0) || !MatmulMaySlice(shape) || MatmulFlops(shape) <= max_slice_flops) {
    return {};
  }
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  // A slice is a number of units: batch entries, or quanta of rows.
  const bool by_batch = shape.batch >= 2;
  const int64_t unit_size = by_batch ? 1 : kMatmulSliceRowQuantum;
  const int64_t extent = by_batch ? shape.batch : shape.m;
  const int64_t units = ceil_div(extent, unit_size);
  // The shape of a slice that starts at unit `first` and has `count` of them.
  const auto slice_shape = [&](int64_t first, int64_t count) {
    MatmulShape slice = shape;
    const int64_t size = std::min(count * unit_size, extent - first * unit_size);
    (by_batch ? slice.batch : slice.m) = size;
    return slice;
  };
  const int64_t fewest = ceil_div(units, kMaxMatmulSlices);
  const int64_t target =
      std::max<int64_t>(1, static_cast<int64_t>(max_slice_flops / MatmulFlops(slice_shape(0, 1))));
  int64_t per_slice = std::max(target, fewest);
  if (MatmulWaves(shape, grid) > 0) {
    // The most units that take no more waves than one unit does: a smaller slice ends no
    // sooner.
    const int64_t unit_waves = MatmulWaves(slice_shape(0, 1), grid);
    int64_t one_wave = 1;
    while (one_wave < units && MatmulWaves(slice_shape(0, one_wave + 1), grid) == unit_waves) {
      ++one_wave;
    }
    const int64_t largest = std::max({target, one_wave, fewest});
    if (largest >= units) return {};
    // At most about 1024 sizes are tried, evenly spread from the largest down (a batch of
    // millions of tiny matrices would otherwise try millions).
    const int64_t step = std::max<int64_t>(1, (largest - fewest + 1) / 1024);
    int64_t best_waves = 0;
    for (int64_t size = largest; size >= fewest; size -= step) {
      const int64_t count = ceil_div(units, size);
      const int64_t last_first = (count - 1) * size;
      const int64_t total = (count - 1) * MatmulWaves(slice_shape(0, size), grid) +
                            MatmulWaves(slice_shape(last_first, units - last_first), grid);
      if (best_waves == 0 || total < best_waves) {
        best_waves = total;
        per_slice = size;
      }
    }
  }
  if (per_slice >= units) return {};
  MatmulSlicing slicing;
  slicing.axis = by_batch ? MatmulSlicing::Axis::kBatch : MatmulSlicing::Axis::kRows;
  slicing.per_slice = per_slice * unit_size;
  slicing.count = ceil_div(extent, slicing.per_slice);
  return slicing;
}

MatmulSlice SliceOfMatmul(const MatmulShape& shape, const MatmulSlicing& slicing,
                          int64_t index) {
  MatmulSlice slice;
  slice.shape = shape;
  const int64_t first = index * slicing.per_slice;
  switch (slicing.axis) {
    case MatmulSlicing::Axis::kNone:
      break;
    case MatmulSlicing::Axis::kRows:
      slice.shape.m = std::min(slicing.per_slice, shape.m - first);
      slice.a_offset = first * shape.k;
      slice.out_offset = first * shape.n;
      break;
    case MatmulSlicing::Axis::kBatch:
      slice.shape.batch = std::min(slicing.per_slice, shape.batch - first);
      slice.a_offset = first * shape.a_batch_stride;
      slice.b_offset = first * shape.b_batch_stride;
      slice.out_offset = first * shape.m * shape.n;
      break;
  }
  return slice;
}

double EstimatedMatmulFlopsPerSecond(int sm_major, int multiprocessor_count, DType dtype,
                                     bool tf32) {
  // Per SM, from cuBLAS on large products: an H100 SXM (132 SMs) reaches about 7.7e14
  // (bfloat16), 7.4e14 (float16), 3.7e14 (TF32) and 5.1e13 (float32) FLOP/s; an A100 about
  // 40% of an H100's SM; Blackwell about twice.
  double per_sm = 0;
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
      per_sm = 5.7e12;
      break;
    default:
      per_sm = tf32 ? 2.8e12 : 3.9e11;
      break;
  }
  const double generation = sm_major <= 8 ? 0.4 : (sm_major == 9 ? 1.0 : 2.0);
  return per_sm * generation * std::max(1, multiprocessor_count);
}

}  // namespace gpukit
