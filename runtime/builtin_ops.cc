// gpukit's built-in ops: their planners, and the table that registers each op once
// (OpRegistry::Builtin, at the end) with its inputs, attributes, planner and kernels. The
// kernels live per backend: the CPU ones in runtime/cpu/cpu_op_kernels.cc over kernels/cpu,
// the CUDA lowerings in runtime/builtin_op_runner.cc over kernels/cuda.
//
// A planner runs after OpRegistry::Plan's checks of the table (operand count, each operand's
// dtype and whether it may be a scalar, attribute names, types and required ones), so it
// reads in[i].tensor of an input its op takes only as an array, and a required attribute's
// value, without checking them again.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/base/matmul_shapes.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_op_kernels.h"
#include "runtime/cuda/op_lowering.h"
#include "runtime/op_registry.h"

namespace gpukit {
namespace {

// The value of attribute `name` when it is given. OpRegistry::Plan has checked its type
// against the op's AttrSpec, so planners read it without checking it again.
template <typename T>
std::optional<T> ReadAttr(const AttrMap& attrs, absl::string_view name) {
  auto it = attrs.find(name);
  if (it == attrs.end()) return std::nullopt;
  const T* value = std::get_if<T>(&it->second);
  return value != nullptr ? std::optional<T>(*value) : std::nullopt;
}

// add, sub, mul, div: NumPy broadcasting between arrays, or an array and a scalar.
absl::StatusOr<OpPlan> PlanBinary(absl::Span<const OperandDesc> in, bool true_divide) {
  const OperandDesc& a = in[0];
  const OperandDesc& b = in[1];
  if (a.is_scalar && b.is_scalar) {
    return absl::InvalidArgumentError("at least one input must be an array, got two scalars");
  }
  DType dtype;
  if (!a.is_scalar && !b.is_scalar) {
    dtype = PromoteTypes(a.tensor.dtype, b.tensor.dtype);
  } else {
    const OperandDesc& array = a.is_scalar ? b : a;
    const OperandDesc& scalar = a.is_scalar ? a : b;
    dtype = array.tensor.dtype;
    if (scalar.scalar.is_float && !IsFloating(dtype)) dtype = DType::kFloat32;
  }
  if (true_divide && !IsFloating(dtype)) dtype = DType::kFloat32;
  const Shape empty;
  GPUKIT_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(a.is_scalar ? empty : a.tensor.shape,
                                                       b.is_scalar ? empty : b.tensor.shape));
  OpPlan plan;
  plan.compute_dtype = dtype;
  plan.output = {dtype, std::move(shape)};
  return plan;
}

absl::StatusOr<OpPlan> PlanAddSubMul(absl::Span<const OperandDesc> in, const AttrMap&) {
  return PlanBinary(in, /*true_divide=*/false);
}
absl::StatusOr<OpPlan> PlanDiv(absl::Span<const OperandDesc> in, const AttrMap&) {
  return PlanBinary(in, /*true_divide=*/true);
}

// NumPy's matmul: a 1-d a is a row [1, k] and a 1-d b a column [k, 1], and that added
// dimension is dropped from the result (runtime/base/matmul_shapes.h); batch dimensions
// broadcast.
absl::StatusOr<OpPlan> PlanMatmul(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  const TensorDesc* a = &in[0].tensor;
  const TensorDesc* b = &in[1].tensor;
  // Refuses 0-d operands and inner dimensions that differ, in NumPy's words.
  GPUKIT_ASSIGN_OR_RETURN(const MatmulMatrices mm, AsMatmulMatrices(a->shape, b->shape));
  const Shape& a_matrix = mm.a;
  const Shape& b_matrix = mm.b;
  const int64_t m = a_matrix[a_matrix.size() - 2];
  const int64_t n = b_matrix.back();
  GPUKIT_ASSIGN_OR_RETURN(
      Shape out, BroadcastShapes(absl::MakeConstSpan(a_matrix).first(a_matrix.size() - 2),
                                 absl::MakeConstSpan(b_matrix).first(b_matrix.size() - 2)));
  if (a->shape.size() > 1) out.push_back(m);
  if (b->shape.size() > 1) out.push_back(n);
  const bool allow_tf32 = ReadAttr<bool>(attrs, "allow_tf32").value_or(false);
  const DType dtype = PromoteTypes(a->dtype, b->dtype);
  OpPlan plan;
  plan.compute_dtype = dtype;
  plan.output = {dtype, std::move(out)};
  plan.params.allow_tf32 = allow_tf32;
  return plan;
}

enum class ReduceKind { kSum, kMean, kMax, kMin };

// The output shape of a reduction of `x` over the axes flagged in `reduced`. With
// `needs_identity` (max, min, argmax), a reduced extent of 0 is INVALID_ARGUMENT: those ops
// have no identity to give for it.
absl::StatusOr<Shape> ReducedShape(const TensorDesc& x, const std::vector<bool>& reduced,
                                   bool keepdims, bool needs_identity, absl::string_view op) {
  Shape out;
  bool empty = false;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (!reduced[i]) {
      out.push_back(x.shape[i]);
      continue;
    }
    empty = empty || x.shape[i] == 0;
    if (keepdims) out.push_back(1);
  }
  if (empty && needs_identity) {
    return absl::InvalidArgumentError(absl::StrCat(op, " of an empty extent (shape ",
                                                   ShapeToString(x.shape), ") has no identity"));
  }
  return out;
}

// sum, mean, max, min: attribute "axis" is absent (every axis), an integer, or a list of
// integers (NumPy's tuple of axes: negative ones count from the end, none may repeat, and
// the empty list reduces nothing).
absl::StatusOr<OpPlan> PlanReduce(absl::Span<const OperandDesc> in, const AttrMap& attrs,
                                  ReduceKind kind, absl::string_view op) {
  const TensorDesc* x = &in[0].tensor;
  const bool keepdims = ReadAttr<bool>(attrs, "keepdims").value_or(false);
  const int rank = static_cast<int>(x->shape.size());
  std::vector<bool> reduced(rank, true);
  if (auto it = attrs.find("axis"); it != attrs.end()) {
    std::vector<int64_t> axes;
    const std::string field = "attribute \"axis\"";
    if (const int64_t* axis = std::get_if<int64_t>(&it->second)) {
      axes.push_back(*axis);
    } else {  // OpRegistry::Plan let only an integer or a list of integers through
      axes = std::get<std::vector<int64_t>>(it->second);
    }
    reduced.assign(rank, false);
    for (size_t i = 0; i < axes.size(); ++i) {
      GPUKIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(axes[i], rank,
                                                    std::holds_alternative<int64_t>(it->second)
                                                        ? field
                                                        : absl::StrCat(field, "[", i, "]")));
      if (reduced[ax]) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, " = [", absl::StrJoin(axes, ", "), "] repeats axis ", ax, " (rank ", rank, ")"));
      }
      reduced[ax] = true;
    }
  }
  OpPlan plan;
  plan.compute_dtype = x->dtype;
  plan.params.keepdims = keepdims;
  for (int i = 0; i < rank; ++i) {
    if (reduced[i]) plan.params.reduce_axes.push_back(i);
  }
  const bool needs_identity = kind == ReduceKind::kMax || kind == ReduceKind::kMin;
  GPUKIT_ASSIGN_OR_RETURN(Shape out_shape,
                          ReducedShape(*x, reduced, plan.params.keepdims, needs_identity, op));
  DType out = x->dtype;
  if (kind == ReduceKind::kSum && !IsFloating(out)) out = DType::kInt64;
  if (kind == ReduceKind::kMean && !IsFloating(out)) out = DType::kFloat32;
  plan.output = {out, std::move(out_shape)};
  return plan;
}

absl::StatusOr<OpPlan> PlanSum(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  return PlanReduce(in, attrs, ReduceKind::kSum, "sum");
}
absl::StatusOr<OpPlan> PlanMean(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  return PlanReduce(in, attrs, ReduceKind::kMean, "mean");
}
absl::StatusOr<OpPlan> PlanMax(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  return PlanReduce(in, attrs, ReduceKind::kMax, "max");
}
absl::StatusOr<OpPlan> PlanMin(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  return PlanReduce(in, attrs, ReduceKind::kMin, "min");
}

absl::StatusOr<OpPlan> PlanAstype(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  const TensorDesc* x = &in[0].tensor;
  const std::optional<DType> dtype = ReadAttr<DType>(attrs, "dtype");  // required: Plan checked
  OpPlan plan;
  plan.compute_dtype = x->dtype;
  plan.output = {*dtype, x->shape};
  return plan;
}

absl::StatusOr<OpPlan> PlanReshape(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  const TensorDesc* x = &in[0].tensor;
  const std::optional<std::vector<int64_t>> shape =
      ReadAttr<std::vector<int64_t>>(attrs, "shape");  // required: Plan checked it is there
  GPUKIT_ASSIGN_OR_RETURN(int64_t count, ElementCount(x->shape));
  Shape out = *shape;
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1 && inferred < 0) {
      inferred = static_cast<int>(i);
      continue;
    }
    if (out[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("attribute \"shape\"[", i, "] = ", out[i],
                                                     " must be >= 0 (or a single -1)"));
    }
    if (__builtin_mul_overflow(known, out[i], &known)) {
      return absl::InvalidArgumentError("attribute \"shape\" overflows int64 elements");
    }
  }
  if (inferred >= 0) {
    if (known == 0 || count % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeToString(x->shape),
                                                     " into ", ShapeToString(*shape)));
    }
    out[inferred] = count / known;
    known = count;
  }
  if (known != count) {
    return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeToString(x->shape), " (",
                                                   count, " elements) into ",
                                                   ShapeToString(*shape)));
  }
  GPUKIT_RETURN_IF_ERROR(ValidateShape(out, "attribute \"shape\""));
  OpPlan plan;
  plan.compute_dtype = x->dtype;
  plan.output = {x->dtype, std::move(out)};
  return plan;
}

absl::StatusOr<OpPlan> PlanTranspose(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  const TensorDesc* x = &in[0].tensor;
  const std::optional<std::vector<int64_t>> perm_attr =
      ReadAttr<std::vector<int64_t>>(attrs, "perm");
  const int rank = static_cast<int>(x->shape.size());
  OpPlan plan;
  std::vector<int>& perm = plan.params.perm;
  if (perm_attr.has_value()) {
    if (static_cast<int>(perm_attr->size()) != rank) {
      return absl::InvalidArgumentError(absl::StrCat("attribute \"perm\" has ", perm_attr->size(),
                                                     " entries; the array "
                                                     "has rank ",
                                                     rank));
    }
    std::vector<bool> seen(rank, false);
    for (int i = 0; i < rank; ++i) {
      GPUKIT_ASSIGN_OR_RETURN(int axis, NormalizeAxis((*perm_attr)[i], rank,
                                                      absl::StrCat("attribute \"perm\"[", i, "]")));
      if (seen[axis]) {
        return absl::InvalidArgumentError(absl::StrCat("attribute \"perm\" repeats axis ", axis));
      }
      seen[axis] = true;
      perm.push_back(axis);
    }
  } else {
    perm.resize(rank);
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  Shape out(rank);
  for (int i = 0; i < rank; ++i) out[i] = x->shape[perm[i]];
  plan.compute_dtype = x->dtype;
  plan.output = {x->dtype, std::move(out)};
  return plan;
}

// ---- Element-wise math, clamp, where ----

// A kNumber attribute as a double: its float value, or its integer value converted.
std::optional<double> ReadNumber(const AttrMap& attrs, absl::string_view name) {
  if (std::optional<int64_t> value = ReadAttr<int64_t>(attrs, name)) {
    return static_cast<double>(*value);
  }
  return ReadAttr<double>(attrs, name);
}

// The dtype of ops that compute in floating point: floating dtypes stay, integers give
// float32 (as true division does).
DType FloatingOrFloat32(DType dtype) { return IsFloating(dtype) ? dtype : DType::kFloat32; }

// The element-wise math ops. Those that compute in floating point give float32 for an
// integer input; abs, neg and relu keep an integer input's dtype.
absl::StatusOr<OpPlan> PlanUnaryFloat(absl::Span<const OperandDesc> in, const AttrMap&) {
  const DType dtype = FloatingOrFloat32(in[0].tensor.dtype);  // Plan checked: an array
  OpPlan plan;
  plan.compute_dtype = dtype;
  plan.output = {dtype, in[0].tensor.shape};
  return plan;
}

absl::StatusOr<OpPlan> PlanUnaryKeepingIntegers(absl::Span<const OperandDesc> in, const AttrMap&) {
  OpPlan plan;
  plan.compute_dtype = in[0].tensor.dtype;  // Plan checked: an array
  plan.output = in[0].tensor;
  return plan;
}

// A clamp bound: a number attribute, which must fit an integer input's dtype when it is an
// integer, and must not be NaN.
absl::StatusOr<std::optional<ScalarValue>> ClampBound(const AttrMap& attrs, absl::string_view name,
                                                      DType x_dtype) {
  ScalarValue bound;
  if (const std::optional<double> value = ReadAttr<double>(attrs, name)) {
    if (std::isnan(*value)) {
      return absl::InvalidArgumentError(absl::StrCat("attribute \"", name, "\" is NaN"));
    }
    bound.is_float = true;
    bound.float_value = *value;
    return std::optional<ScalarValue>(bound);
  }
  const std::optional<int64_t> value = ReadAttr<int64_t>(attrs, name);
  if (!value.has_value()) return std::optional<ScalarValue>();
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  if (x_dtype == DType::kInt32) {
    lo = std::numeric_limits<int32_t>::min();
    hi = std::numeric_limits<int32_t>::max();
  } else if (x_dtype == DType::kUInt8) {
    lo = 0;
    hi = 255;
  }
  if (*value < lo || *value > hi) {
    return absl::InvalidArgumentError(absl::StrCat("attribute \"", name, "\" = ", *value,
                                                   " is out of range for ", DTypeName(x_dtype)));
  }
  bound.int_value = *value;
  return std::optional<ScalarValue>(bound);
}

absl::StatusOr<OpPlan> PlanClamp(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  const TensorDesc* x = &in[0].tensor;
  OpPlan plan;
  GPUKIT_ASSIGN_OR_RETURN(plan.params.clamp_min, ClampBound(attrs, "min", x->dtype));
  GPUKIT_ASSIGN_OR_RETURN(plan.params.clamp_max, ClampBound(attrs, "max", x->dtype));
  DType dtype = x->dtype;
  // As with a float scalar in add: an integer array with a float bound computes in float32.
  const bool float_bound = (plan.params.clamp_min.has_value() && plan.params.clamp_min->is_float) ||
                           (plan.params.clamp_max.has_value() && plan.params.clamp_max->is_float);
  if (float_bound && !IsFloating(dtype)) dtype = DType::kFloat32;
  plan.compute_dtype = dtype;
  plan.output = {dtype, x->shape};
  return plan;
}

absl::StatusOr<OpPlan> PlanWhere(absl::Span<const OperandDesc> in, const AttrMap&) {
  const TensorDesc* cond = &in[0].tensor;
  // a and b follow add's rules (dtype promotion, scalars); cond only joins the broadcast.
  GPUKIT_ASSIGN_OR_RETURN(OpPlan plan, PlanBinary(in.subspan(1), /*true_divide=*/false));
  GPUKIT_ASSIGN_OR_RETURN(plan.output.shape, BroadcastShapes(cond->shape, plan.output.shape));
  return plan;
}

// ---- Reductions to indices, normalisations ----

// argmax takes one axis or none, as NumPy's does.
absl::StatusOr<OpPlan> PlanArgmax(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  const TensorDesc* x = &in[0].tensor;
  const std::optional<int64_t> axis = ReadAttr<int64_t>(attrs, "axis");
  const int rank = static_cast<int>(x->shape.size());
  OpPlan plan;
  plan.compute_dtype = x->dtype;
  plan.params.keepdims = ReadAttr<bool>(attrs, "keepdims").value_or(false);
  std::vector<bool> reduced(rank, true);
  if (axis.has_value()) {
    GPUKIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*axis, rank, "attribute \"axis\""));
    plan.params.axis = ax;
    reduced.assign(rank, false);
    reduced[ax] = true;
  }
  GPUKIT_ASSIGN_OR_RETURN(Shape out_shape, ReducedShape(*x, reduced, plan.params.keepdims,
                                                        /*needs_identity=*/true, "argmax"));
  plan.output = {DType::kInt64, std::move(out_shape)};
  return plan;
}

// The axis an op works along: attribute "axis" if given, else the last one.
absl::StatusOr<int> AxisOrLast(const TensorDesc& x, const AttrMap& attrs, absl::string_view op) {
  const int rank = static_cast<int>(x.shape.size());
  const std::optional<int64_t> axis = ReadAttr<int64_t>(attrs, "axis");
  if (rank == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " needs an array of rank >= 1, got a 0-d array"));
  }
  return NormalizeAxis(axis.value_or(-1), rank, "attribute \"axis\"");
}

absl::StatusOr<OpPlan> PlanSoftmax(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  const TensorDesc* x = &in[0].tensor;
  OpPlan plan;
  GPUKIT_ASSIGN_OR_RETURN(int axis, AxisOrLast(*x, attrs, "softmax"));
  plan.params.axis = axis;
  plan.compute_dtype = FloatingOrFloat32(x->dtype);
  plan.output = {plan.compute_dtype, x->shape};
  return plan;
}

// layernorm (x, weight?, bias?) and rmsnorm (x, weight?): over the last axis; weight and
// bias are vectors of the last dimension's length.
absl::StatusOr<OpPlan> PlanNorm(absl::Span<const OperandDesc> in, const AttrMap& attrs,
                                absl::string_view op, double default_eps) {
  const TensorDesc* x = &in[0].tensor;
  if (x->shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " needs an array of rank >= 1, got a 0-d array"));
  }
  DType dtype = x->dtype;
  for (size_t i = 1; i < in.size(); ++i) {
    const TensorDesc* v = &in[i].tensor;
    const char* what = i == 1 ? "weight" : "bias";
    if (v->shape.size() != 1 || v->shape[0] != x->shape.back()) {
      return absl::InvalidArgumentError(absl::StrCat(op, " inputs[", i, "] (", what,
                                                     ") must have shape [", x->shape.back(),
                                                     "], got ", ShapeToString(v->shape)));
    }
    dtype = PromoteTypes(dtype, v->dtype);
  }
  const std::optional<double> eps = ReadNumber(attrs, "eps");
  OpPlan plan;
  plan.params.eps = eps.value_or(default_eps);
  if (!(plan.params.eps >= 0) || std::isinf(plan.params.eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute \"eps\" = ", plan.params.eps, " must be finite and >= 0"));
  }
  plan.compute_dtype = FloatingOrFloat32(dtype);
  plan.output = {plan.compute_dtype, x->shape};
  return plan;
}

absl::StatusOr<OpPlan> PlanLayerNorm(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  return PlanNorm(in, attrs, "layernorm", 1e-5);
}
absl::StatusOr<OpPlan> PlanRmsNorm(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  return PlanNorm(in, attrs, "rmsnorm", 1e-6);
}

// ---- Transformer building blocks ----

absl::StatusOr<OpPlan> PlanRope(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  const TensorDesc* x = &in[0].tensor;
  if (x->shape.size() < 2 || x->shape.back() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope needs an array [..., seq, dim] with an even dim, got ", ShapeToString(x->shape)));
  }
  const std::optional<double> base = ReadNumber(attrs, "base");
  const std::optional<int64_t> offset = ReadAttr<int64_t>(attrs, "offset");
  OpPlan plan;
  plan.params.rope_base = base.value_or(10000.0);
  plan.params.rope_offset = offset.value_or(0);
  if (!(plan.params.rope_base > 0) || std::isinf(plan.params.rope_base)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute \"base\" = ", plan.params.rope_base, " must be finite and > 0"));
  }
  if (plan.params.rope_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute \"offset\" = ", plan.params.rope_offset, " must be >= 0"));
  }
  plan.compute_dtype = FloatingOrFloat32(x->dtype);
  plan.output = {plan.compute_dtype, x->shape};
  return plan;
}

absl::StatusOr<OpPlan> PlanAttention(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  const char* const names[] = {"q", "k", "v"};
  const TensorDesc* t[3];
  for (int i = 0; i < 3; ++i) {
    t[i] = &in[i].tensor;
    if (t[i]->shape.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat("attention inputs[", i, "] (", names[i],
                                                     ") must be [heads, seq, dim], got ",
                                                     ShapeToString(t[i]->shape)));
    }
  }
  const Shape &q = t[0]->shape, &k = t[1]->shape, &v = t[2]->shape;
  if (k[0] != q[0] || v[0] != q[0]) {
    return absl::InvalidArgumentError(absl::StrCat("attention heads differ: q ", ShapeToString(q),
                                                   ", k ", ShapeToString(k), ", v ",
                                                   ShapeToString(v)));
  }
  if (k[2] != q[2]) {
    return absl::InvalidArgumentError(absl::StrCat("attention q ", ShapeToString(q), " and k ",
                                                   ShapeToString(k), " differ in dim"));
  }
  if (v[1] != k[1]) {
    return absl::InvalidArgumentError(absl::StrCat("attention k ", ShapeToString(k), " and v ",
                                                   ShapeToString(v), " differ in seq"));
  }
  const std::optional<bool> causal = ReadAttr<bool>(attrs, "causal");
  const std::optional<double> scale = ReadNumber(attrs, "scale");
  OpPlan plan;
  plan.params.causal = causal.value_or(false);
  plan.params.scale = scale.value_or(q[2] > 0 ? 1.0 / std::sqrt(static_cast<double>(q[2])) : 1.0);
  if (!std::isfinite(plan.params.scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute \"scale\" = ", plan.params.scale, " must be finite"));
  }
  plan.compute_dtype =
      FloatingOrFloat32(PromoteTypes(PromoteTypes(t[0]->dtype, t[1]->dtype), t[2]->dtype));
  plan.output = {plan.compute_dtype, {q[0], q[1], v[2]}};
  return plan;
}

absl::StatusOr<OpPlan> PlanEmbedding(absl::Span<const OperandDesc> in, const AttrMap&) {
  const TensorDesc* table = &in[0].tensor;
  const TensorDesc* indices = &in[1].tensor;
  if (table->shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "embedding inputs[0] (table) must be [vocab, dim], got ", ShapeToString(table->shape)));
  }
  // Plan checked that the indices are int32 or int64 (the op's InputSpec).
  Shape out = indices->shape;
  out.push_back(table->shape[1]);
  GPUKIT_RETURN_IF_ERROR(ValidateShape(out, "embedding output shape"));
  OpPlan plan;
  plan.compute_dtype = table->dtype;  // the table is not converted; the indices never are
  plan.output = {table->dtype, std::move(out)};
  return plan;
}

absl::StatusOr<OpPlan> PlanConcat(absl::Span<const OperandDesc> in, const AttrMap& attrs) {
  const TensorDesc* first = &in[0].tensor;
  const int rank = static_cast<int>(first->shape.size());
  if (rank == 0) {
    return absl::InvalidArgumentError("concat cannot join 0-d arrays");
  }
  GPUKIT_ASSIGN_OR_RETURN(int axis, NormalizeAxis(ReadAttr<int64_t>(attrs, "axis").value_or(0),
                                                  rank, "attribute \"axis\""));
  Shape out = first->shape;
  DType dtype = first->dtype;
  for (size_t i = 1; i < in.size(); ++i) {
    const TensorDesc* x = &in[i].tensor;
    bool same = static_cast<int>(x->shape.size()) == rank;
    for (int d = 0; same && d < rank; ++d) same = d == axis || x->shape[d] == first->shape[d];
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          "concat inputs[", i, "] ", ShapeToString(x->shape), " does not match inputs[0] ",
          ShapeToString(first->shape), " outside axis ", axis));
    }
    if (__builtin_add_overflow(out[axis], x->shape[axis], &out[axis])) {
      return absl::InvalidArgumentError("concat output overflows int64 elements");
    }
    dtype = PromoteTypes(dtype, x->dtype);
  }
  GPUKIT_RETURN_IF_ERROR(ValidateShape(out, "concat output shape"));
  OpPlan plan;
  plan.params.axis = axis;
  plan.compute_dtype = dtype;
  plan.output = {dtype, std::move(out)};
  return plan;
}

// ---- The table ----

// The most inputs one concat takes.
constexpr int kMaxConcatInputs = 64;

// Every dtype (runtime/base/dtype.h's kAllDTypes), as an InputSpec lists them.
std::vector<DType> AnyDType() {
  return std::vector<DType>(std::begin(kAllDTypes), std::end(kAllDTypes));
}
// An input that accepts an array of any dtype.
InputSpec Array(std::string name) { return {std::move(name), AnyDType(), /*scalar_ok=*/false}; }
// An input that accepts an array of any dtype or a scalar.
InputSpec ArrayOrScalar(std::string name) {
  return {std::move(name), AnyDType(), /*scalar_ok=*/true};
}

AttrSpec Optional(std::string name, AttrType type, std::string default_value, std::string doc) {
  return {std::move(name), type, /*required=*/false, std::move(default_value), std::move(doc)};
}
AttrSpec Required(std::string name, AttrType type, std::string doc) {
  return {std::move(name), type, /*required=*/true, "", std::move(doc)};
}

// The attributes of the reductions sum, mean, max, min (several axes) and argmax (one).
std::vector<AttrSpec> ReduceAttrs(AttrType axis_type) {
  return {Optional("axis", axis_type, "all axes",
                   axis_type == AttrType::kAxes
                       ? "the axis or list of axes to reduce (negative count back; [] none)"
                       : "the axis to reduce (negative counts back)"),
          Optional("keepdims", AttrType::kBool, "false", "keep reduced axes with extent 1")};
}

// a + b, a - b, a * b, a / b.
OpDef Arithmetic(std::string name, std::string summary,
                 absl::StatusOr<OpPlan> (*plan)(absl::Span<const OperandDesc>, const AttrMap&),
                 CpuOpKernel cpu) {
  return {.name = std::move(name),
          .summary = std::move(summary),
          .min_inputs = 2,
          .max_inputs = 2,
          .inputs = {ArrayOrScalar("a"), ArrayOrScalar("b")},
          .plan = plan,
          .cpu = cpu,
          .cuda = &cuda_ops::Binary};
}

// sum, mean, max, min.
OpDef Reduction(std::string name, std::string summary,
                absl::StatusOr<OpPlan> (*plan)(absl::Span<const OperandDesc>, const AttrMap&),
                CpuOpKernel cpu) {
  return {.name = std::move(name),
          .summary = std::move(summary),
          .inputs = {Array("x")},
          .attrs = ReduceAttrs(AttrType::kAxes),
          .plan = plan,
          .cpu = cpu,
          .cuda = &cuda_ops::Reduce};
}

// What an element-wise math op gives for an integer input.
enum class IntegerInput { kGivesFloat32, kKeepsItsDtype };

// The element-wise math ops (kernels/cuda/unary.cu's "gk_<name>_<dtype>").
OpDef ElementWise(std::string name, std::string summary, IntegerInput integers, CpuOpKernel cpu) {
  return {.name = std::move(name),
          .summary = std::move(summary),
          .inputs = {Array("x")},
          .plan = integers == IntegerInput::kKeepsItsDtype ? &PlanUnaryKeepingIntegers
                                                           : &PlanUnaryFloat,
          .cpu = cpu,
          .cuda = &cuda_ops::Unary};
}

#if GPUKIT_FAULT_INJECTION
// The fault-injection ops (IsTestOnlyOp): one array in, an array of its shape and dtype out.
// What they do to the device is the CPU backend's (runtime/cpu/cpu_op_kernels.h); no other
// backend runs them.

OpDef TestOnlyOp(std::string name, std::string summary, CpuOpKernel cpu,
                 bool cpu_on_stream_thread) {
  return {.name = std::move(name),
          .summary = std::move(summary),
          .inputs = {Array("x")},
          .plan = &PlanUnaryKeepingIntegers,  // the input's shape and dtype
          .cpu = cpu,
          .cpu_on_stream_thread = cpu_on_stream_thread};
}
#endif  // GPUKIT_FAULT_INJECTION

using kernels::BinaryOp;
using kernels::ReduceOp;
using kernels::UnaryOp;

std::vector<OpDef> BuiltinOps() {
  std::vector<OpDef> ops = {
      // ---- Arithmetic with broadcasting ----
      Arithmetic("add", "a + b, NumPy broadcasting; either may be a scalar", &PlanAddSubMul,
                 &cpu_ops::Binary<BinaryOp::kAdd>),
      Arithmetic("sub", "a - b, NumPy broadcasting; either may be a scalar", &PlanAddSubMul,
                 &cpu_ops::Binary<BinaryOp::kSub>),
      Arithmetic("mul", "a * b, NumPy broadcasting; either may be a scalar", &PlanAddSubMul,
                 &cpu_ops::Binary<BinaryOp::kMul>),
      Arithmetic("div", "a / b (true division: integers give float32); either may be a scalar",
                 &PlanDiv, &cpu_ops::Binary<BinaryOp::kDiv>),
      {.name = "matmul",
       .summary =
           "a @ b for [..., m, k] x [..., k, n], batch dims broadcast; allow_tf32: float32 in TF32",
       .min_inputs = 2,
       .max_inputs = 2,
       .inputs = {Array("a"), Array("b")},
       .attrs = {Optional("allow_tf32", AttrType::kBool, "false",
                          "float32 may round its inputs to TF32 on tensor cores (about 1e-3 "
                          "relative error, several times faster)")},
       .plan = &PlanMatmul,
       .cpu = &cpu_ops::Matmul,
       .cuda = &cuda_ops::Matmul,
       .cuda_library = CudaLibrary::kCublasLtMatmul},

      // ---- Reductions ----
      Reduction("sum", "sum of all elements or over axis (one or a list); integers sum into int64",
                &PlanSum, &cpu_ops::Reduce<ReduceOp::kSum>),
      Reduction("mean", "mean of all elements or over axis (one or a list); integers give float32",
                &PlanMean, &cpu_ops::Reduce<ReduceOp::kMean>),
      Reduction("max", "maximum of all elements or over axis (one or a list); NaN propagates",
                &PlanMax, &cpu_ops::Reduce<ReduceOp::kMax>),
      Reduction("min", "minimum of all elements or over axis (one or a list); NaN propagates",
                &PlanMin, &cpu_ops::Reduce<ReduceOp::kMin>),
      // ---- Dtype and layout ----
      {.name = "astype",
       .summary = "convert to attribute dtype",
       .inputs = {Array("x")},
       .attrs = {Required("dtype", AttrType::kDType, "the output's dtype")},
       .plan = &PlanAstype,
       .cpu = &cpu_ops::Astype,
       .cuda = &cuda_ops::Astype},
      {.name = "reshape",
       .summary = "same elements in attribute shape (one -1 is inferred)",
       .inputs = {Array("x")},
       .attrs = {Required("shape", AttrType::kIntList,
                          "the output's shape, as many elements; one entry may be -1")},
       .plan = &PlanReshape,
       .cpu = &cpu_ops::Reshape,
       .cuda = &cuda_ops::Reshape},
      {.name = "transpose",
       .summary = "permute axes by attribute perm (default: reverse them)",
       .inputs = {Array("x")},
       .attrs = {Optional("perm", AttrType::kIntList, "the axes reversed",
                          "output axis i is input axis perm[i]")},
       .plan = &PlanTranspose,
       .cpu = &cpu_ops::Transpose,
       .cuda = &cuda_ops::Transpose},
      // ---- Element-wise math ----
      ElementWise("exp", "e^x element-wise; integers give float32", IntegerInput::kGivesFloat32,
                  &cpu_ops::Unary<UnaryOp::kExp>),
      ElementWise("log",
                  "natural logarithm element-wise (NaN below 0, -inf at 0); integers give "
                  "float32",
                  IntegerInput::kGivesFloat32, &cpu_ops::Unary<UnaryOp::kLog>),
      ElementWise("sqrt", "square root element-wise (NaN below 0); integers give float32",
                  IntegerInput::kGivesFloat32, &cpu_ops::Unary<UnaryOp::kSqrt>),
      ElementWise("rsqrt", "1 / sqrt(x) element-wise (inf at 0); integers give float32",
                  IntegerInput::kGivesFloat32, &cpu_ops::Unary<UnaryOp::kRsqrt>),
      ElementWise("abs", "|x| element-wise; integers keep their dtype (abs of the minimum wraps)",
                  IntegerInput::kKeepsItsDtype, &cpu_ops::Unary<UnaryOp::kAbs>),
      ElementWise("neg", "-x element-wise; integers keep their dtype and wrap",
                  IntegerInput::kKeepsItsDtype, &cpu_ops::Unary<UnaryOp::kNeg>),
      ElementWise("relu", "max(x, 0) element-wise, NaN propagates; integers keep their dtype",
                  IntegerInput::kKeepsItsDtype, &cpu_ops::Unary<UnaryOp::kRelu>),
      ElementWise("gelu",
                  "x * Phi(x), the exact erf form 0.5 x (1 + erf(x / sqrt 2)); integers give "
                  "float32",
                  IntegerInput::kGivesFloat32, &cpu_ops::Unary<UnaryOp::kGelu>),
      ElementWise("silu", "x * sigmoid(x) element-wise; integers give float32",
                  IntegerInput::kGivesFloat32, &cpu_ops::Unary<UnaryOp::kSilu>),
      ElementWise("sigmoid", "1 / (1 + e^-x) element-wise; integers give float32",
                  IntegerInput::kGivesFloat32, &cpu_ops::Unary<UnaryOp::kSigmoid>),
      ElementWise("tanh", "hyperbolic tangent element-wise; integers give float32",
                  IntegerInput::kGivesFloat32, &cpu_ops::Unary<UnaryOp::kTanh>),
      {.name = "clamp",
       .summary = "min(max(x, attribute min), attribute max), either bound optional; NaN stays NaN",
       .inputs = {Array("x")},
       .attrs = {Optional("min", AttrType::kNumber, "none",
                          "lower bound; an integer one must fit an integer x's dtype"),
                 Optional("max", AttrType::kNumber, "none",
                          "upper bound; an integer one must fit an integer x's dtype")},
       .plan = &PlanClamp,
       .cpu = &cpu_ops::Clamp,
       .cuda = &cuda_ops::Clamp},
      {.name = "where",
       .summary =
           "cond ? a : b element-wise with broadcasting; cond nonzero is true; a, b may be scalars",
       .min_inputs = 3,
       .max_inputs = 3,
       .inputs = {Array("cond"), ArrayOrScalar("a"), ArrayOrScalar("b")},
       .plan = &PlanWhere,
       .cpu = &cpu_ops::Where,
       .cuda = &cuda_ops::Where},

      // ---- Reductions to indices, normalisations, transformer building blocks ----
      {.name = "argmax",
       .summary =
           "int64 index of the first maximum, of all elements or along axis; NaN counts as maximum",
       .inputs = {Array("x")},
       .attrs = ReduceAttrs(AttrType::kInt),
       .plan = &PlanArgmax,
       .cpu = &cpu_ops::Argmax,
       .cuda = &cuda_ops::Argmax},
      {.name = "softmax",
       .summary = "exp(x - max) / sum along attribute axis (default -1); integers give float32",
       .inputs = {Array("x")},
       .attrs = {Optional("axis", AttrType::kInt, "-1", "the axis to normalise along")},
       .plan = &PlanSoftmax,
       .cpu = &cpu_ops::Softmax,
       .cuda = &cuda_ops::Softmax},
      {.name = "layernorm",
       .summary =
           "(x - mean) / sqrt(var + eps) * weight + bias over the last axis; weight, bias optional",
       .min_inputs = 1,
       .max_inputs = 3,
       .inputs = {Array("x"), Array("weight"), Array("bias")},
       .attrs = {Optional("eps", AttrType::kNumber, "1e-5", "added to the variance, >= 0")},
       .plan = &PlanLayerNorm,
       .cpu = &cpu_ops::LayerNorm,
       .cuda = &cuda_ops::Norm},
      {.name = "rmsnorm",
       .summary = "x / sqrt(mean(x^2) + eps) * weight over the last axis; weight optional",
       .min_inputs = 1,
       .max_inputs = 2,
       .inputs = {Array("x"), Array("weight")},
       .attrs = {Optional("eps", AttrType::kNumber, "1e-6", "added to the mean square, >= 0")},
       .plan = &PlanRmsNorm,
       .cpu = &cpu_ops::RmsNorm,
       .cuda = &cuda_ops::Norm},
      {.name = "rope",
       .summary = "rotary position embedding of [..., seq, dim], rotate-half (GPT-NeoX) convention",
       .inputs = {Array("x")},
       .attrs = {Optional("base", AttrType::kNumber, "10000",
                          "theta_i = position * base^(-2i / dim); finite, > 0"),
                 Optional("offset", AttrType::kInt, "0",
                          "position of the sequence's first row, >= 0")},
       .plan = &PlanRope,
       .cpu = &cpu_ops::Rope,
       .cuda = &cuda_ops::Rope},
      {.name = "attention",
       .summary =
           "softmax(scale q k^T [+ causal mask]) v for q [h, sq, d], k [h, sk, d], v [h, sk, dv]",
       .min_inputs = 3,
       .max_inputs = 3,
       .inputs = {Array("q"), Array("k"), Array("v")},
       .attrs = {Optional("causal", AttrType::kBool, "false",
                          "query i sees keys up to i + sk - sq only"),
                 Optional("scale", AttrType::kNumber, "1/sqrt(d)", "the factor of q . k")},
       .plan = &PlanAttention,
       .cpu = &cpu_ops::Attention,
       .cuda = &cuda_ops::Attention},
      {.name = "embedding",
       .summary =
           "rows of table [vocab, dim] at int32/int64 indices; out-of-range indices give zeros",
       .min_inputs = 2,
       .max_inputs = 2,
       .inputs = {Array("table"), {"indices", {DType::kInt32, DType::kInt64}, false}},
       .plan = &PlanEmbedding,
       .cpu = &cpu_ops::Embedding,
       .cuda = &cuda_ops::Embedding},
      {.name = "concat",
       .summary = "join 2 or more arrays along attribute axis (default 0); dtypes promote",
       .min_inputs = 2,
       .max_inputs = kMaxConcatInputs,
       .inputs = {Array("arrays")},
       .attrs = {Optional("axis", AttrType::kInt, "0", "the axis to join along")},
       .plan = &PlanConcat,
       .cpu = &cpu_ops::Concat,
       .cuda = &cuda_ops::Concat},
  };
#if GPUKIT_FAULT_INJECTION
  for (OpDef& op : std::vector<OpDef>{
           TestOnlyOp("_test_fault",
                      "test builds only: a simulated sticky device fault that poisons the "
                      "device (as a CUDA illegal address poisons its context)",
                      &cpu_ops::TestFault, /*cpu_on_stream_thread=*/false),
           TestOnlyOp("_test_hang",
                      "test builds only: work that never finishes, blocking its stream until "
                      "the process is killed",
                      &cpu_ops::TestHang, /*cpu_on_stream_thread=*/true),
           TestOnlyOp("_test_abort", "test builds only: work that aborts the process (SIGABRT)",
                      &cpu_ops::TestAbort, /*cpu_on_stream_thread=*/true),
           TestOnlyOp("_test_error",
                      "test builds only: work that fails on its own, leaving the device "
                      "healthy (as a launch the driver refuses)",
                      &cpu_ops::TestError, /*cpu_on_stream_thread=*/false),
       }) {
    ops.push_back(std::move(op));
  }
#endif  // GPUKIT_FAULT_INJECTION
  return ops;
}

}  // namespace

bool IsTestOnlyOp(absl::string_view name) { return absl::StartsWith(name, kTestOnlyOpPrefix); }

const OpRegistry& OpRegistry::Builtin() {
  static const OpRegistry* registry = new OpRegistry(BuiltinOps());
  return *registry;
}

}  // namespace gpukit
